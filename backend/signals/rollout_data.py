"""Read miles' per-rollout sample dumps (`{dump_details}/rollout_data/<N>.pt`) without torch.

Why: the operator's question when the reward stalls is "what did the model write?", and miles saves every
rollout's samples there (reference/miles-rollout-data.md). The file is a `torch.save` zip holding a pickle
of built-in types, read through backend.safe_unpickle (a pickle can run code: classes and persistent ids are
refused, never imported). torch.save writes in place, so a reader can catch a half-written file: a broken
zip, or a file whose size or mtime moved while it was read, is "still being written" while it is young
(miles' own reader waits 60 s) and is read again at the next poll, never shown as an empty rollout. Only
what the screens show is kept: token ids and log-probs are dropped once their lengths are taken, and the
text is sanitised here, once, so no escape sequence from a sample reaches a terminal.
"""

from __future__ import annotations

import math
import os
import re
import reprlib
import threading
import time
from collections import OrderedDict
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from backend.regular_files import NotRegularFileError
from backend.safe_unpickle import BrokenPickleError, PickleRefusedError, load_path
from backend.sanitize import sanitize_text

ROLLOUT_DATA = "rollout_data"
FRESH_S = 60.0  # a broken file younger than this is still being written (miles' DumpReader.FRESH_SECONDS)
MAX_TEXT = 256 * 1024  # characters kept of one prompt or response (a full 8192-token response is ~40 K)
MAX_LENGTH = 1 << 31  # a token count past this is not a real one (a hostile file): clamped
KEPT_ROLLOUTS = 4  # full rollouts (with their text) held at once; older ones are read again on demand
_NAME = re.compile(r"^(eval_)?(\d{1,9})\.pt$")


class RolloutNotReady(Exception):
    """The file is still being written (a broken zip, or it changed while read): read it again later."""


@dataclass(frozen=True)
class Sample:
    """One generated response, as the screens show it (sanitised text, lengths instead of token lists)."""

    index: int
    group_index: int
    response: str
    response_length: int
    prompt_length: int
    effective_length: int  # sum(loss_mask) when set (multi-turn), else response_length
    reward: float | None  # the task reward (`reward[reward_key]` for a dict), None when unset or not a number
    status: str
    weight_versions: tuple[str, ...]
    label: str
    rollout_key: int | None  # miles' `rollout_id`: siblings of one trajectory share it (None single-turn)
    removed: bool = False

    @property
    def truncated(self) -> bool:
        return self.status == "truncated"


@dataclass(frozen=True)
class RolloutSamples:
    """One rollout file: its samples in file order and each group's prompt (shown once per group)."""

    name: str  # "3" or "eval_3"
    rollout: int
    evaluation: bool
    samples: tuple[Sample, ...]
    prompts: Mapping[int, str]
    bytes_read: int = 0
    written_at: float = math.nan  # the file's mtime: when miles saved it (before its `perf N` line)


@dataclass(frozen=True)
class RolloutFile:
    """A rollout file found on disk (not read yet)."""

    name: str
    rollout: int
    evaluation: bool
    path: Path
    size: int
    mtime: float

    @property
    def sort_key(self) -> tuple[int, int]:
        return (int(self.evaluation), self.rollout)


def rollout_dir(dump_dir: str | os.PathLike[str]) -> Path:
    """`<dump>/rollout_data`, also when given that directory itself or the run directory above the dump
    (`<run>/dump_details/rollout_data`)."""
    given = Path(dump_dir)
    if given.name == ROLLOUT_DATA:
        return given
    inner = given / "dump_details" / ROLLOUT_DATA
    return inner if not (given / ROLLOUT_DATA).is_dir() and inner.is_dir() else given / ROLLOUT_DATA


def list_rollouts(dump_dir: str | os.PathLike[str]) -> list[RolloutFile]:
    """Every `<N>.pt` / `eval_<N>.pt` under the dump's rollout_data, train rollouts first, by number."""
    found: list[RolloutFile] = []
    try:
        entries = list(os.scandir(rollout_dir(dump_dir)))
    except OSError:
        return []
    for entry in entries:
        match = _NAME.match(entry.name)
        if match is None:
            continue
        try:
            st = entry.stat(follow_symlinks=False)
        except OSError:
            continue
        if not entry.is_file(follow_symlinks=False):
            continue
        found.append(
            RolloutFile(
                entry.name[:-3],
                int(match.group(2)),
                bool(match.group(1)),
                Path(entry.path),
                st.st_size,
                st.st_mtime,
            )
        )
    return sorted(found, key=lambda f: f.sort_key)


