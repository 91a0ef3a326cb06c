"""Read a pickle (raw, or inside a `torch.save` zip) that may hold built-in types only.

Why: a pickle is a program: its GLOBAL/REDUCE opcodes import any callable and call it (`os.system` included),
so a plain `pickle.load` of a file a training job wrote runs whatever that file says. miles' rollout dumps
(`dump_details/rollout_data/<N>.pt`) hold only dicts, lists, strings and numbers for the Ultra recipe, so
this unpickler refuses every class (`find_class` raises) and every persistent id (torch's tensor storages):
nothing is imported, nothing is called. What it returns is built from pickle's own opcodes only (dict, list,
tuple, set, frozenset, str, bytes, bytearray, int, float, bool, None). A file that needs more (numpy arrays
from routing replay, miles' dataclasses with multi-LoRA) is refused with one line naming what it holds.
"""

from __future__ import annotations

import gc
import io
import os
import pickle
import pickletools
import threading
import zipfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import NoReturn

from backend.errors import ConsoleError
from backend.regular_files import open_regular

MAX_BYTES = 1 << 30  # a pickle larger than this is refused before it is read (a full rollout is ~38 MB)
MAX_RATIO = 20  # a compressed member may unpack to at most this many times its size (pickled text: ~5)
SCAN_BYTES = 8 << 20  # how much of a refused pickle is scanned to name what it holds
MAX_NAMES = 6
READ_BUFFER = 1 << 16
# While a pickle is read, the process may grow by at most this (address space): the objects a pickle of
# built-in types builds take ~7x its bytes (a list of ints), and a memo index of 2**30 in an 8-byte pickle
# made the C unpickler allocate and zero 16 GB (38 s) before the first object; capped, it is one line.
GROWTH_MIN = 512 << 20
GROWTH_RATIO = 32
# The cap is the process's: two reads in two threads take turns, or the one ending first would lift the
# other's cap, and the other would then restore the first's cap for ever.
_CAP_LOCK = threading.Lock()
DATA_PKL = "data.pkl"
_STRING_OPS = frozenset({"SHORT_BINUNICODE", "BINUNICODE", "BINUNICODE8", "UNICODE", "SHORT_BINSTRING"})
_PUT_OPS = frozenset({"PUT", "BINPUT", "LONG_BINPUT"})
_GET_OPS = frozenset({"GET", "BINGET", "LONG_BINGET"})
_QUIET_OPS = frozenset({"PROTO", "FRAME", "STOP"})  # push nothing


class SafeUnpickleError(ConsoleError):
    """The file could not be read as a pickle of built-in types."""


class PickleRefusedError(SafeUnpickleError):
    """The pickle names a class or a persistent id: reading it would import (and maybe run) code."""

    def __init__(self, source: str, holds: tuple[str, ...]) -> None:
        self.source = source
        self.holds = holds
        held = ", ".join(holds)
        super().__init__(f"{source} needs torch/miles to read: it holds {held} (refused, not run)")


class BrokenPickleError(SafeUnpickleError):
    """Not a complete pickle or torch zip: truncated (maybe still being written), corrupt, or not a pickle."""


class _Refusal(Exception):
    """Raised inside the unpickler; turned into PickleRefusedError with every name the pickle holds."""

    def __init__(self, first: str) -> None:
        super().__init__(first)
        self.first = first


class _BuiltinsOnly(pickle.Unpickler):
    """An unpickler that imports nothing and resolves no persistent id."""

    def find_class(self, module: str, name: str) -> NoReturn:
        raise _Refusal(f"{module}.{name}")

    def persistent_load(self, pid: object) -> NoReturn:
        kind = pid[0] if isinstance(pid, tuple) and pid and isinstance(pid[0], str) else type(pid).__name__
        raise _Refusal(f"a persistent id ({kind}: a torch tensor storage)")


