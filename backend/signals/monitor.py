"""Everything the console reads about one run, in one object: metrics, the run's facts, dashboard
telemetry and alerts, fed by sanitised log text (`LogStore.subscribe(monitor.on_log_lines)`) and by polls
of the dump directory, and summarised by `snapshot()` as the JSON the `metrics` command prints.

Clocks: miles stamps lines with the node's local time and no zone. To compare "now" with those stamps
the monitor remembers, when a newer stamp arrives, what the local wall clock said; `miles_now()` is then
the wall clock shifted by that offset, whatever the nodes' time zone.
"""

from __future__ import annotations

import dataclasses
import math
import os
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from backend.signals.activity import LogActivity
from backend.signals.alerts import Alert, AlertEngine, AlertRule
from backend.signals.derived import (
    ENRICHED_KINDS,
    FACT_NEEDLES,
    DashboardStreams,
    RunFacts,
    derive_run_signals,
    enrich,
    median_step_seconds,
)
from backend.signals.dump_reader import DumpReader
from backend.signals.failures import Diagnosis, Incident
from backend.signals.grammar import METRIC_NEEDLES, STAMP
from backend.signals.grpo_groups import rollout_groups
from backend.signals.line_front import UnreadableBytes
from backend.signals.metrics import MetricsCollector, parse_ts
from backend.signals.prefilter import Prefilter, Scan, unique_needles
from backend.signals.rank_map import RANK_NEEDLE, ProcessRanks, add_ranks
from backend.signals.rank_phases import TIMER_NEEDLE, PhaseView
from backend.signals.readers import ChunkReader, LineReader, Readers, TextReader
from backend.signals.rollout_data import RolloutSamples, RolloutShelf
from backend.signals.run_signals import RunSignals
from backend.signals.samples_health import SamplesHealth
from backend.signals.scan_engine import Engine
from backend.signals.series import SeriesSetSnapshot
from backend.signals.shim_reports import TRAIN_NEEDLE
from backend.signals.sources import sources_by_key

_JOB_ENDED = ("SUCCEEDED", "FAILED", "STOPPED")


SAMPLE_TAIL = 200  # characters kept of the line that carried a skewed stamp


