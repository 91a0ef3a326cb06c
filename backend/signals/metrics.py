"""miles' metric lines (and its structured event records) turned into deduplicated points on series.

The lines come from Ray actors, not the driver, in any shape backend.signals.grammar reads (2026-04:
`(MegatronTrainRayActor pid=52001) [2026-03-02 10:00:05] log_utils.py:443 - step 0: {...}`, newest:
`... [2026-10-02 10:00:05.120 actor_cell0_rank0] log_utils.py:544 - step 0: {...}`, or a bare `step 0:
{...}`). Pitfalls handled here: `step N` is printed twice (two modules), and the second copy is dropped; there
are two `perf N` lines per rollout, told apart by their keys (throughput vs timings), never by file or actor
names, which change between versions; payloads hold bare `nan`/`inf` and `np.float64(...)`/`np.int64(...)`,
read by `backend.signals.pyliteral`, never `eval`; the step of `rollout`/`perf` lines is not inside the dict.
A line that looks like a metric but cannot be read is counted with a sample, so a blind chart is said, not
silent. The same dicts also reach `{dump_details}/events/*.jsonl`; points carry a source priority (events >
dashboard > log) so a dict seen twice is counted once.
"""

from __future__ import annotations

import ast
import itertools
import json
import math
import operator
import re
import sys
from collections import Counter, OrderedDict
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from itertools import repeat
from operator import attrgetter
from typing import Any, Protocol

from backend.signals.grammar import (
    METRIC_HEAD,
    METRIC_LINE,
    METRIC_LOOKING,
    METRIC_MESSAGE,
    METRIC_NEEDLES,
    parse_line,
)
from backend.signals.pyliteral import LiteralError, parse_literal
from backend.signals.series import STEP_KEYS, PointRun, Series, SeriesSet

SOURCE_PRIORITY = {"log": 0, "dashboard": 1, "events": 2, "samples": 3}  # samples: a rollout's own file
MAX_PROBLEMS = 50
SAMPLE_CHARS = 160

# The two `perf N` dicts of a rollout, told apart by keys: the rollout side's throughput and response
# lengths, the train side's timings and MFU (miles-log-formats.md §2; producers' names changed, keys did not).
ROLLOUT_PERF_KEYS = frozenset(
    {
        "perf/rollout_time",
        "perf/tokens_per_gpu_per_sec",
        "perf/effective_tokens_per_gpu_per_sec",
        "perf/longest_sample_tokens_per_sec",
        "perf/longest_effective_sample_tokens_per_sec",
    }
)
ROLLOUT_PERF_PREFIXES = ("rollout/", "passrate/", "perf/non_generation_time/", "perf/longest_sample")
TRAIN_PERF_KEYS = frozenset(
    {
        "perf/actor_train_time",
        "perf/step_time",
        "perf/train_time",
        "perf/train_wait_time",
        "perf/log_probs_time",
        "perf/actor_train_tflops",
        "perf/actor_train_mfu",
        "perf/wait_time_ratio",
        "perf/update_weights_time",
    }
)
STEP_KINDS = frozenset({"step", "critic-step"})
_ROLLOUT_SIDE = frozenset({"rollout", "perf-rollout", "perf-train", "multi_turn"})  # kinds naming a rollout
_DEDUP_WINDOW = 64  # recent step dicts remembered to drop their second printing
_SHAPES_REMEMBERED = 256  # distinct dict key tuples whose prefixes are remembered


@dataclass(slots=True)
class MetricRecord:
    """One metric dict as miles logged it (slots: tens of thousands are made per log, each read often)."""

    kind: (
        str  # step, critic-step, perf-rollout, perf-train, rollout, eval, eval-skipped, multi_turn, passrate
    )
    n: int  # the number printed after the kind (train step, or rollout id)
    ts: float  # miles' own timestamp, epoch seconds (node-local clock read as UTC), nan if unknown
    proc: str  # bracket name / event source
    values: dict[str, float]
    source: str = "log"
    cut: str = ""  # the line (sanitised, cut) when its dict was cut off and only its complete pairs read


@dataclass(frozen=True)
class Point:
    """A new or changed point on a series."""

    key: str
    step: float
    value: float
    ts: float
    source: str


@dataclass(frozen=True)
class Unreadable:
    """A line that looks like a metric but could not be read: why, and the line (sanitised, cut)."""

    reason: str
    line: str

    def __str__(self) -> str:
        return f"{self.reason}: {self.line}"


def lines_containing(text: str, needle: str) -> Iterator[str]:
    """Each line of `text` that contains `needle`, once; found with str.find (C speed), not a regex scan."""
    pos = text.find(needle)
    while pos >= 0:
        start = text.rfind("\n", 0, pos) + 1
        end = text.find("\n", pos)
        end = len(text) if end < 0 else end
        yield text[start:end]
        pos = text.find(needle, end)


def parse_payload(payload: str) -> Any:
    """A metric dict's repr. Plain reprs go through ast.literal_eval (C parser, safe); ones with `nan`,
    `inf` or `np.float64(...)` that it rejects go through backend.signals.pyliteral."""
    if len(payload) <= 65536:
        try:
            return ast.literal_eval(payload)
        except (ValueError, SyntaxError, TypeError, MemoryError, RecursionError):
            pass
    return parse_literal(payload)


# A flat `{'key': number, ...}` dict, the shape of nearly every metric line: read with one regex and float()
# instead of a parser. Keys without quotes, backslashes or controls; numbers in plain decimal (no leading
# zeros, no `_`, a bounded length), bare or as `np.float64(...)`; anything else goes to parse_payload, so the
# values are the same either way (tests/unit/test_metric_fast_path.py compares them).
_FLAT_NUMBER = r"-?(?:0|[1-9][0-9]{0,40})(?:\.[0-9]{0,40})?(?:[eE][+-]?[0-9]{1,3})?"
_FLAT_VALUE = rf"(?:np\.float(?:64|32|16)\(({_FLAT_NUMBER})\)|({_FLAT_NUMBER}))"
_FLAT_KEY = r"'([^'\\\x00-\x1f]*)'"
_FLAT_PAIR = re.compile(rf"{_FLAT_KEY}: {_FLAT_VALUE}")
_FLAT_DICT = re.compile(rf"\{{(?:{_FLAT_PAIR.pattern}(?:, {_FLAT_PAIR.pattern})*)?\}}")


