"""Hostile input, round 3 (issue 36), the rollout samples reader: a dump a training script wrote is any
pickle of built-in types. One that shares a list with itself 40 levels deep, nests 200 000 lists, asks
for a terabyte or is a zip bomb is read (bounded) or refused in one line: never a hang, never a traceback."""

from __future__ import annotations

import io
import pickle
import struct
import threading
import time
import zipfile
from pathlib import Path

import pytest

from backend.safe_unpickle import BrokenPickleError, SafeUnpickleError, load_path, loads
from backend.signals.rollout_data import read_rollout


def _unicode(text: str) -> bytes:
    data = text.encode()
    return b"X" + struct.pack("<I", len(data)) + data


def _dump_with_response(value: bytes) -> bytes:
    """A protocol-2 pickle of `{"samples": [{"response": <value's opcodes>}]}`."""
    return b"\x80\x02}(" + _unicode("samples") + b"](}(" + _unicode("response") + value + b"ue" + b"u."


def _read_within(path: Path, seconds: float = 10.0) -> object:
    out: list[object] = []

    def run() -> None:
        try:
            out.append(read_rollout(path, now=time.time() + 3600))
        except BaseException as err:  # what came back is under test
            out.append(err)

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    thread.join(seconds)
    assert out, f"reading {path.name} did not end within {seconds} s"
    return out[0]


def test_a_list_shared_with_itself_forty_levels_deep_is_shown_bounded_not_walked(tmp_path: Path) -> None:
    bomb: list[object] = []
    for _ in range(40):
        bomb = [bomb, bomb]  # 81 opcodes on disk, 2**40 leaves for str()
    path = tmp_path / "1.pt"
    path.write_bytes(pickle.dumps({"samples": [{"response": bomb, "weight_versions": [bomb]}]}, protocol=2))
    rollout = _read_within(path)
    assert not isinstance(rollout, BaseException), rollout
    assert len(rollout.samples[0].response) < 10_000  # type: ignore[attr-defined]


def test_two_hundred_thousand_nested_lists_are_one_sample_not_a_recursion_error(tmp_path: Path) -> None:
    depth = 200_000
    path = tmp_path / "2.pt"
    path.write_bytes(_dump_with_response(b"]" * depth + b"a" * (depth - 1)))
    rollout = _read_within(path)
    assert not isinstance(rollout, BaseException), rollout
    assert rollout.samples[0].response.startswith("[[")  # type: ignore[attr-defined]


def test_an_int_of_a_million_digits_is_named_not_a_value_error(tmp_path: Path) -> None:
    path = tmp_path / "3.pt"
    path.write_bytes(pickle.dumps({"samples": [{"response": 7**1_200_000}]}, protocol=2))
    rollout = _read_within(path)
    assert not isinstance(rollout, BaseException), rollout
    assert "bits" in rollout.samples[0].response  # type: ignore[attr-defined]


@pytest.mark.parametrize("opcode", [b"\x8e", b"\x8d", b"\x95"])  # BINBYTES8, BINUNICODE8, FRAME
def test_a_length_of_a_terabyte_is_one_line_not_a_memory_error(opcode: bytes) -> None:
    with pytest.raises(SafeUnpickleError) as err:
        loads(b"\x80\x04" + opcode + struct.pack("<Q", 1 << 40) + b"ab.", "bomb.pt")
    assert "\n" not in str(err.value)


def test_a_pt_zip_bomb_is_refused_before_it_is_unpacked(tmp_path: Path) -> None:
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w", compression=zipfile.ZIP_DEFLATED) as zf:
        zf.writestr("4/data.pkl", b"\0" * (64 << 20))  # 64 MiB from ~64 KiB
    path = tmp_path / "4.pt"
    path.write_bytes(buf.getvalue())
    with pytest.raises(BrokenPickleError, match="zip bomb"):
        load_path(path)


@pytest.mark.parametrize("index", [1 << 26, 1 << 30])
def test_a_memo_index_of_a_billion_is_one_line_not_gigabytes(index: int) -> None:
    """LONG_BINPUT's index sizes the C unpickler's memo: 2**30 in a 9-byte pickle made it allocate and zero
    16 GB (38 s, here) before the first object; the growth cap turns that into one line, at once."""
    import resource

    before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    started = time.monotonic()
    with pytest.raises(BrokenPickleError) as err:
        loads(b"\x80\x02]r" + struct.pack("<I", index) + b".", "bomb.pt")
    grown_mb = (resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - before) / 1024
    assert "more memory than a pickle of 9 bytes can need" in str(err.value) and "\n" not in str(err.value)
    assert time.monotonic() - started < 2 and grown_mb < 256, (time.monotonic() - started, grown_mb)
    assert resource.getrlimit(resource.RLIMIT_AS)[0] == resource.RLIM_INFINITY  # the cap is lifted after


def test_a_real_sized_rollout_reads_under_the_growth_cap() -> None:
    samples = [
        {"tokens": list(range(4000)), "response": "x" * 4000, "group_index": i // 8} for i in range(64)
    ]
    data = pickle.dumps({"samples": samples}, protocol=2)
    assert loads(data, "real.pt") == {"samples": samples}


def test_reads_that_overlap_in_threads_leave_no_cap_behind(monkeypatch: pytest.MonkeyPatch) -> None:
    """The growth cap is the process's: a read that starts while another is inside its cap, and ends after it,
    would restore the other's cap for ever (reads take turns)."""
    import resource

    import backend.safe_unpickle as safe

    class Slow(safe._BuiltinsOnly):
        def load(self) -> object:
            # the GIL let go, as a long read lets other threads run; the second read ends after the first
            time.sleep(0.2 if threading.current_thread().name == "second" else 0.05)
            return super().load()

    monkeypatch.setattr(safe, "_BuiltinsOnly", Slow)
    errors: list[BaseException] = []

    big = pickle.dumps("x" * (20 << 20), protocol=2)  # its cap is wider than the small one's (32x 20 MB)

    def read(data: bytes) -> None:
        try:
            loads(data, "real.pt")
        except BaseException as err:  # what a thread met is under test
            errors.append(err)

    first = threading.Thread(target=read, args=(big,))
    first.start()
    time.sleep(0.01)
    second = threading.Thread(target=read, args=(pickle.dumps([1, 2, 3], protocol=2),), name="second")
    second.start()
    first.join(10)
    second.join(10)
    assert not errors, errors
    assert resource.getrlimit(resource.RLIMIT_AS)[0] == resource.RLIM_INFINITY