def loads(data: bytes, source: str = "pickle") -> object:
    """The object a pickle of built-in types holds; PickleRefusedError / BrokenPickleError otherwise."""
    paused = gc.isenabled()
    if paused:  # millions of new lists and numbers, none garbage yet: the cyclic GC would walk them all again
        gc.disable()  # and again while they are built (a third of a full rollout's read)
    try:
        return _load(data, source)
    finally:
        if paused:
            gc.enable()


def _load(data: bytes, source: str) -> object:
    try:
        # A BufferedReader, not a bare BytesIO: the C unpickler prefetches through `peek`, and a protocol-2
        # pickle (torch's default, no frames) read through BytesIO costs one read() call per opcode (2.7x).
        with _CAP_LOCK, _growth_capped(max(GROWTH_MIN, GROWTH_RATIO * len(data))):
            return _BuiltinsOnly(io.BufferedReader(io.BytesIO(data), READ_BUFFER)).load()
    except _Refusal as refusal:
        raise PickleRefusedError(source, _names_held(data, refusal.first)) from None
    except (pickle.UnpicklingError, EOFError, ValueError, IndexError, KeyError, TypeError) as err:
        raise BrokenPickleError(f"{source} is not a complete pickle ({type(err).__name__}: {err})") from None
    except RecursionError:
        raise BrokenPickleError(f"{source} nests too deeply to read") from None
    except MemoryError:  # a length or memo index of terabytes, or past the growth cap: a pickle bomb
        raise BrokenPickleError(
            f"{source} asks for more memory than a pickle of {len(data):,} bytes can need: not read"
        ) from None


def _address_space() -> int | None:
    """This process's virtual size in bytes (None where /proc does not say)."""
    try:
        with open("/proc/self/statm", "rb") as fh:
            return int(fh.read().split()[0]) * os.sysconf("SC_PAGE_SIZE")
    except (OSError, ValueError, IndexError):
        return None


@contextmanager
def _growth_capped(growth: int) -> Iterator[None]:
    """Within the block, an allocation that would grow the process by more than `growth` bytes fails with
    MemoryError (RLIMIT_AS; restored after). Without /proc or `resource`, or under a tighter limit already
    set, the block runs as it is."""
    try:
        import resource
    except ImportError:  # not a POSIX system
        yield
        return
    size = _address_space()
    soft, hard = resource.getrlimit(resource.RLIMIT_AS)
    cap = None if size is None else size + growth
    if cap is None or (soft != resource.RLIM_INFINITY and soft <= cap):
        yield
        return
    if hard != resource.RLIM_INFINITY:
        cap = min(cap, hard)
    resource.setrlimit(resource.RLIMIT_AS, (cap, hard))
    try:
        yield
    finally:
        resource.setrlimit(resource.RLIMIT_AS, (soft, hard))


def load_path(path: str | os.PathLike[str], max_bytes: int = MAX_BYTES) -> object:
    """The built-in object a `torch.save` zip (its `<stem>/data.pkl`) or a raw pickle file holds.

    Raises OSError (missing, unreadable), NotRegularFileError, BrokenPickleError, PickleRefusedError.
    """
    with open_regular(path, "pickle file") as fh:
        size = os.fstat(fh.fileno()).st_size
        if size > max_bytes:
            raise BrokenPickleError(f"{path} is {size} bytes, over the {max_bytes}-byte limit: not read")
        raw = fh.read()
    if zipfile.is_zipfile(io.BytesIO(raw)):
        return loads(_data_pkl(raw, Path(path), max_bytes), f"{path}")
    if raw[:2] == b"PK":
        raise BrokenPickleError(f"{path} is a broken zip (truncated or still being written)")
    return loads(raw, f"{path}")