def flat_payload(payload: str) -> dict[str, float] | None:
    """The values of a flat dict of plain numbers as `_scalars(parse_payload(payload))` reads them, or None
    when the payload has any other shape."""
    if _FLAT_DICT.fullmatch(payload) is None:
        return None
    out: dict[str, float] = {}
    for key, called, bare in _FLAT_PAIR.findall(payload):
        number = called or bare
        value = float(number)
        if not value and "." not in number and "e" not in number and "E" not in number:
            value = 0.0  # `-0` is the int 0, not the float -0.0
        out[key] = value
    return out


def _json_int(text: str) -> float:
    """A JSON integer as `scalar` reads a Python int: `-0` is 0.0, one past a float's range +-inf, one past
    Python's 4300 digits refused (ValueError) as the parsers refuse it."""
    value = int(text)
    try:
        return float(value)
    except OverflowError:
        return math.inf if value > 0 else -math.inf


def _no_constant(name: str) -> float:
    """`NaN`/`Infinity` are no Python literals: such a payload takes the parser's path."""
    raise ValueError(name)


_JSON = json.JSONDecoder(parse_int=_json_int, parse_constant=_no_constant)
_SCAN: Callable[[str, int], tuple[Any, int]] = _JSON.scan_once  # type: ignore[attr-defined]
# The same scanner with float() for JSON integers, in C: float(text) is float(int(text)) (both correctly
# rounded; past a float's range both +-inf) but for `-0` (-0.0, not 0.0) and past int()'s digit limit
# (refused): _json_batch takes it only where neither can be in the text.
_SCAN_FLOATS: Callable[[str, int], tuple[Any, int]] = json.JSONDecoder(
    parse_int=float, parse_constant=_no_constant
).scan_once  # type: ignore[attr-defined]
# A JSON `-0` integer (`-01` is no JSON; `e-0,` or a match in a string: only the careful way taken).
_NEGATIVE_ZERO = re.compile(r"-0(?![.eE0-9])")
# `np.float64(x)` (or float32/16) right after a key's closing quote (a quote swapped to `"`), x a number as
# flat_payload reads it: replaced by x, so rollout perf dicts take the JSON path too. A match after an opening
# quote changes a string that then begins `: `: json_payload refuses such a key. Literal first: C-fast search.
_NP_FLOAT = re.compile(rf'np(?<=": np)\.float(?:64|32|16)\(({_FLAT_NUMBER})\)')


def json_payload(payload: str) -> dict[str, float] | None:
    """A flat dict of plain numbers read by the C JSON scanner (its quotes swapped: half flat_payload's
    cost), or None for any other shape. With no `"` or backslash in it, a repr's strings read the same as
    JSON strings; what JSON accepts beyond Python (true, null, NaN) is refused here, and literal_eval's size
    cap kept, so the values are `_scalars(parse_payload(payload))`'s (tests/unit/test_metric_fast_path.py
    compares hostile payloads). JSON's words are refused in the text, not the result: a duplicate key hides
    a value (`{'a': true, 'a': 1}` is no Python literal)."""
    return _json_read(payload) if json_clean(payload) else None


def json_clean(text: str) -> bool:
    """No `"`, backslash or JSON word in `text`: what json_payload refuses on sight, asked once of a chunk
    (its payloads are parts of it) instead of once per payload."""
    return not ('"' in text or "\\" in text or "true" in text or "false" in text or "null" in text)


_NUMBER_OF = operator.methodcaller("group", 1)  # a C callable for sub: no template expanded per match


def _json_read(payload: str) -> dict[str, float] | None:
    """json_payload of a payload `json_clean` passed. Its values can only be floats (parse_int makes
    floats, JSON's words are refused), strings, lists or dicts: a float sum raises TypeError on any but
    floats, at a fraction of a type check per value."""
    if len(payload) > 65536:
        return None
    text = payload.replace("'", '"')
    called = "(" in text
    if called:
        text = _NP_FLOAT.sub(_NUMBER_OF, text)
        if "(" in text:  # another call, or a tuple
            return None
    try:
        raw, end = _SCAN(text, 0)  # the decoder's own scanner: no wrapper per line
    except (ValueError, StopIteration, RecursionError):
        return None
    if end != len(text) or type(raw) is not dict:
        return None
    try:
        sum(raw.values(), 0.0)
    except TypeError:
        return None
    if called and any(map(str.startswith, raw, repeat(": "))):
        return None  # a key whose opening quote the call followed: its text was changed
    return raw


_PLAIN_STAMP = re.compile(r"(\d{4}-\d\d-\d\d[ T]\d\d:\d\d):([0-5]\d)\.(\d{3})", re.ASCII)
_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)
_MINUTES: dict[str, int | None] = {}  # a stamp's minute -> its epoch microseconds (None: no date)


def parse_ts(text: str) -> float:
    """miles' `2026-08-21 10:20:05.112` (node-local, no zone; read as UTC so order and gaps are right).
    Its usual shape from its minute, read once per minute: the same float as datetime's timestamp()
    (whole microseconds over 10**6, one correctly rounded division)."""
    plain = _PLAIN_STAMP.fullmatch(text)
    if plain is not None:
        minute, sec, milli = plain.groups()
        base = _MINUTES.get(minute, -1)
        if base == -1:
            base = _minute_us(minute)
        if base is not None:
            return (base + int(sec) * 1_000_000 + int(milli) * 1000) / 1_000_000
    return _stamp_ts(text)


