"""Everything the console reads about one run, in one object: metrics, the run's facts, dashboard
telemetry and alerts, fed by sanitised log text (`LogStore.subscribe(monitor.on_log_lines)`) and by polls
of the dump directory, and summarised by `snapshot()` as the JSON the `metrics` command prints.

Clocks: miles stamps lines with the node's local time and no zone. To compare "now" with those stamps
the monitor remembers, when a newer stamp arrives, what the local wall clock said; `miles_now()` is then
the wall clock shifted by that offset, whatever the nodes' time zone.
"""

from __future__ import annotations

import math
import os
import threading
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any

from backend.signals.activity import LogActivity
from backend.signals.alerts import Alert, AlertEngine, AlertRule
from backend.signals.derived import (
    FACT_NEEDLES,
    DashboardStreams,
    RunFacts,
    derive_run_signals,
    enrich,
    median_step_seconds,
)
from backend.signals.dump_reader import DumpReader
from backend.signals.failures import Diagnosis
from backend.signals.failures.catalog import FailureCatalog
from backend.signals.failures.scanner import RANK_CENSUS
from backend.signals.grammar import METRIC_NEEDLES
from backend.signals.metrics import MetricsCollector, Point
from backend.signals.prefilter import Needles, Prefilter, unique_needles
from backend.signals.rank_map import RANK_NEEDLE, ProcessRanks, add_ranks
from backend.signals.rank_phases import TIMER_NEEDLE, PhaseView
from backend.signals.run_signals import RunSignals
from backend.signals.series import SeriesSetSnapshot
from backend.signals.sources import sources_by_key
from shim.logline import LINE_PREFIX as SHIM_NEEDLE

_JOB_ENDED = ("SUCCEEDED", "FAILED", "STOPPED")


@dataclass(frozen=True)
class MetricsSnapshot:
    """What the UI draws, as of one moment: frozen series and the derived-signals block (built fresh for
    each snapshot, shared with nobody)."""

    series: SeriesSetSnapshot
    derived: RunSignals
    sources: dict[str, str] = field(default_factory=dict)  # metric key -> "events" | "dashboard" | "log"
    phases: PhaseView | None = None  # per-rank phases (the timeline), on their source's clock


