"""miles' metric lines (and its structured event records) turned into deduplicated points on series.

The lines come from Ray actors, not the driver, and look like
`(MegatronTrainRayActor pid=52001) [2026-08-21 10:20:05.112 actor_cell0_rank0] log_utils.py:542 - step 0: {...}`
(ANSI and Ray's repeat suffix already removed by the log store's sanitiser). Pitfalls handled here:
`step N` is printed twice (log_utils.py and model.py); there are two `perf N` lines per rollout, one from the
RolloutManager (throughput) and one from the train actor (timings, MFU); payloads hold bare `nan`/`inf` and
`np.float64(...)`/`np.int64(...)`, read by `backend.signals.pyliteral`, never `eval`; the step of `rollout`/`perf`
lines is not inside the dict. The same dicts also reach `{dump_details}/events/*.jsonl`; points carry a source
priority (events > dashboard > log) so a dict seen twice is counted once.
"""

from __future__ import annotations

import ast
import math
import re
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from backend.signals.grammar import REPEATED
from backend.signals.pyliteral import LiteralError, parse_literal
from backend.signals.series import STEP_KEYS, SeriesSet, axis_for

SOURCE_PRIORITY = {"log": 0, "dashboard": 1, "events": 2}
MAX_PROBLEMS = 50

# Cheap literal scan first (the regex engine skips ahead on the literal " - "); the full line regex runs
# only on the few lines that hit.
_HINT = re.compile(r" - (?:critic-)?(?:step|perf|rollout|eval|multi_turn) \d+(?::| skipped:)")
_LINE = re.compile(
    r"(?:\((?P<prefix>[^()\n]*)\) )?\[(?P<ts>\d{4}-\d\d-\d\d \d\d:\d\d:\d\d\.\d{3}) (?P<proc>[^\]\s]+)\] "
    r"(?P<file>[^:\s]+):(?P<lineno>\d+) - (?P<kind>(?:critic-)?step|perf|rollout|eval|multi_turn) (?P<n>\d+)"
    r"(?:: (?P<payload>\{.*\})| skipped: (?P<reason>.*))"
)


@dataclass
class MetricRecord:
    """One metric dict as miles logged it."""

    kind: str  # step, critic-step, perf-rollout, perf-train, rollout, eval, eval-skipped, multi_turn
    n: int  # the number printed after the kind (train step, or rollout id)
    ts: float  # miles' own timestamp, epoch seconds (node-local clock read as UTC), nan if unknown
    proc: str  # bracket name / event source
    values: dict[str, float]
    source: str = "log"


@dataclass(frozen=True)
class Point:
    """A new or changed point on a series."""

    key: str
    step: float
    value: float
    ts: float
    source: str


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


def parse_ts(text: str) -> float:
    """miles' `2026-08-21 10:20:05.112` (node-local, no zone; read as UTC so order and gaps are right)."""
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
    if isinstance(value, int | float):
        return float(value)
    return None


def _scalars(raw: dict[Any, Any]) -> dict[str, float]:
    out: dict[str, float] = {}
    for key, value in raw.items():
        if isinstance(key, str):
            number = scalar(value)
            if number is not None:
                out[key] = number
    return out


def _perf_kind(m: re.Match[str], values: dict[str, float]) -> str:
    if m["file"] == "metrics.py" or m["proc"] == "rollout_manager" or "perf/rollout_time" in values:
        return "perf-rollout"
    return "perf-train"


def parse_metric_text(text: str) -> tuple[list[MetricRecord], list[str]]:
    """All metric records in a chunk of sanitised lines, and one-line descriptions of lines that failed."""
    records: list[MetricRecord] = []
    problems: list[str] = []
    for hint in _HINT.finditer(text):
        start = text.rfind("\n", 0, hint.start()) + 1
        end = text.find("\n", hint.end())
        line = text[start:] if end < 0 else text[start:end]
        if line.endswith(("cluster]", ")")):
            line = REPEATED.sub("", line)
        m = _LINE.fullmatch(line)
        if m is None:
            if "{" in line[hint.start() - start :]:
                problems.append(f"unreadable metric line (cut off?): {line[:120]}")
            continue
        n, kind = int(m["n"]), m["kind"]
        if m["reason"] is not None:
            reason = re.sub(r"\W+", "_", m["reason"].strip()).strip("_") or "unknown"
            records.append(MetricRecord("eval-skipped", n, parse_ts(m["ts"]), m["proc"], {f"eval/skipped_{reason}": 1.0}))
            continue
        try:
            raw = parse_payload(m["payload"])
        except LiteralError as err:
            problems.append(f"unreadable {kind} {n} payload ({err}): {line[:120]}")
            continue
        if not isinstance(raw, dict):
            problems.append(f"{kind} {n} payload is not a dict: {line[:120]}")
            continue
        values = _scalars(raw)
        if kind == "perf":
            kind = _perf_kind(m, values)
        records.append(MetricRecord(kind, n, parse_ts(m["ts"]), m["proc"], values))
    return records, problems