def line_ts(stamp: str) -> float:
    """`parse_ts` of a stamp METRIC_LINE's `_TS` matched (digits, dashes and colons in place already): its
    usual shape told by a few characters, not another regex (tests/unit/test_metric_twins.py compares)."""
    if len(stamp) == 23 and stamp[19] == "." and stamp[17] < "6" and stamp.isascii():
        minute = stamp[:16]
        base = _MINUTES.get(minute, -1)
        if base == -1:
            base = _minute_us(minute)
        if base is not None:
            return (base + int(stamp[17:19]) * 1_000_000 + int(stamp[20:]) * 1000) / 1_000_000
    return parse_ts(stamp)


def _minute_us(minute: str) -> int | None:
    """A stamp's minute (`2026-08-21 10:20`) as epoch microseconds, remembered (a bounded few)."""
    try:
        start = datetime.fromisoformat(minute).replace(tzinfo=UTC)
    except ValueError:
        us = None
    else:
        us = (start - _EPOCH) // timedelta(microseconds=1)
    if len(_MINUTES) >= 4096:
        _MINUTES.clear()
    _MINUTES[minute] = us
    return us


def _stamp_ts(text: str) -> float:
    """Any other stamp datetime reads."""
    try:
        return datetime.fromisoformat(text).replace(tzinfo=UTC).timestamp()  # C-fast, unlike strptime
    except ValueError:
        return math.nan


def parse_iso(text: Any) -> float:
    if not isinstance(text, str):
        return math.nan
    try:
        stamp = datetime.fromisoformat(text.replace("Z", "+00:00"))
    except ValueError:
        return math.nan
    if stamp.tzinfo is None:
        stamp = stamp.replace(tzinfo=UTC)
    return stamp.timestamp()


def scalar(value: Any) -> float | None:
    """A metric value as float; None for what is not a scalar (lists, strings)."""
    if value is None:
        return math.nan  # events write NaN/Inf as null
    if isinstance(value, bool):
        return float(value)
    if isinstance(value, float):
        return value
    if isinstance(value, int):  # an integer beyond a float's range (a 400-digit "metric") reads as +-inf
        try:
            return float(value)
        except OverflowError:
            return math.inf if value > 0 else -math.inf
    return None


def _scalars(raw: dict[Any, Any]) -> dict[str, float]:
    out: dict[str, float] = {}
    for key, value in raw.items():
        if isinstance(key, str):
            number = scalar(value)
            if number is not None:
                out[key] = number
    return out


_PERF_KINDS: dict[tuple[str, ...], str] = {}  # a perf dict's keys -> its kind (a few shapes repeat)


def perf_kind(values: dict[str, float]) -> str:
    """`perf-rollout` (throughput, response lengths) or `perf-train` (timings, MFU), by the dict's keys."""
    keys = tuple(values)
    kind = _PERF_KINDS.get(keys)
    if kind is None:
        rollout = sum(1 for k in keys if k in ROLLOUT_PERF_KEYS or k.startswith(ROLLOUT_PERF_PREFIXES))
        train = sum(1 for k in keys if k in TRAIN_PERF_KEYS)
        kind = "perf-rollout" if rollout > train else "perf-train"
        if len(_PERF_KINDS) >= _SHAPES_REMEMBERED:
            _PERF_KINDS.clear()
        _PERF_KINDS[keys] = kind
    return kind


def _candidate_lines(text: str) -> list[str]:
    """The lines of `text` holding a literal piece of a metric line, in order, each once (str.find only;
    with one of the pieces in the chunk, its lines as found, in order already)."""
    needles = [needle for needle in METRIC_NEEDLES if needle in text]
    if len(needles) == 1:
        return list(lines_containing(text, needles[0]))
    starts: dict[int, int] = {}
    for needle in needles:
        pos = text.find(needle)
        while pos >= 0:
            start = text.rfind("\n", 0, pos) + 1
            end = text.find("\n", pos)
            end = len(text) if end < 0 else end
            starts[start] = end
            pos = text.find(needle, end)
    return [text[a : starts[a]] for a in sorted(starts)]


def _sample(line: str) -> str:
    return line if len(line) <= SAMPLE_CHARS else line[:SAMPLE_CHARS] + "…"


class PayloadCache(OrderedDict[str, dict[str, float]]):
    """The last few payloads read, by their text: miles prints each step dict twice in a row, and reading a
    repr costs far more than looking it up."""

    SIZE = 16

    def remember(self, payload: str, values: dict[str, float]) -> None:
        self[payload] = values
        if len(self) > self.SIZE:
            self.popitem(last=False)


_PAIR_ENDS = 16  # `, ` boundaries tried from the right of a cut dict before it is given up
_CUT_HEAD = re.compile(r"(?P<kind>(?:critic-)?step|rollout|perf|eval|multi_turn|passrate) (?P<n>\d+): (?=\{)")


def complete_pairs(payload: str) -> dict[str, float] | None:
    """The pairs of a dict cut off mid-way (`{'a': 1, 'b': 2, 'c` pasted at a terminal's width) that are
    whole: the dict closed after the last `, ` that leaves one that parses; None when not one pair is whole.
    A pair is whole only with a `, ` after it: `'b': 0.2` at the cut may be `0.21` cut."""
    end = len(payload)
    for _ in range(_PAIR_ENDS):
        end = payload.rfind(", ", 0, end)
        if end <= 0:
            return None
        head = payload[:end] + "}"
        flat = flat_payload(head)
        if flat is not None:
            return flat
        try:
            raw = parse_payload(head)
        except LiteralError:
            continue
        if isinstance(raw, dict):
            return _scalars(raw)
    return None


def _labelled(line: str, found: re.Match[str]) -> re.Match[str] | None:
    """A metric message behind a label (`[EVAL RESULT] eval 3: {...}`): the kind where METRIC_LOOKING
    found it, read whole from there."""
    start = found.end() - len(found.group().lstrip("-]):> "))
    return METRIC_MESSAGE.fullmatch(line, start)