def read_rollout(
    path: str | os.PathLike[str], *, reward_key: str | None = None, now: float | None = None
) -> RolloutSamples:
    """The samples of one rollout file.

    Raises RolloutNotReady (still being written: retry), PickleRefusedError (it holds objects: one line that
    says what and that it needs torch/miles), BrokenPickleError (an old file that is not a torch save),
    OSError / NotRegularFileError (missing, unreadable, a FIFO).
    """
    file = Path(path)
    before = os.stat(file)
    try:
        obj = load_path(file)
    except BrokenPickleError as err:
        age = (time.time() if now is None else now) - before.st_mtime
        if age < FRESH_S:
            raise RolloutNotReady(f"{file.name} is still being written ({err})") from None
        raise
    after = os.stat(file)
    if (after.st_size, after.st_mtime_ns) != (before.st_size, before.st_mtime_ns):
        raise RolloutNotReady(f"{file.name} changed while it was read (still being written)")
    return _rollout_of(obj, file, reward_key, before.st_size, before.st_mtime)


def _rollout_of(obj: object, file: Path, reward_key: str | None, size: int, mtime: float) -> RolloutSamples:
    if not isinstance(obj, dict) or not isinstance(obj.get("samples"), list):
        raise BrokenPickleError(f"{file.name} holds no `samples` list: not a miles rollout dump")
    stem = file.name[:-3] if file.name.endswith(".pt") else file.stem
    match = _NAME.match(f"{stem}.pt")
    number = obj.get("rollout_id")
    if match is not None:
        rollout, evaluation = int(match.group(2)), bool(match.group(1))
    else:
        rollout, evaluation = (number if isinstance(number, int) else -1), stem.startswith("eval_")
    samples: list[Sample] = []
    prompts: dict[int, str] = {}
    for position, raw in enumerate(obj["samples"]):
        if not isinstance(raw, dict):
            continue
        sample = _sample(raw, position, reward_key)
        samples.append(sample)
        if sample.group_index not in prompts:
            prompts[sample.group_index] = _prompt_text(raw.get("prompt"))
    return RolloutSamples(stem, rollout, evaluation, tuple(samples), prompts, size, mtime)


def _int(value: object, default: int = 0) -> int:
    return value if isinstance(value, int) and not isinstance(value, bool) else default


class _Bounded(reprlib.Repr):
    """A value that is not text, shown in bounded time and size: a dump can hold a list that holds itself
    twice 40 levels down (`str` would walk 2**40 leaves), 200 000 nested lists (`str` overflows the stack)
    or an int of a million digits (`str` refuses it); a few levels and items of each are shown."""

    def __init__(self) -> None:
        super().__init__()
        self.maxlevel = 3
        self.maxlist = self.maxtuple = self.maxdict = self.maxset = self.maxfrozenset = 20
        self.maxstring, self.maxother = 2000, 200

    def repr_int(self, x: int, level: int) -> str:
        return repr(x) if x.bit_length() < 1000 else f"<an int of {x.bit_length()} bits>"


_BOUNDED = _Bounded()


def _text(value: object) -> str:
    if not isinstance(value, str):
        return "" if value is None else sanitize_text(_BOUNDED.repr(value))[:MAX_TEXT]
    return sanitize_text(value[:MAX_TEXT])


def _sample(raw: dict[str, Any], position: int, reward_key: str | None) -> Sample:
    response_length = min(max(0, _int(raw.get("response_length"))), MAX_LENGTH)
    tokens = raw.get("tokens")
    total = len(tokens) if isinstance(tokens, list) else response_length
    mask = raw.get("loss_mask")
    effective = sum(1 for m in mask if m == 1) if isinstance(mask, list) else response_length
    index = _int(raw.get("index"), position)
    rollout_key = raw.get("rollout_id")
    return Sample(
        index=index,
        group_index=_int(raw.get("group_index"), index),
        response=_text(raw.get("response")),
        response_length=response_length,
        prompt_length=max(0, total - response_length),
        effective_length=effective,
        reward=reward_value(raw.get("reward"), reward_key),
        status=_text(raw.get("status") or "")[:40] or "?",
        weight_versions=weight_versions(raw.get("weight_versions")),
        label=_text(raw.get("label"))[:400],
        rollout_key=rollout_key
        if isinstance(rollout_key, int) and not isinstance(rollout_key, bool)
        else None,
        removed=raw.get("remove_sample") is True,
    )


def reward_value(reward: object, reward_key: str | None = None) -> float | None:
    """The number miles trains on: the reward itself, or `reward[reward_key]` when it is a dict (without a
    key, a dict's only number); None when there is none, or it is not finite."""
    if isinstance(reward, dict):
        if reward_key is not None:
            reward = reward.get(reward_key)
        else:
            numbers = [v for v in reward.values() if isinstance(v, int | float)]
            reward = numbers[0] if len(numbers) == 1 else None
    if isinstance(reward, bool | int | float):
        value = float(reward) if not isinstance(reward, int) or abs(reward) < 1 << 53 else math.nan
        return value if math.isfinite(value) else None  # NaN/inf: no number to group or average
    return None