def _line_stamped(text: str, stamp: float) -> str:
    """The (last) line of `text` whose stamp is `stamp`: the sample of a skewed clock names its node."""
    for m in reversed(list(STAMP.finditer(text))):
        if parse_ts(m.group(1)) == stamp:
            start = text.rfind("\n", 0, m.start()) + 1
            end = text.find("\n", m.end())
            return text[start : end if end >= 0 else len(text)][:SAMPLE_TAIL]
    return ""


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
        engine: Engine | None = None,
    ) -> None:
        """`prefilter`: the readers see only the lines that can matter to them (backend.signals.prefilter);
        off, every reader searches every chunk itself (the same results, slower: the tests compare). `engine`:
        the scan's (backend.signals.scan_engine), the process's by default."""
        self.collector = MetricsCollector(max_points)
        self.facts = facts or RunFacts()
        self.telemetry = DashboardStreams()
        self.alerts = AlertEngine(rules, expected_scaling=expected_scaling)
        self.dump: DumpReader | None = None
        self.samples: RolloutShelf | None = None  # the dump's rollout_data/<N>.pt (issue 28)
        self.samples_health = SamplesHealth()
        # The log feed, the dump poll and the periodic checks run on different threads: one at a time.
        self.lock = threading.RLock()
        self._clock = clock
        self._offset: float | None = None  # wall clock minus miles clock
        self._seen_ts = math.nan
        self.skew_ahead_s = 0.0  # the furthest a stamp ran ahead of the log's clock (shown, never adopted)
        self._skew_sample = ""  # the line that carried it
        self._metric_records = 0  # metric records seen so far, to tell when a new one arrives
        self._metric_arrived = math.nan  # the console's clock when the newest metric record arrived
        self._shim_judged: tuple[int, bool, bool] = (
            -1,
            False,
            False,
        )  # the shim ledger's version last judged, and armed
        self.collector.add_enricher(lambda rec: enrich(rec, self.facts), ENRICHED_KINDS)
        self.collector.add_enricher(self.facts.note_checkpoint_metric)
        # after enrich: the samples' numbers win
        self.collector.add_enricher(self.samples_health.enrich, SamplesHealth.ENRICHED_KINDS)
        self.collector.subscribe(self.alerts)
        self.activity = LogActivity(self.alerts.noise_needles(), clock)
        self.alerts.world_of = self._train_world
        # (node IP or "", pid) -> rank, from the log's prefixes (stacks)
        self.process_ranks: ProcessRanks = {}
        self.unreadable = UnreadableBytes()  # the log store's count, as last noted
        self.readers = self._readers()
        needles = self.readers.needles()
        self.prefilter = (
            Prefilter(
                dataclasses.replace(needles, lines=unique_needles((*needles.lines, *self.activity.noise))),
                engine,
            )
            if prefilter
            else None
        )

    # ------------------------------------------------------------------ inputs

    def _readers(self) -> Readers:
        """Every reader of the log text, with the needles its lines hold (backend.signals.readers): a new
        reader goes here. Order matters: the facts before the metrics (their enrichers read the facts)."""
        return Readers(
            (
                ChunkReader("facts", FACT_NEEDLES, (), self._read_facts),
                LineReader("metrics", METRIC_NEEDLES, self.collector.feed_text),
                ChunkReader(
                    "alerts", self.alerts.log_needles(), self.alerts.flat_needles(), self._read_alerts
                ),
                TextReader("train actors", (TRAIN_NEEDLE,), self.alerts.shim.note_lines),
                LineReader("rank phases", (TIMER_NEEDLE,), self.telemetry.ranks.add_log_text),
                LineReader("process ranks", (RANK_NEEDLE,), self._read_ranks),
            )
        )

    def _read_facts(self, text: str, scan: Scan | None) -> None:
        self.facts.scan_text(scan.lines_of(FACT_NEEDLES) if scan is not None else text, text)

    def _read_alerts(self, text: str, scan: Scan | None) -> None:
        self.alerts.on_log_text(text, scan)

    def _read_ranks(self, lines: str) -> None:
        add_ranks(self.process_ranks, lines)

    def feed_text(self, text: str) -> None:
        """A chunk of sanitised, complete log lines: one scan finds every reader's needles (the prefilter;
        off, each reader searches the chunk itself: the same results, slower, as the tests compare), each
        reader gets its lines; the activity counts the chunk."""
        scan = self.prefilter.scan(text) if self.prefilter is not None else None
        self.readers.feed(text, scan)
        self.activity.note(text, scan)
        self._check_blind_spots()
        self._check_shim()
        newest = (
            max(self.facts.last_log_ts, self.collector.last_ts)
            if math.isfinite(self.collector.last_ts)
            else self.facts.last_log_ts
        )
        self._note_arrivals()
        if math.isfinite(newest) and not newest <= self._seen_ts:
            self._adopt_stamp(newest, text)

    def _note_arrivals(self) -> None:
        """When a metric record arrives, on the console's own clock: what the live stall is measured from."""
        records = sum(self.collector.records.values())
        if records > self._metric_records:
            self._metric_records = records
            self._metric_arrived = self._clock()

    def _adopt_stamp(self, newest: float, text: str) -> None:
        """A newer stamp moves the log's clock, unless it runs ahead of that clock by more than the skew
        rule allows (a node an hour ahead, a message holding a future time): then it is measured and said,
        and "now" stays where the rest of the log puts it."""
        expected = self.miles_now()
        ahead = newest - expected if math.isfinite(expected) else 0.0
        limit = self.alerts.skew_limit_s()
        if ahead > limit:
            if ahead > self.skew_ahead_s:  # the line that carries it is the sample: it names its node
                self.skew_ahead_s = ahead
                self._skew_sample = _line_stamped(text[-4096:], newest)
            self.alerts.check_clock_skew(self.skew_ahead_s, self._skew_sample)
            return
        self._seen_ts = newest
        self._offset = self._clock() - newest

    def on_log_lines(self, first: int, count: int, text: str) -> None:
        """`LogStore.subscribe` signature."""
        with self.lock:
            self.feed_text(text)

    def attach_dump(self, dump_dir: str | os.PathLike[str], *, wait: bool = False) -> None:
        """Read the run's `--dump-details` files too; `wait`: a live run's directory may appear later."""
        self.dump = DumpReader(dump_dir, wait=wait)
        self.samples = RolloutShelf(Path(dump_dir))

    def poll_dump(self, *, whole: bool = False, progress: Callable[[int, int], None] | None = None) -> int:
        """Read what the dump directory gained; returns how many metric records it held. `whole`: to the end
        of every file (a one-shot reader), never only one poll's worth, with `progress(read, total)`."""
        if self.dump is None:
            return 0
        fresh = self.samples.poll() if self.samples is not None else []  # the slow read: outside the lock
        with self.lock:
            batch = self.dump.poll_whole(progress) if whole else self.dump.poll()
            if batch.meta is not None:
                self.facts.learn_meta(batch.meta)
            self.collector.add_records(batch.records)
            self._note_arrivals()
            self.telemetry.add(batch)
            self._add_samples(fresh)
            self._check_blind_spots()
        return len(batch.records)

    def _add_samples(self, fresh: list[RolloutSamples]) -> None:
        """Each newly read train rollout's health record (at its rollout step; the file's time as miles')."""
        for rollout in fresh:
            if rollout.evaluation:
                continue
            groups = rollout_groups(rollout)
            self.collector.add_record(self.samples_health.record(groups, rollout.written_at))

    def _check_blind_spots(self) -> None:
        """Charts that would stay empty without a word: unreadable metric lines, keys that never arrive."""
        c = self.collector
        if c.problem_count:
            self.alerts.check_unreadable(c.problem_count, c.problems[0].line if c.problems else "")
        if c.cut_count:
            self.alerts.check_cut_metrics(c.cut_count, c.cut_sample)
        self.alerts.check_missing_keys(
            c.records_by_prefix,
            lambda key: c.series.get(key) is not None,
            lambda prefix: [k for k in c.series.keys() if k.startswith(prefix)],
        )
        if c.series.dropped_keys:
            self.alerts.check_series_cap(c.series.dropped_keys, c.series.max_series, c.series.dropped_sample)

    def note_unreadable(self, unreadable: UnreadableBytes) -> None:
        """What the log store could not read as text (NUL, invalid UTF-8, stray controls, long lines), as
        counted so far: said (an alert, `problems`, `unreadable` in the JSON), never a refusal."""
        if unreadable == self.unreadable:
            return
        with self.lock:
            self.unreadable = unreadable
            self.alerts.check_unreadable_bytes(unreadable.bytes + unreadable.long_lines, unreadable.text())

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

    def verify_train_actors(self, actors: list[tuple[int, str, str]]) -> Alert | None:
        """The job's actors as Ray's state API lists them, (pid, ip, class name): only its train actors'
        processes report the shim from now on, and the reports are judged again."""
        with self.lock:
            self.alerts.shim.verify_with(actors)
            return self._check_shim()

    def _check_shim(self, *, ended: bool = False) -> Alert | None:
        """Once the train actors have trained, every one whose process never logged the shim line is named
        (critical `shim-missing`). Judged at the second train step, not the first: Ray tails each worker's
        stdout (the hook's line) and stderr (miles' logging) separately, so an actor's stderr can overtake
        its shim line by a moment, never by a whole train
        step; and at the end of the input (`input_ended`)."""
        steps = self.collector.records.get("step", 0)
        ledger = self.alerts.shim
        state = (ledger.version, steps >= (1 if ended else 2), ended)
        if not state[1] or state == self._shim_judged:
            return None
        self._shim_judged = state
        return self.alerts.on_shim_missing(ledger.missing(ended=ended))

    def input_ended(self) -> Alert | None:
        """The whole log is in (a saved log read, a finished job's log): judge what waits for more lines (the
        shim's reports, a phase the log ends in standing still)."""
        with self.lock:
            self.alerts.on_run_over()
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
        live = now is None
        now = self.miles_now() if now is None else now
        fired = []
        alert = (  # live: on the console's clock since the newest metric arrived; a saved log: its own stamps
            self.alerts.check_stall(self._clock(), self._metric_arrived, median_step_seconds(self.collector))
            if live
            else self.alerts.check_stall(now, self.collector.last_ts, median_step_seconds(self.collector))
        )
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
            found = self.alerts.diagnosis()
            first = self.activity.first_ts
        if found is None or found.cause.time is None or math.isnan(first):
            return found
        at = parse_ts(found.cause.time)
        return found if math.isnan(at) or at < first else dataclasses.replace(found, up_s=at - first)

    def incidents(self) -> tuple[Incident, ...]:
        """The failures the run outlived (listed, never the cause)."""
        with self.lock:
            return self.alerts.incidents()

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

    def _problems(self) -> list[str]:
        """What could not be read, each said in a line: metric lines, the dump, rollout files, cut dicts,
        unreadable bytes, non-finite steps."""
        c = self.collector
        problems = [str(p) for p in c.problems]
        if c.problem_count > len(problems):
            problems.append(f"... and {c.problem_count - len(problems)} more")
        problems.extend(self._source_problems())
        if c.cut_count:
            problems.append(
                f"{c.cut_count} metric line(s) cut off mid-dict: their complete pairs were read"
                f" (e.g. {c.cut_sample})"
            )
        if self.unreadable:
            problems.append(f"{self.unreadable.text()}: the text around them was read")
        if c.bad_steps:
            problems.append(f"{c.bad_steps} point(s) with a NaN/Infinity step skipped")
        return problems

    def _source_problems(self) -> list[str]:
        """The dump's malformed lines and refused files, and the rollout files that could not be read."""
        out: list[str] = []
        if self.dump is not None:
            if self.dump.bad_lines:
                sample = f" (e.g. {self.dump.bad_sample})" if self.dump.bad_sample else ""
                out.append(f"{self.dump.bad_lines} malformed lines skipped in {self.dump.root}{sample}")
            out.extend(self.dump.refused)
        if self.samples is not None:
            out.extend(self.samples.unreadable())  # a rollout file refused (needs torch/miles) or broken
        return out

    def snapshot(self, now: float | None = None) -> dict[str, Any]:
        """`{"series", "latest", "derived", "alerts", "cause", "problems"}` and, where a NaN/Infinity became
        null, `"notes"` saying so: strict JSON, every float finite. `cause` is the diagnosis (the cause, its
        consequences) or null."""
        now = self.miles_now() if now is None else now
        frozen = self.collector.series.snapshot()
        problems = self._problems()
        nulled = [0]
        out: dict[str, Any] = jsonable(
            {
                "series": {key: [list(p) for p in frozen.by_key[key].points()] for key in frozen.keys()},
                "latest": self.collector.latest(),
                "derived": derive_run_signals(self.collector, self.facts, self.telemetry, now).to_json(),
                "alerts": [a.to_json() for a in self.alerts.alerts],
                "cause": jsonable(found.to_json()) if (found := self.diagnosis()) is not None else None,
                "incidents": [i.to_json() for i in self.incidents()],
                "problems": problems,
                "unreadable": self.unreadable.to_json(),
            },
            nulled,
        )
        # series points carry None for NaN/Infinity already (Series.points): those say so too
        if nulled[0] or _has_null_point(out["series"]):
            out["notes"] = [
                "null stands for a non-finite number (NaN or Infinity) in the input: JSON has none"
            ]
        return out


def _has_null_point(series: dict[str, list[list[Any]]]) -> bool:
    return any(v is None for pts in series.values() for _, v in pts)