def _cut_record(line: str, found: re.Match[str], stamp: str | None, proc: str) -> MetricRecord | None:
    """A metric line whose dict was cut: its complete pairs, marked cut (counted as a blind spot)."""
    start = found.end() - len(found.group().lstrip("-]):> "))
    head = _CUT_HEAD.match(line, start)
    if head is None:
        return None
    values = complete_pairs(line[head.end() :])
    if not values:
        return None
    kind, n = head["kind"], int(head["n"])
    ts = parse_ts(stamp) if stamp else math.nan
    return MetricRecord(perf_kind(values) if kind == "perf" else kind, n, ts, proc, values, cut=_sample(line))


def _not_whole(line: str, stamp: str | None, proc: str) -> MetricRecord | Unreadable | None:
    """A line that is no whole metric line: a labelled or cut one read as far as it goes, else an
    Unreadable if it looks like a metric, else None."""
    found = METRIC_LOOKING.search(line)
    if found is None:
        return None
    labelled = _labelled(line, found)
    if labelled is not None:
        return _record(labelled, line, stamp, proc, None)
    cut = "{" in line and not line.rstrip().endswith("}")
    if cut and (record := _cut_record(line, found, stamp, proc)) is not None:
        return record
    why = "unreadable metric line (cut off?)" if cut else "metric line of an unknown shape"
    return Unreadable(why, _sample(line))


def parse_metric_line(
    line: str, cache: PayloadCache | None = None, twin: Twin | None = None, plain: bool | None = None
) -> MetricRecord | Unreadable | None:
    """One sanitised line: its metric record, an Unreadable if it looks like a metric but is not one that
    parses, or None if it is no metric line at all. `twin` learns a record METRIC_LINE read; `plain`: the
    line is known to hold no colour code (its chunk holds none: one search per chunk, not two per line)."""
    if plain is None:
        plain = "\x1b" not in line and "^[" not in line
    fast = METRIC_LINE.fullmatch(line) if plain else None
    if fast is not None:  # the common shape, in one match
        return _fast_record(fast, line, cache, twin)
    parsed = parse_line(line)
    stamp, proc = parsed.ts, parsed.proc or parsed.actor or ""
    m = METRIC_MESSAGE.fullmatch(parsed.message)
    if m is None:
        return _not_whole(line, stamp, proc)
    return _record(m, line, stamp, proc, cache)


def _fast_record(
    fast: re.Match[str], line: str, cache: PayloadCache | None, twin: Twin | None
) -> MetricRecord | Unreadable:
    """`_record` for a METRIC_LINE match (no `skipped` reason in its shape), its groups read in one call:
    the path nearly every metric line takes."""
    actor, stamp, named, kind, n, payload = fast.groups()
    values = _payload_values(payload, cache)
    if isinstance(values, tuple):
        return Unreadable(f"{values[0]}{kind} {n} payload{values[1]}", _sample(line))
    if kind == "perf":
        kind = perf_kind(values)
    rec = MetricRecord(kind, int(n), line_ts(stamp) if stamp else math.nan, named or actor or "", values)
    if twin is not None:
        twin.learn(line[fast.start(4) :], rec)
    return rec


class Twin:
    """The message (kind on) and record of the last line METRIC_LINE read: miles prints each step dict twice
    in a row (two modules, 1 ms apart), and a line that is a METRIC_HEAD and then that message is the same
    record but for its head's fields. Read from the head alone (one short match, no payload read, looked up
    or hashed), it is the record `parse_metric_line` builds; which copy is kept stays `_admit`'s call."""

    __slots__ = ("plain", "rec", "tail")

    def __init__(self, plain: bool = False) -> None:
        self.plain = plain  # the lines are known to hold no colour code
        self.tail = "\n"  # ends no line
        self.rec: MetricRecord | None = None

    def learn(self, tail: str, rec: MetricRecord) -> None:
        self.tail, self.rec = tail, rec

    def record(self, line: str) -> MetricRecord | None:
        """The line's record if it is the last one's message behind a head of its own, else None. Read
        before any enricher runs (a chunk is parsed whole first), so the values are as logged."""
        rec, cut = self.rec, len(line) - len(self.tail)
        if rec is None or not line.endswith(self.tail):  # (the caller checks the end first, inline)
            return None
        if not self.plain and (line.find("\x1b", 0, cut) >= 0 or line.find("^[", 0, cut) >= 0):
            return None
        head = _head(line, cut)
        return None if head is None else MetricRecord(rec.kind, rec.n, head[0], head[1], dict(rec.values))


def _head(line: str, cut: int) -> tuple[float, str] | None:
    """(ts, proc) of a line whose `line[:cut]` is a METRIC_HEAD, else None."""
    head = METRIC_HEAD.fullmatch(line, 0, cut)
    if head is None:
        return None
    actor, stamp, named = head.groups()
    return line_ts(stamp) if stamp else math.nan, named or actor or ""


def _record(
    m: re.Match[str], line: str, stamp: str | None, proc: str, cache: PayloadCache | None
) -> MetricRecord | Unreadable:
    """The record of a whole metric message (`m`: METRIC_LINE's or METRIC_MESSAGE's match)."""
    n, kind = int(m["n"]), m["kind"]
    ts = parse_ts(stamp) if stamp else math.nan
    if "reason" in m.re.groupindex and m["reason"] is not None:  # no groupdict() built per line
        reason = re.sub(r"\W+", "_", m["reason"].strip()).strip("_") or "unknown"
        return MetricRecord("eval-skipped", n, ts, proc, {f"eval/skipped_{reason}": 1.0})
    values = _payload_values(m["payload"], cache)
    if isinstance(values, tuple):  # why not: the words around "{kind} {n} payload"
        return Unreadable(f"{values[0]}{kind} {n} payload{values[1]}", _sample(line))
    if kind == "perf":
        kind = perf_kind(values)
    return MetricRecord(kind, n, ts, proc, values)