def weight_versions(value: object) -> tuple[str, ...]:
    """The policy versions a sample was generated on: miles' list of strings, or (PR #2542) a list of span
    dicts `{"version", "abs_start", "abs_end"}`."""
    if not isinstance(value, list):
        return ()
    out: list[str] = []
    for item in value[:64]:
        version = item.get("version") if isinstance(item, dict) else item
        if version is not None:
            out.append(_text(version)[:40])
    return tuple(out)


def _prompt_text(prompt: object) -> str:
    """The chat-templated prompt string, or a message list shown as `role: content` lines."""
    if isinstance(prompt, list):
        lines = []
        for message in prompt[:200]:
            if isinstance(message, dict):
                lines.append(f"{_text(message.get('role'))}: {_text(message.get('content'))}")
            else:
                lines.append(_text(message))
        return "\n".join(lines)[:MAX_TEXT]
    return _text(prompt)


@dataclass
class _Seen:
    size: int
    mtime: float
    outcome: str  # "read", "pending", "refused", "broken"
    note: str = ""


@dataclass
class RolloutShelf:
    """The rollout files of one dump directory: which exist, which were read, the last few read kept whole.

    Each file is read once when it is complete (a half-written one is tried again at each poll until it
    reads, or is old and still broken: then it is named with why); `open` reads an older one again on demand.
    """

    dump_dir: Path
    reward_key: str | None = None
    kept: int = KEPT_ROLLOUTS
    _seen: dict[str, _Seen] = field(default_factory=dict)
    _cache: OrderedDict[str, RolloutSamples] = field(default_factory=OrderedDict)
    _lock: threading.Lock = field(default_factory=threading.Lock)  # the monitor's poll and a screen share it

    def files(self) -> list[RolloutFile]:
        return list_rollouts(self.dump_dir)

    def poll(self, now: float | None = None) -> list[RolloutSamples]:
        """Rollouts that became readable since the last poll (new files, or half-written ones now whole)."""
        fresh: list[RolloutSamples] = []
        for file in self.files():
            seen = self._seen.get(file.name)
            if (
                seen is not None
                and seen.outcome != "pending"
                and (seen.size, seen.mtime) == (file.size, file.mtime)
            ):
                continue
            rollout = self._read(file, now)
            if rollout is not None:
                fresh.append(rollout)
        return fresh

    def _read(self, file: RolloutFile, now: float | None) -> RolloutSamples | None:
        try:
            rollout = read_rollout(file.path, reward_key=self.reward_key, now=now)
        except RolloutNotReady as err:
            self._seen[file.name] = _Seen(file.size, file.mtime, "pending", str(err))
            return None
        except PickleRefusedError as err:
            self._seen[file.name] = _Seen(file.size, file.mtime, "refused", str(err))
            return None
        except (BrokenPickleError, NotRegularFileError, OSError) as err:
            self._seen[file.name] = _Seen(file.size, file.mtime, "broken", str(err))
            return None
        self._seen[file.name] = _Seen(file.size, file.mtime, "read")
        self._keep(rollout)
        return rollout

    def _keep(self, rollout: RolloutSamples) -> None:
        with self._lock:
            self._cache[rollout.name] = rollout
            self._cache.move_to_end(rollout.name)
            while len(self._cache) > self.kept:
                self._cache.popitem(last=False)

    def open(self, name: str, now: float | None = None) -> RolloutSamples | None:
        """The rollout called `name` ("3", "eval_3"), read now if it is not held; None when it cannot be
        read (`note(name)` says why)."""
        with self._lock:
            held = self._cache.get(name)
            if held is not None:
                self._cache.move_to_end(name)
                return held
        file = next((f for f in self.files() if f.name == name), None)
        if file is None:
            self._seen.pop(name, None)
            return None
        return self._read(file, now)

    def note(self, name: str) -> str:
        """Why `name` is not shown ("" when it was read): still being written, refused, broken."""
        seen = self._seen.get(name)
        return seen.note if seen is not None else ""

    def unreadable(self) -> list[str]:
        """One line per rollout file that was refused (it holds objects) or is broken (old, not a torch save);
        a file still being written is not one of them."""
        return [seen.note for seen in self._seen.values() if seen.outcome in ("refused", "broken")]

    def state(self, name: str) -> str:
        seen = self._seen.get(name)
        return seen.outcome if seen is not None else "unread"