def _data_pkl(raw: bytes, path: Path, max_bytes: int) -> bytes:
    """The bytes of the archive's one `<stem>/data.pkl` member (the stem's own when there are several)."""
    try:
        with zipfile.ZipFile(io.BytesIO(raw)) as zf:
            members = [i for i in zf.infolist() if i.filename.rsplit("/", 1)[-1] == DATA_PKL]
            own = [i for i in members if i.filename == f"{path.stem}/{DATA_PKL}"]
            chosen = own or members
            if len(chosen) != 1:
                found = "no" if not chosen else f"{len(chosen)}"
                raise BrokenPickleError(f"{path} is a zip with {found} <stem>/{DATA_PKL}: not a torch save")
            _check_member(chosen[0], path, max_bytes)
            return zf.read(chosen[0])
    except MemoryError:
        raise BrokenPickleError(f"{path} asks for more memory than there is: not read") from None
    except (zipfile.BadZipFile, EOFError, OSError, NotImplementedError) as err:
        raise BrokenPickleError(f"{path} is a broken zip ({err})") from None


def _check_member(info: zipfile.ZipInfo, path: Path, max_bytes: int) -> None:
    """Refuse a member over the limit, or a compressed one that unpacks to far more than it holds (a zip
    bomb: torch.save stores its members uncompressed, so any ratio at all is not torch's)."""
    if info.file_size > max_bytes:
        raise BrokenPickleError(f"{path}: {info.filename} is over the {max_bytes}-byte limit")
    if info.compress_type != zipfile.ZIP_STORED and info.file_size > MAX_RATIO * max(
        info.compress_size, 1 << 16
    ):
        raise BrokenPickleError(
            f"{path}: {info.filename} unpacks {info.compress_size} bytes to {info.file_size} "
            "(a zip bomb): not read"
        )


def _names_held(data: bytes, first: str) -> tuple[str, ...]:
    """Every class a refused pickle names (from its opcodes, never by importing), the first refusal first."""
    names = [first]
    try:
        names.extend(_scan_globals(data[:SCAN_BYTES]))
    except Exception:  # a scan past the cut, or a malformed stream: the first name is still true
        pass
    seen = dict.fromkeys(n for n in names if n)
    out = tuple(seen)[:MAX_NAMES]
    return (*out, "…") if len(seen) > MAX_NAMES else out


def _scan_globals(data: bytes) -> list[str]:
    """`module.name` of each GLOBAL / STACK_GLOBAL / INST opcode, and each persistent id, in stream order."""
    scan = _GlobalScan()
    for op, arg, _pos in pickletools.genops(data):
        scan.step(op.name, arg)
    return scan.found


class _GlobalScan:
    """Follows just enough of the stack (last two pushes, memoized strings) to name STACK_GLOBAL's class."""

    def __init__(self) -> None:
        self.found: list[str] = []
        self.pushed: list[str | None] = [None, None]  # the last two pushes; None = not a string
        self.memo: dict[int, str | None] = {}

    def step(self, name: str, arg: object) -> None:
        if name in _QUIET_OPS:
            return
        if name in _PUT_OPS or name == "MEMOIZE":
            index = arg if isinstance(arg, int) and name != "MEMOIZE" else len(self.memo)
            self.memo[index] = self.pushed[-1]
            return
        named = self._named(name, arg)
        if named is not None:
            self.found.append(named)
        self._push(name, arg)

    def _named(self, name: str, arg: object) -> str | None:
        """The class (or persistent id) an opcode names; None for any other opcode."""
        if name in ("GLOBAL", "INST") and isinstance(arg, str):
            return arg.replace(" ", ".", 1)
        if name == "STACK_GLOBAL" and self.pushed[-2] is not None and self.pushed[-1] is not None:
            return f"{self.pushed[-2]}.{self.pushed[-1]}"
        if name in ("BINPERSID", "PERSID"):
            return "a persistent id (a torch tensor storage)"
        return None

    def _push(self, name: str, arg: object) -> None:
        if name in _STRING_OPS and isinstance(arg, str):
            value: str | None = arg
        elif name in _GET_OPS and isinstance(arg, int):
            value = self.memo.get(arg)
        else:
            value = None
        self.pushed = [self.pushed[-1], value]