def _payload_values(
    payload: str, cache: PayloadCache | None, clean: bool = False
) -> dict[str, float] | tuple[str, str]:
    """A payload's values (a fresh dict: enrichers add derived keys to a record's), or the words before and
    after the payload's name that say why it is unreadable: remembered, else by the fast readers
    (json_payload, flat_payload), else by the parser. `clean`: the payload passed json_clean."""
    known = cache.get(payload) if cache is not None else None
    if known is not None:
        return dict(known)
    values = _json_read(payload) if clean else json_payload(payload)
    if values is None:
        values = flat_payload(payload)
    if values is None:
        try:
            raw = parse_payload(payload)
        except LiteralError as err:
            return "unreadable ", f" ({err})"
        if not isinstance(raw, dict):
            return "", " is not a dict"
        values = _scalars(raw)
    if cache is not None:
        cache.remember(payload, dict(values))
    return values


def parse_metric_text(
    text: str, cache: PayloadCache | None = None
) -> tuple[list[MetricRecord], list[Unreadable]]:
    """All metric records in a chunk of sanitised lines, and the lines that look like metrics but failed: the
    chunk's payloads read in one JSON scan where they all are flat dicts of numbers (nearly always), else
    line by line; the same records and problems either way (tests/unit/test_metric_chunks.py compares)."""
    plain = "\x1b" not in text and "^[" not in text
    if plain and json_clean(text):
        read = _read_chunk(text, cache)
        if read is not None:
            return read
    return _read_lines(text, cache, plain)


def _read_lines(
    text: str, cache: PayloadCache | None, plain: bool
) -> tuple[list[MetricRecord], list[Unreadable]]:
    """parse_metric_text line by line: each payload read on its own (remembered in `cache`)."""
    records: list[MetricRecord] = []
    problems: list[Unreadable] = []
    twin = Twin(plain)
    for line in _candidate_lines(text):
        if len(line) < 8:
            continue
        found: MetricRecord | Unreadable | None = None
        if line.endswith(twin.tail):  # checked here, inline: most lines are no twin
            found = twin.record(line)
        found = found or parse_metric_line(line, cache, twin, plain or None)
        if isinstance(found, MetricRecord):
            records.append(found)
        elif found is not None:
            problems.append(found)
    return records, problems


_UNREAD: dict[str, float] = {}  # a chunk's record before its payload is read (replaced, never written)


# Every line of a chunk in one findall: METRIC_LINE's groups where it reads the line (`kind` set), else the
# line as `other`. A line's groups come out of one C call, not a match, groups() and slices per line.
_CHUNK_LINES = re.compile(rf"^(?:{METRIC_LINE.pattern}|(?P<other>.*))$", re.MULTILINE)


def _read_chunk(text: str, cache: PayloadCache | None) -> tuple[list[MetricRecord], list[Unreadable]] | None:
    """_read_lines of a chunk with no colour code that json_clean passed, its METRIC_LINE records built
    first with their values left out, and their payloads read in one `_json_batch` scan; None where that
    refuses them (the caller reads line by line). A twin (Twin: a METRIC_LINE line whose message is the last
    read one's) gets its original's kind, n and values once those are read: no enricher has run yet, as
    there. Lines holding no METRIC_NEEDLES are skipped, as `_candidate_lines` skips them."""
    records: list[MetricRecord] = []
    problems: list[Unreadable] = []
    fast: list[MetricRecord] = []  # the records of METRIC_LINE lines, in their payloads' order
    payloads: list[str] = []
    twins: list[tuple[MetricRecord, MetricRecord]] = []  # (twin, its original)
    last, message = _NO_RECORD, ("", "", "")  # the last METRIC_LINE record read, and its message
    for actor, stamp, named, kind, n, payload, other in _CHUNK_LINES.findall(text):
        if kind:
            rec = MetricRecord(kind, 0, line_ts(stamp) if stamp else math.nan, named or actor or "", _UNREAD)
            if payload == message[2] and n == message[1] and kind == message[0]:
                twins.append((rec, last))
            else:
                rec.n, last, message = int(n), rec, (kind, n, payload)
                fast.append(rec)
                payloads.append(payload)
            records.append(rec)
        elif len(other) >= 8 and (": {" in other or " skipped: " in other):
            found = parse_metric_line(other, cache, None, True)
            if isinstance(found, MetricRecord):
                records.append(found)
            elif found is not None:
                problems.append(found)
    return _fill(records, problems, fast, _json_batch(payloads), twins)


_NO_RECORD = MetricRecord("", 0, math.nan, "", _UNREAD)


def _fill(
    records: list[MetricRecord],
    problems: list[Unreadable],
    fast: list[MetricRecord],
    values: list[dict[str, float]] | None,
    twins: list[tuple[MetricRecord, MetricRecord]],
) -> tuple[list[MetricRecord], list[Unreadable]] | None:
    """A chunk's records given their payloads' values (None: unread, so None), twins after originals."""
    if values is None:
        return None
    for rec, got in zip(fast, values, strict=True):
        rec.values = got
        if rec.kind == "perf":
            rec.kind = perf_kind(got)
    for rec, original in twins:
        rec.kind, rec.n, rec.values = original.kind, original.n, dict(original.values)
    return records, problems


_SEPARATOR = ",\n"  # between a batch's payloads: a newline is no part of any JSON string (strict)
_VALUES_OF = operator.methodcaller("values")