def jsonable(value: Any, nulled: list[int] | None = None) -> Any:
    """Non-finite floats become None, recursively (JSON has no NaN), so `json.dump(..., allow_nan=False)`
    never stops half-way; `nulled[0]` counts them."""
    if isinstance(value, float):
        if math.isfinite(value):
            return value
        if nulled is not None:
            nulled[0] += 1
        return None
    if isinstance(value, dict):
        return {str(k): jsonable(v, nulled) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [jsonable(v, nulled) for v in value]
    return value


class RunMonitor:
    """Metrics + facts + telemetry + alerts of one run."""

    def __init__(
        self,
        *,
        facts: RunFacts | None = None,
        rules: list[AlertRule] | None = None,
        expected_scaling: float = 5.0,
        max_points: int = 4096,
        clock: Callable[[], float] = time.time,
        prefilter: bool = True,
    ) -> None:
        """`prefilter`: the readers see only the lines that can matter to them (backend.signals.prefilter);
        off, every reader searches every chunk itself (the same results, slower: the tests compare)."""
        self.collector = MetricsCollector(max_points)
        self.facts = facts or RunFacts()
        self.telemetry = DashboardStreams()
        self.alerts = AlertEngine(rules, expected_scaling=expected_scaling)
        self.dump: DumpReader | None = None
        # The log feed, the dump poll and the periodic checks run on different threads: one at a time.
        self.lock = threading.RLock()
        self._clock = clock
        self._offset: float | None = None  # wall clock minus miles clock
        self._seen_ts = math.nan
        self._shim_judged: tuple[int, bool] = (-1, False)  # the shim ledger's version last judged, and armed
        self.collector.enrichers.append(lambda rec: enrich(rec, self.facts))
        self.collector.enrichers.append(self.facts.note_checkpoint_metric)
        self.collector.subscribe(self._on_point, self.alerts.watches)
        self.activity = LogActivity(self.alerts.noise_needles(), clock)
        self.alerts.world_of = self._train_world
        # (node IP or "", pid) -> rank, from the log's prefixes (stacks)
        self.process_ranks: ProcessRanks = {}
        self.prefilter = (
            Prefilter(monitor_needles(self.alerts.rules, self.alerts.failures.catalog)) if prefilter else None
        )

    def _on_point(self, point: Point) -> None:
        """A changed point of a key some rule watches (the collector builds none for the others)."""
        self.alerts.on_point(point, self.collector.series.get(point.key))

    # ------------------------------------------------------------------ inputs

    def feed_text(self, text: str) -> None:
        """A chunk of sanitised, complete log lines. Readers of single lines get only the lines that hold
        what they look for (the prefilter's one scan); the
        failure scanner and the activity count the chunk."""
        scan = self.prefilter.scan(text) if self.prefilter is not None else None
        lines = scan.lines if scan is not None else text
        self.facts.scan_text(lines, text)
        self.collector.feed_text(lines)
        self.alerts.on_log_text(text, scan)
        self.alerts.shim.note_lines(text)  # every train actor's line: its own one search
        self.telemetry.ranks.add_log_text(lines)
        add_ranks(self.process_ranks, lines)
        self.activity.note(text)
        self._check_blind_spots()
        self._check_shim()
        newest = (
            max(self.facts.last_log_ts, self.collector.last_ts)
            if math.isfinite(self.collector.last_ts)
            else self.facts.last_log_ts
        )
        if math.isfinite(newest) and not newest <= self._seen_ts:
            self._seen_ts = newest
            self._offset = self._clock() - newest

    def on_log_lines(self, first: int, count: int, text: str) -> None:
        """`LogStore.subscribe` signature."""
        with self.lock:
            self.feed_text(text)

    def attach_dump(self, dump_dir: str | os.PathLike[str], *, wait: bool = False) -> None:
        """Read the run's `--dump-details` files too; `wait`: a live run's directory may appear later."""
        self.dump = DumpReader(dump_dir, wait=wait)

    def poll_dump(self) -> int:
        """Read what the dump directory gained; returns how many metric records it held."""
        if self.dump is None:
            return 0
        with self.lock:
            batch = self.dump.poll()
            if batch.meta is not None:
                self.facts.learn_meta(batch.meta)
            self.collector.add_records(batch.records)
            self.telemetry.add(batch)
            self._check_blind_spots()
        return len(batch.records)

    def _check_blind_spots(self) -> None:
        """Charts that would stay empty without a word: unreadable metric lines, keys that never arrive."""
        c = self.collector
        if c.problem_count:
            self.alerts.check_unreadable(c.problem_count, c.problems[0].line if c.problems else "")
        self.alerts.check_missing_keys(
            c.records_by_prefix,
            lambda key: c.series.get(key) is not None,
            lambda prefix: [k for k in c.series.keys() if k.startswith(prefix)],
        )
        if c.series.dropped_keys:
            self.alerts.check_series_cap(c.series.dropped_keys, c.series.max_series, c.series.dropped_sample)

    def on_job_status(self, status: str, message: str | None = None) -> Alert | None:
        with self.lock:
            alert = self.alerts.on_job_status(status, message)
            if str(status).upper() in _JOB_ENDED:
                self._check_shim(ended=True)
            return alert

    def on_node_dead(self, node_id: str, reason: str | None = None) -> Alert | None:
        with self.lock:
            return self.alerts.on_node_dead(node_id, reason)

    def on_shim_missing(self, actors: list[str]) -> Alert | None:
        return self.alerts.on_shim_missing(actors)

    def expect_shim(self, expected: bool = True) -> None:
        """The run was submitted with the shim's setup hook (`shim.package.carries_shim` of its runtime env):
        train actors without a shim line are missing even if no actor logged one."""
        with self.lock:
            self.alerts.shim.expected = expected
            self.alerts.shim.version += 1

    def _check_shim(self, *, ended: bool = False) -> Alert | None:
        """Once the train actors have trained, every one whose process never logged the shim line is named
        (critical `shim-missing`). Judged at the second train step, not the first: Ray tails each worker's
        stdout (the hook's line) and stderr (miles' logging) separately, so an actor's stderr can overtake
        its shim line by a moment, never by a whole train
        step; and at the end of the input (`input_ended`)."""
        steps = self.collector.records.get("step", 0)
        ledger = self.alerts.shim
        state = (ledger.version, steps >= (1 if ended else 2))
        if not state[1] or state == self._shim_judged:
            return None
        self._shim_judged = state
        return self.alerts.on_shim_missing(ledger.missing())

    def input_ended(self) -> Alert | None:
        """The whole log is in (a saved log read, a finished job's log): judge what waits for more lines."""
        with self.lock:
            return self._check_shim(ended=True)

    # ------------------------------------------------------------------ time

    def miles_now(self) -> float:
        """The current time on miles' clock (nan before any stamped line)."""
        return self._clock() - self._offset if self._offset is not None else math.nan

    def end_of_log(self) -> float:
        """The newest miles timestamp seen: "now" for a finished or saved log."""
        return self._seen_ts

    def tick(self, now: float | None = None, dashboard_now: float | None = None) -> list[Alert]:
        """Time-based checks: the stall alarm (miles' clock) and open dashboard phases (epoch clock)."""
        with self.lock:
            return self._tick(now, dashboard_now)

    def _tick(self, now: float | None, dashboard_now: float | None) -> list[Alert]:
        now = self.miles_now() if now is None else now
        fired = []
        alert = self.alerts.check_stall(now, self.collector.last_ts, median_step_seconds(self.collector))
        if alert is not None:
            fired.append(alert)
        dash_now = self._clock() if dashboard_now is None else dashboard_now
        fired.extend(
            self.alerts.check_phases(self.telemetry.open_phases, self.telemetry.median_phase, dash_now)
        )
        running = self.alerts.job_status == "RUNNING"
        ranks = self.telemetry.ranks
        fired.extend(self.alerts.check_stragglers(ranks))
        phase_now = dash_now if ranks.source == "dashboard" else now
        metric_idle = now - self.collector.last_ts if math.isfinite(self.collector.last_ts) else math.nan
        hang = self.alerts.check_no_progress(
            running, ranks, phase_now, metric_idle, median_step_seconds(self.collector)
        )
        if hang is not None:
            fired.append(hang)
        act = self.activity
        for alert in (
            self.alerts.check_no_metrics(
                running, act.logged_s(now), act.lines, sum(self.collector.records.values()), act.last_line
            ),
            self.alerts.check_quiet(running, act.quiet_s(), act.noise_lines, act.noise_sample),
        ):
            if alert is not None:
                fired.append(alert)
        return fired

    def blind_spots(self) -> list[Alert]:
        """The alerts that say a chart is blind (what `metrics` exits non-zero for)."""
        return self.alerts.blind_spots()

    def diagnosis(self) -> Diagnosis | None:
        """Why the run failed (or is failing), knowing the run's train ranks where its facts say them."""
        with self.lock:
            return self.alerts.diagnosis()

    def _train_world(self) -> int | None:
        f = self.facts
        return (
            f.actor_num_nodes * f.actor_num_gpus_per_node
            if f.actor_num_nodes and f.actor_num_gpus_per_node
            else None
        )

    # ------------------------------------------------------------------ output

    def metrics_snapshot(self, now: float | None = None) -> MetricsSnapshot:
        """The series and derived signals for the UI: immutable, safe to hand to another thread."""
        now = self.miles_now() if now is None else now
        with self.lock:
            return MetricsSnapshot(
                self.collector.series.snapshot(),
                derive_run_signals(self.collector, self.facts, self.telemetry, now),
                sources_by_key(self.collector.series),
                self._phase_view(now),
            )

    def _phase_view(self, miles_now: float) -> PhaseView:
        """Per-rank phases, with the offset from the wall
        clock to their source's (miles' clock for the log)."""
        ranks = self.telemetry.ranks
        return ranks.view(miles_now - self._clock() if ranks.source == "log" else 0.0)

    def metrics_snapshot_if_free(self) -> MetricsSnapshot | None:
        """`metrics_snapshot`, or None at once while a feed holds the monitor (the UI thread never waits)."""
        if not self.lock.acquire(blocking=False):
            return None
        try:
            return self.metrics_snapshot()
        finally:
            self.lock.release()

    def snapshot(self, now: float | None = None) -> dict[str, Any]:
        """`{"series", "latest", "derived", "alerts", "cause", "problems"}` and, where a NaN/Infinity became
        null, `"notes"` saying so: strict JSON, every float finite. `cause` is the diagnosis (the cause, its
        consequences) or null."""
        now = self.miles_now() if now is None else now
        frozen = self.collector.series.snapshot()
        problems = [str(p) for p in self.collector.problems]
        if self.collector.problem_count > len(problems):
            problems.append(f"... and {self.collector.problem_count - len(problems)} more")
        if self.dump is not None and self.dump.bad_lines:
            sample = f" (e.g. {self.dump.bad_sample})" if self.dump.bad_sample else ""
            problems.append(f"{self.dump.bad_lines} malformed lines skipped in {self.dump.root}{sample}")
        if self.dump is not None:
            problems.extend(self.dump.refused)
        if self.collector.bad_steps:
            problems.append(f"{self.collector.bad_steps} point(s) with a NaN/Infinity step skipped")
        nulled = [0]
        out: dict[str, Any] = jsonable(
            {
                "series": {key: [list(p) for p in frozen.by_key[key].points()] for key in frozen.keys()},
                "latest": self.collector.latest(),
                "derived": derive_run_signals(self.collector, self.facts, self.telemetry, now).to_json(),
                "alerts": [a.to_json() for a in self.alerts.alerts],
                "cause": jsonable(found.to_json()) if (found := self.diagnosis()) is not None else None,
                "problems": problems,
            },
            nulled,
        )
        # series points carry None for NaN/Infinity already (Series.points): those say so too
        if nulled[0] or any(v is None for pts in out["series"].values() for _, v in pts):
            out["notes"] = [
                "null stands for a non-finite number (NaN or Infinity) in the input: JSON has none"
            ]
        return out


def monitor_needles(rules: Iterable[AlertRule], catalog: FailureCatalog) -> Needles:
    """Every literal a line the monitor reads may hold, from the rules, the catalog and the grammars."""
    lines = (
        *METRIC_NEEDLES,
        *(hint for rule in rules for hint in rule.hints),
        SHIM_NEEDLE,
        TIMER_NEEDLE,
        RANK_NEEDLE,
        *FACT_NEEDLES,
    )
    flat = (*catalog.hints(), RANK_CENSUS)
    return Needles(unique_needles(lines), unique_needles(flat))