def record_from_event(event: dict[str, Any], source: str = "events") -> MetricRecord | None:
    """A MetricEvent line of `{dump_details}/events/*.jsonl`, or None if it is not a metric event."""
    if event.get("type") != "metric" or not isinstance(event.get("metrics"), dict):
        return None
    values = _scalars(event["metrics"])
    step_key = next((k for k in (*STEP_KEYS,) if k in values), None)
    if step_key is None:
        return None
    src = event.get("source") if isinstance(event.get("source"), dict) else {}
    comp = str(src.get("component", "?"))
    proc = f"actor_cell{src.get('cell_index', 0)}_rank{src['rank_within_cell']}" if "rank_within_cell" in src else comp
    n = values[step_key]
    return MetricRecord(_event_kind(step_key, values, comp), int(n) if math.isfinite(n) else -1,
                        parse_iso(event.get("timestamp")), proc, values, source)


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
    return MetricRecord(_event_kind(step_key, values, "dashboard"), int(step), ts if ts is not None else math.nan,
                        "dashboard", values, "dashboard")


def _event_kind(step_key: str, values: dict[str, float], component: str) -> str:
    if step_key == "train/step":
        return "step"
    if step_key == "eval/step":
        return "eval"
    if "perf/rollout_time" in values or component == "rollout_manager":
        return "perf-rollout"
    if any(k.startswith("perf/") for k in values):
        return "perf-train"
    if any(k.startswith("multi_turn/") for k in values):
        return "multi_turn"
    return "rollout"


class MetricsCollector:
    """Series of every metric of one run, fed from log text, event records, or both."""

    def __init__(self, max_points: int = 4096) -> None:
        self.series = SeriesSet(max_points)
        self.records: dict[str, int] = {}  # kind -> records seen (for the summary)
        self.problems: list[str] = []
        self.problem_count = 0
        self.last_ts = math.nan  # newest miles timestamp of any metric record
        self.last_step: dict[str, int] = {}  # kind -> highest n
        self._listeners: list[Callable[[Point], None]] = []
        self.enrichers: list[Callable[[MetricRecord], None]] = []  # may add derived keys to a record

    def subscribe(self, listener: Callable[[Point], None]) -> None:
        """Called for every new or changed point (alerts evaluate here)."""
        self._listeners.append(listener)

    def feed_text(self, text: str) -> int:
        """Parse a chunk of sanitised complete lines; returns how many metric records it held."""
        records, problems = parse_metric_text(text)
        for problem in problems:
            self.note_problem(problem)
        self.add_records(records)
        return len(records)

    def on_log_lines(self, first: int, count: int, text: str) -> None:
        """`LogStore.subscribe` signature."""
        self.feed_text(text)

    def note_problem(self, problem: str) -> None:
        self.problem_count += 1
        if len(self.problems) < MAX_PROBLEMS:
            self.problems.append(problem)

    def add_records(self, records: Iterable[MetricRecord]) -> list[Point]:
        # Within a batch, order by miles' timestamp: worker output arrives late and interleaved.
        batch = sorted(records, key=lambda r: r.ts if math.isfinite(r.ts) else math.inf)
        points: list[Point] = []
        for rec in batch:
            points.extend(self.add_record(rec))
        return points

    def add_record(self, rec: MetricRecord) -> list[Point]:
        for enricher in self.enrichers:
            enricher(rec)
        priority = SOURCE_PRIORITY.get(rec.source, 0)
        self.records[rec.kind] = self.records.get(rec.kind, 0) + 1
        if rec.n > self.last_step.get(rec.kind, -1):
            self.last_step[rec.kind] = rec.n
        if math.isfinite(rec.ts) and not rec.ts <= self.last_ts:
            self.last_ts = rec.ts
        points = []
        for key, value in rec.values.items():
            if key in STEP_KEYS:
                continue
            step = rec.values.get(axis_for(key), float(rec.n))
            if self.series.add(key, step, value, rec.ts, priority):
                points.append(Point(key, step, value, rec.ts, rec.source))
        for point in points:
            for listener in self._listeners:
                listener(point)
        return points

    def latest(self) -> dict[str, float]:
        """Each series' value at its highest step."""
        return {key: s.values[-1] for key, s in self.series.by_key.items() if s.values}