def _json_batch(payloads: list[str]) -> list[dict[str, float]] | None:
    """json_payload of each payload (all passed json_clean), in one scan of `[p1,\np2,...]`: or None where
    any is not a flat dict of numbers. Why one scan reads each payload alone: no JSON string holds a
    newline, so each payload's first `{` and last `}` are tokens, and in a list of flat dicts those open and
    close its items: each payload holds whole items, one each where there are as many items as payloads,
    and that item is what a scan of the payload alone reads. The checks json_payload makes per payload are
    made once: the size cap on the longest, no call left after np.float64's, every value a float, and no
    key starting `: ` where a call was replaced (tests/unit/test_metric_chunks.py compares hostile ones)."""
    if not payloads:
        return []
    longest = max(map(len, payloads))
    if longest > 65536:
        return None
    text = "[" + _SEPARATOR.join(payloads).replace("'", '"') + "]"
    called = "(" in text
    if called:
        text = _NP_FLOAT.sub(_NUMBER_OF, text)
        if "(" in text:
            return None
    digits = sys.get_int_max_str_digits()
    floats = (not digits or longest < digits) and _NEGATIVE_ZERO.search(text) is None
    try:
        raw, end = (_SCAN_FLOATS if floats else _SCAN)(text, 0)
    except (ValueError, StopIteration, RecursionError):
        return None
    if end != len(text) or len(raw) != len(payloads):
        return None
    return raw if _flat_dicts(raw, called) else None


def _flat_dicts(raw: list[Any], called: bool) -> bool:
    """Every item a dict of floats only (a float sum raises on anything else: `_json_read`), and where a
    call was replaced no key starting `: `."""
    if not all(type(item) is dict for item in raw):
        return False
    try:
        sum(itertools.chain.from_iterable(map(_VALUES_OF, raw)), 0.0)
    except TypeError:
        return False
    return not (called and any(map(str.startswith, itertools.chain.from_iterable(raw), repeat(": "))))


def record_from_event(event: dict[str, Any], source: str = "events") -> MetricRecord | None:
    """A MetricEvent line of `{dump_details}/events/*.jsonl`, or None if it is not a metric event."""
    if event.get("type") != "metric" or not isinstance(event.get("metrics"), dict):
        return None
    values = _scalars(event["metrics"])
    step_key = next((k for k in (*STEP_KEYS,) if k in values), None)
    if step_key is None:
        return None
    raw_src = event.get("source")
    src: dict[str, Any] = raw_src if isinstance(raw_src, dict) else {}
    comp = str(src.get("component", "?"))
    proc = (
        f"actor_cell{src.get('cell_index', 0)}_rank{src['rank_within_cell']}"
        if "rank_within_cell" in src
        else comp
    )
    n = values[step_key]
    return MetricRecord(
        _event_kind(step_key, values),
        int(n) if math.isfinite(n) else -1,
        parse_iso(event.get("timestamp")),
        proc,
        values,
        source,
    )


def record_from_dashboard(rec: dict[str, Any]) -> MetricRecord | None:
    """A line of the dashboard's `metrics.jsonl` (`ts`, `step_key`, `step`, `metrics`)."""
    metrics, step_key = rec.get("metrics"), rec.get("step_key")
    if not isinstance(metrics, dict) or step_key not in STEP_KEYS:
        return None
    values = _scalars(metrics)
    step = scalar(rec.get("step"))
    if step is None or not math.isfinite(step):
        return None
    values.setdefault(step_key, step)
    ts = scalar(rec.get("ts"))
    return MetricRecord(
        _event_kind(step_key, values),
        int(step),
        ts if ts is not None else math.nan,
        "dashboard",
        values,
        "dashboard",
    )


def _event_kind(step_key: str, values: dict[str, float]) -> str:
    if step_key == "train/step":
        return "step"
    if step_key == "eval/step":
        return "eval"
    if any(k.startswith("perf/") for k in values):
        return perf_kind(values)
    if any(k.startswith("multi_turn/") for k in values):
        return "multi_turn"
    return "rollout"


@dataclass(frozen=True, slots=True)
class Enricher:
    """A function that may add derived keys to a record before it is stored, and the record kinds it reads
    (None: every kind), declared with it so it is called only for those."""

    enrich: Callable[[MetricRecord], None]
    kinds: frozenset[str] | None = None


class Judge(Protocol):
    """Who hears of a batch's changed points (backend.signals.alerts' engine): judged as they come, acted
    on at the end of the batch in the points' order, `(record's place in the batch, key's place in it)`,
    so a batch's alerts are those and in the order that record by record would give."""

    def watches(self, key: str) -> bool:
        """Whether points of `key` are judged at all (none is built for the others)."""
        ...

    def judge_point(self, point: Point, order: tuple[int, int], series: Series) -> None:
        """One point, right after it changed `series` (added one by one)."""
        ...

    def judge_run(
        self, run: PointRun, order: Callable[[int], tuple[int, int]], point: Callable[[int], Point]
    ) -> None:
        """A run appended in one go at `run.start` of its series; `point(i)` builds the i-th point and
        `order(i)` its order (both only asked for a point the judge keeps a verdict on)."""
        ...

    def settle(self) -> object:
        """The end of a batch: act on what its points said (what it returns is the judge's own)."""
        ...


class MetricsCollector:
    """Series of every metric of one run, fed from log text, event records, or both."""

    def __init__(self, max_points: int = 4096) -> None:
        self.series = SeriesSet(max_points)
        self.records: dict[
            str, int
        ] = {}  # kind -> records seen (for the summary), second printings not counted
        self.problems: list[Unreadable] = []
        self.problem_count = 0  # metric-looking lines that could not be read
        self.cut_count = 0  # metric lines cut mid-dict, read as far as their complete pairs
        self.cut_sample = ""  # the first of them
        self.duplicates = 0  # step dicts printed a second time, dropped
        self.bad_steps = 0  # points dropped for a non-finite step
        self.records_by_prefix: dict[str, int] = {}  # "train/" -> records holding a key with that prefix
        self.last_ts = math.nan  # newest miles timestamp of any metric record
        self.last_step: dict[str, int] = {}  # kind -> highest n
        self._recent_steps: OrderedDict[tuple[str, int], dict[str, float]] = OrderedDict()
        self._payloads = PayloadCache()
        self._rollout = -1  # the newest rollout a rollout-side record named
        self._steps_of_rollout: OrderedDict[int, set[int]] = OrderedDict()
        self._judge: Judge | None = None  # who hears of changed points (the alert rules)
        self._prefixes_of: dict[tuple[str, ...], frozenset[str]] = {}  # a dict's keys -> their prefixes
        self.enrichers: list[Enricher] = []  # may add derived keys to a record (add_enricher)
        self._enrichers_of: dict[
            str, tuple[Callable[[MetricRecord], None], ...]
        ] = {}  # kind -> its enrichers

    def subscribe(self, judge: Judge) -> None:
        """`judge` hears of every new or changed point of a key it `watches` (alerts evaluate there): no
        point is built for a key nobody watches."""
        self._judge = judge

    def feed_text(self, text: str) -> int:
        """Parse a chunk of sanitised complete lines; returns how many metric records it held."""
        records, problems = parse_metric_text(text, self._payloads)
        for problem in problems:
            self.note_problem(problem)
        for rec in records:
            if rec.cut:
                self.cut_count += 1
                self.cut_sample = self.cut_sample or rec.cut
        self.add_records(records)
        return len(records)

    def on_log_lines(self, first: int, count: int, text: str) -> None:
        """`LogStore.subscribe` signature."""
        self.feed_text(text)

    def note_problem(self, problem: Unreadable) -> None:
        self.problem_count += 1
        if len(self.problems) < MAX_PROBLEMS:
            self.problems.append(problem)

    def _second_printing(self, rec: MetricRecord) -> bool:
        """miles prints each `step N` dict twice (two modules):
        the same (kind, n, values) again is dropped."""
        key = (rec.kind, rec.n)
        seen = self._recent_steps.get(key)
        if seen is not None and _same_values(seen, rec.values):
            return True
        self._recent_steps[key] = dict(rec.values)
        if len(self._recent_steps) > _DEDUP_WINDOW:
            self._recent_steps.popitem(last=False)
        return False

    def _note_axes(self, rec: MetricRecord) -> None:
        """Which train steps fell in which rollout, to derive steps per rollout from the data."""
        kind = rec.kind
        if kind in _ROLLOUT_SIDE:
            if rec.n > self._rollout:
                self._rollout = rec.n
        elif kind == "step" and self._rollout >= 0:
            self._steps_of_rollout.setdefault(self._rollout, set()).add(rec.n)
            if len(self._steps_of_rollout) > _DEDUP_WINDOW:
                self._steps_of_rollout.popitem(last=False)

    def steps_per_rollout(self) -> int | None:
        """Train steps per rollout as the log shows them (the most common count over finished rollouts);
        None until one rollout is complete. A launch parameter, so never assumed."""
        # list() copies in one C call (the UI thread asks while the log thread adds)
        done = [len(steps) for r, steps in list(self._steps_of_rollout.items()) if r < self._rollout]
        if not done:
            return None
        return max(set(done), key=lambda c: (done.count(c), c))

    def add_records(self, records: Iterable[MetricRecord]) -> int:
        """Store records (a batch in miles' timestamp order: worker output arrives late and interleaved);
        returns how many points changed. The batch's points go into each series in one run, and the judge
        (the alert rules) hears of each series' run once: the same points, series and alerts as record by
        record (tests/unit/test_metric_batches.py compares), without the per-point calls."""
        kept, logged = self._admit(_in_ts_order(records))
        runs = self._group(kept, logged)
        columns = _Columns(kept)
        places: dict[int, dict[str, int]] = {}  # a kept record's keys -> their places, built once each
        changed = sum(self._apply(key, run, columns, places) for key, run in runs.items() if run is not None)
        if self._judge is not None:
            self._judge.settle()
        return changed

    def _group(self, kept: list[MetricRecord], logged: list[tuple[str, ...]]) -> dict[str, PointRun | None]:
        """The batch's points by key, and `records_by_prefix` counted: dict shape by dict shape where no
        point needs more than its series' run (`SeriesSet.group_batch`), else record by record, each
        record's prefixes counted before its points are grouped (a new series moves the series cap)."""
        series = self.series
        runs = series.group_batch([rec.values for rec in kept])
        if runs is not None:  # no series made: the cap stood still, so the counts go shape by shape
            for keys, times in Counter(logged).items():  # first-seen order: prefixes added as one by one
                self._count_prefixes(keys, times)
            return runs
        runs = {}
        for i, (rec, keys) in enumerate(zip(kept, logged, strict=True)):
            self._count_prefixes(keys)
            self.bad_steps += series.group(rec.values, float(rec.n), i, runs)
        return runs

    def _apply(self, key: str, run: PointRun, columns: _Columns, places: dict[int, dict[str, int]]) -> int:
        """One series' run of the batch into its series, the judge told of what changed. A point's order in
        the batch (`Judge`): (its record's place in the batch, its key's place in the record), built only
        for a point the judge keeps a verdict on."""
        index = run.records
        run.steps, run.ts, run.ranks = columns.picked(index, run.series.axis)
        judge = self._judge if self._judge is not None and self._judge.watches(key) else None
        if judge is None:
            return self.series.apply(run)
        kept = columns.kept

        def point(i: int) -> Point:
            return Point(key, run.steps[i], run.values[i], run.ts[i], kept[index[i]].source)

        def order(i: int) -> tuple[int, int]:
            return index[i], _place(places, index[i], kept[index[i]], key)

        changed = self.series.apply(run, lambda i: judge.judge_point(point(i), order(i), run.series))
        if run.start >= 0:
            judge.judge_run(run, order, point)
        return changed

    def add_record(self, rec: MetricRecord) -> int:
        """One record's points (a batch of one)."""
        return self.add_records((rec,))

    def _admit(self, batch: list[MetricRecord]) -> tuple[list[MetricRecord], list[tuple[str, ...]]]:
        """The records kept (second printings dropped) after their own bookkeeping, and each one's keys as
        logged (before the enrichers add theirs: what `records_by_prefix` counts). Each record is checked,
        placed on the axes and enriched in turn (order matters there); the counts, highest steps and newest
        stamp are order-free, so they are tallied once for the batch."""
        kept: list[MetricRecord] = []
        logged: list[tuple[str, ...]] = []
        enrichers = self._enrichers_of
        for rec in batch:
            kind = rec.kind
            if kind in STEP_KINDS and rec.source == "log" and self._second_printing(rec):
                self.duplicates += 1
                continue
            self._note_axes(rec)
            logged.append(tuple(rec.values))
            chain = enrichers.get(kind)
            for enricher in self._enrichers_for(kind) if chain is None else chain:
                enricher(rec)
            kept.append(rec)
        self._tally(kept)
        return kept, logged

    def _tally(self, kept: list[MetricRecord]) -> None:
        """Records per kind, each kind's highest n and the newest finite stamp, over a batch's kept records
        (the first of equal stamps stays, as record by record)."""
        records, last_step = self.records, self.last_step
        for kind, count in Counter(rec.kind for rec in kept).items():
            records[kind] = records.get(kind, 0) + count
        for rec in kept:
            if rec.n > last_step.get(rec.kind, -1):
                last_step[rec.kind] = rec.n
        stamps = [ts for ts in (rec.ts for rec in kept) if math.isfinite(ts)]
        if stamps:
            newest = max(stamps)
            if not newest <= self.last_ts:
                self.last_ts = newest

    def add_enricher(
        self, enricher: Callable[[MetricRecord], None], kinds: frozenset[str] | None = None
    ) -> None:
        """`enricher` may add derived keys to each record of `kinds` (all kinds: None) before it is stored,
        in the order added. Called only for the kinds it declares: most records are of none of them."""
        self.enrichers.append(Enricher(enricher, kinds))
        self._enrichers_of.clear()

    def _enrichers_for(self, kind: str) -> tuple[Callable[[MetricRecord], None], ...]:
        """The enrichers of records of `kind`, in the order added, remembered per kind."""
        known = self._enrichers_of[kind] = tuple(
            e.enrich for e in self.enrichers if e.kinds is None or kind in e.kinds
        )
        return known

    def _count_prefixes(self, keys: tuple[str, ...], times: int = 1) -> None:
        """`records_by_prefix` for `times` records of these keys. Below the series cap every key is
        admitted, so a dict's prefixes depend on its keys alone: remembered by them (miles repeats a few
        dict shapes)."""
        series = self.series
        if len(series.by_key) < series.max_series:
            prefixes = self._prefixes_of.get(keys)
            if prefixes is None:
                prefixes = frozenset(key.split("/", 1)[0] + "/" for key in keys)
                if len(self._prefixes_of) >= _SHAPES_REMEMBERED:
                    self._prefixes_of.clear()
                self._prefixes_of[keys] = prefixes
        else:  # past the series cap, a new key's prefix is not remembered either
            admits = series.admits
            prefixes = frozenset(key.split("/", 1)[0] + "/" for key in keys if admits(key))
        counts = self.records_by_prefix
        for prefix in prefixes:
            counts[prefix] = counts.get(prefix, 0) + times

    def latest(self) -> dict[str, float]:
        """Each series' value at its highest step."""
        return {key: s.values[-1] for key, s in self.series.by_key.items() if s.values}


def _ts_order(rec: MetricRecord) -> float:
    """A record's place in a batch: miles' timestamp, records without one last."""
    return rec.ts if math.isfinite(rec.ts) else math.inf


_TS_OF = attrgetter("ts")
_SOURCE_OF = attrgetter("source")


def _in_ts_order(records: Iterable[MetricRecord]) -> list[MetricRecord]:
    """A batch sorted by `_ts_order` (stable): by the stamps themselves, a key at C speed, where all are
    finite (nearly always), else by `_ts_order`."""
    batch = list(records)
    batch.sort(key=_TS_OF if all(map(math.isfinite, map(_TS_OF, batch))) else _ts_order)
    return batch


class _Columns:
    """A batch's per-record numbers, read once per batch for all its runs (each run picks its records'
    at C speed): timestamps, source ranks, and on each axis asked for the step (the axis' key, else n)."""

    def __init__(self, kept: list[MetricRecord]) -> None:
        self.kept = kept
        self.ts = list(map(_TS_OF, kept))  # C speed
        self.ranks = list(map(SOURCE_PRIORITY.get, map(_SOURCE_OF, kept), repeat(0)))
        self._steps: dict[str, list[float]] = {}
        self._picked: dict[tuple[int, str], tuple[list[int], list[float], list[float], list[int]]] = {}

    def picked(self, index: list[int], axis: str) -> tuple[list[float], list[float], list[int]]:
        """The steps on `axis`, stamps and ranks of the records at `index`, at C speed, once per index
        list and axis: a dict shape's runs share one index (`SeriesSet.group_batch`), and nobody writes to
        a run's lists (series copy them)."""
        key = (id(index), axis)
        known = self._picked.get(key)
        if known is None or known[0] is not index:
            known = self._picked[key] = (
                index,
                list(map(self.steps(axis).__getitem__, index)),
                list(map(self.ts.__getitem__, index)),
                list(map(self.ranks.__getitem__, index)),
            )
        return known[1], known[2], known[3]

    def steps(self, axis: str) -> list[float]:
        known = self._steps.get(axis)
        if known is None:
            known = self._steps[axis] = [rec.values.get(axis, float(rec.n)) for rec in self.kept]
        return known


def _place(places: dict[int, dict[str, int]], i: int, rec: MetricRecord, key: str) -> int:
    """`key`'s place among the keys of the batch's record `i` (its order for the judge), from one index of
    the record's keys built on the first ask (`places`, the batch's): `list(values).index(key)` for every
    watched key was quadratic in the keys."""
    known = places.get(i)
    if known is None:
        known = places[i] = dict(zip(rec.values, itertools.count()))  # C speed
    return known[key]


def _same_values(a: dict[str, float], b: dict[str, float]) -> bool:
    if a == b:  # C speed; each pair compared `is` first, so the same NaN object is equal to itself too
        return True
    return a.keys() == b.keys() and all(
        x == y or (math.isnan(x) and math.isnan(y)) for x, y in ((a[k], b[k]) for k in a)
    )
