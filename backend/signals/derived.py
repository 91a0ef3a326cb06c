"""Derived signals an operator asks for and miles does not print: cluster throughput, progress and ETA,
rollout vs train time, time since the last checkpoint, zero-std group fraction, GPU/phase/engine summaries.

The run's shape (num_rollout, rollout GPUs, batch) comes from the spec when the console launched the run,
else from what the log itself says (Megatron prints every argument as `  name ....... value`; the submit
line carries `--flag value`), else from the dashboard's meta.json.
"""

from __future__ import annotations

import itertools
import math
import re
import statistics
from collections import deque
from dataclasses import dataclass, field

from backend.json_fields import Fields
from backend.natural_order import natural_key
from backend.signals.dump_reader import DumpBatch, PhaseEvent
from backend.signals.grammar import STAMP, parse_line
from backend.signals.metrics import MetricRecord, MetricsCollector, lines_containing, parse_ts
from backend.signals.rank_phases import RankPhases
from backend.signals.run_signals import (
    CheckpointState,
    EngineSummary,
    GpuSummary,
    OpenPhase,
    PhaseStat,
    PhaseSummary,
    Progress,
    RunSignals,
    StreamsSummary,
    Throughput,
    TimePerRollout,
    past_num_rollout,
)
from backend.signals.series import Series

FACT_KEYS = (
    "num_rollout",
    "rollout_num_gpus",
    "rollout_batch_size",
    "n_samples_per_prompt",
    "global_batch_size",
    "save_interval",
    "actor_num_nodes",
    "actor_num_gpus_per_node",
)
# `--num-rollout 30` (the submit line, the job's entrypoint);
# literal-prefixed, so the regex engine skips ahead.
_FLAG = re.compile(r"--(" + "|".join(k.replace("_", "-") for k in FACT_KEYS) + r")[ =](\d+)(?=\s|$)")
# Megatron's argument dump: `  num_rollout ..................... 30`
_ARG_DUMP = re.compile(r"\s(" + "|".join(FACT_KEYS) + r") \.{3,} (\d+)\s*$")
_CHECKPOINT = re.compile(
    r"Timer save_model end \(elapsed: (?P<elapsed>[\d.]+)\s*s\)|successfully "
    r"saved checkpoint from iteration\s+(?P<iteration>\d+)"
)
CHECKPOINT_MERGE_S = 120.0
# Literal pieces of the lines scan_text reads (the monitor's prefilter keeps the lines holding them).
_SAVE_NEEDLES = ("save_model end", "saved checkpoint from")
FACT_NEEDLES = ("--", " ....", *_SAVE_NEEDLES)


@dataclass
class RunFacts:
    """The few numbers of the run's shape the derived signals need, and log-borne events."""

    num_rollout: int | None = None
    rollout_num_gpus: int | None = None
    rollout_batch_size: int | None = None
    n_samples_per_prompt: int | None = None
    global_batch_size: int | None = None
    save_interval: int | None = None
    actor_num_nodes: int | None = None
    actor_num_gpus_per_node: int | None = None
    checkpoints: list[tuple[float, int | None]] = field(default_factory=list)  # (miles ts, iteration)
    last_log_ts: float = math.nan  # newest miles timestamp seen in the log
    pinned: set[str] = field(default_factory=set)  # facts given by the caller; the log does not override

    def pin(self, name: str, value: int) -> None:
        setattr(self, name, value)
        self.pinned.add(name)

    def learn(self, name: str, value: int) -> None:
        if name not in self.pinned and getattr(self, name, None) is None:
            setattr(self, name, value)

    def scan_text(self, text: str, whole: str | None = None) -> None:
        """Pick facts, checkpoints and the newest timestamp out of a chunk of sanitised lines (`text`: the
        chunk, or only its lines holding FACT_NEEDLES when `whole` is the chunk, whose tail holds the stamp).

        Only str.find runs over the whole chunk; regexes look at the few lines it points to.
        """
        if "--" in text:
            for m in _FLAG.finditer(text):
                self.learn(m.group(1).replace("-", "_"), int(m.group(2)))
        for line in lines_containing(text, " ...."):
            dump = _ARG_DUMP.search(line)
            if dump is not None:
                self.learn(dump.group(1), int(dump.group(2)))
        saves = _saves(text)
        if saves:
            self._add_saves(saves)
        self._note_stamp((text if whole is None else whole)[-4096:])

    def _add_saves(self, saves: list[tuple[int, float, int | None]]) -> None:
        """Each save line in log order; one without a stamp takes the next stamped one's (or the newest)."""
        for i, (_pos, ts, iteration) in enumerate(saves):
            if math.isnan(ts):  # Megatron's print has no bracket: take the stamp of the save's Timer line
                later = [t for _p, t, _it in saves[i + 1 :] if math.isfinite(t)]
                ts = later[0] if later else self.last_log_ts
            self._add_checkpoint(ts, iteration)

    def _note_stamp(self, tail: str) -> None:
        """The newest miles timestamp in the chunk's tail, if newer than the one known."""
        stamps = STAMP.findall(tail)
        if stamps:
            newest = max(map(parse_ts, stamps))
            if not newest <= self.last_log_ts:
                self.last_log_ts = newest

    def _add_checkpoint(self, ts: float, iteration: int | None) -> None:
        """One save prints several lines (Megatron's "successfully saved", the Timer's end): merge them."""
        if self.checkpoints:
            last_ts, last_it = self.checkpoints[-1]
            if (math.isnan(ts) or math.isnan(last_ts) or abs(ts - last_ts) < CHECKPOINT_MERGE_S) and (
                iteration is None or last_it is None or iteration == last_it
            ):
                self.checkpoints[-1] = (
                    last_ts if math.isfinite(last_ts) else ts,
                    iteration if last_it is None else last_it,
                )
                return
        self.checkpoints.append((ts, iteration))

    def learn_meta(self, meta: Fields) -> None:
        args = meta.obj("args")
        for name in FACT_KEYS:
            value = args.whole(name)
            if value is not None:
                self.learn(name, value)

    def note_checkpoint_metric(self, rec: MetricRecord) -> None:
        """`perf/save_model_time` in a train-side perf dict also means a save finished."""
        if "perf/save_model_time" in rec.values and math.isfinite(rec.ts):
            if not any(abs(ts - rec.ts) < CHECKPOINT_MERGE_S for ts, _ in self.checkpoints):
                self.checkpoints.append((rec.ts, None))


def _saves(text: str) -> list[tuple[int, float, int | None]]:
    """(line start, miles ts or nan, iteration) of each checkpoint line, in log order: one save prints
    several lines (merged by RunFacts._add_checkpoint)."""
    saves = []
    for needle in _SAVE_NEEDLES:
        pos = text.find(needle)
        while pos >= 0:
            start = text.rfind("\n", 0, pos) + 1
            end = text.find("\n", pos)
            save = _save(text[start : len(text) if end < 0 else end])
            if save is not None:
                saves.append((start, *save))
            pos = -1 if end < 0 else text.find(needle, end)
    saves.sort()
    return saves


def _save(line: str) -> tuple[float, int | None] | None:
    """(miles ts or nan, iteration or None) of a checkpoint line, None for another line holding a needle."""
    save = _CHECKPOINT.search(line)
    if save is None:
        return None
    stamp = parse_line(line).ts
    return parse_ts(stamp) if stamp else math.nan, int(save["iteration"]) if save["iteration"] else None


def zero_std_fraction(values: dict[str, float], n_groups: int | None) -> float | None:
    """Fraction of GRPO groups whose rewards are all equal, from a rollout-side perf dict.

    miles logs counts per reward value (`rollout/zero_std/count_<r>`) and the all-0/all-1 percentages over
    all groups; the group count is the rollout batch size, or inferred from a count and its percentage.
    """
    counts = {k: values[k] for k in _count_keys(tuple(values)) if math.isfinite(values[k])}
    zero_pct = values.get("rollout/zero_std/all_zero_percentage")
    one_pct = values.get("rollout/zero_std/all_one_percentage")
    if not counts and zero_pct is None and one_pct is None:
        return None
    if n_groups is None:
        n_groups = _groups_from_percentages(counts, zero_pct, one_pct)
    if n_groups:
        return min(1.0, sum(counts.values()) / n_groups)
    return _fraction_from_percentages(counts, zero_pct, one_pct)


_COUNT_KEYS: dict[tuple[str, ...], tuple[str, ...]] = {}  # a perf dict's keys -> its zero-std counts' keys


def _count_keys(keys: tuple[str, ...]) -> tuple[str, ...]:
    """The `rollout/zero_std/count_<r>` keys among a dict's, found once per dict shape (every rollout's perf
    dict has the same keys; looking each up per record cost more than the rest of the enricher)."""
    found = _COUNT_KEYS.get(keys)
    if found is None:
        found = tuple(k for k in keys if k.startswith("rollout/zero_std/count_"))
        if len(_COUNT_KEYS) >= 256:
            _COUNT_KEYS.clear()
        _COUNT_KEYS[keys] = found
    return found


def _fraction_from_percentages(
    counts: dict[str, float], zero_pct: float | None, one_pct: float | None
) -> float | None:
    """The zero-std fraction when the group count is unknown: miles' two percentages, where they can hold."""
    if not counts:
        return 0.0
    if sum(counts.values()) > 0 and not (zero_pct or one_pct):
        # miles' percentages look the counts up under "0.0"/"1.0": with integer rewards (`count_0`,
        # `count_1`) they read 0.0 while zero-std groups exist. Unknown, never a wrong 0 (the samples tell).
        return None
    return (zero_pct or 0.0) + (one_pct or 0.0)


def _groups_from_percentages(
    counts: dict[str, float], zero_pct: float | None, one_pct: float | None
) -> int | None:
    """The group count a count and its percentage imply (either spelling of the reward: `0.0` or `0`)."""
    for reward, pct in (("0", zero_pct), ("1", one_pct)):
        for count_key in (f"rollout/zero_std/count_{reward}.0", f"rollout/zero_std/count_{reward}"):
            if count_key in counts and pct and pct > 0:
                return round(counts[count_key] / pct)
    return None


# Engine gauges that are fractions or per-request latencies: a mean over an engine's dp ranks, then over the
# engines, never a sum (three engines at 40 % token usage are at 40 %, not 120 %; miles-run-output.md §4.3).
AVERAGED_ENGINE_GAUGES = ("token_usage", "cache_hit_rate", "kv_transfer_latency")


def is_averaged_gauge(metric: str) -> bool:
    """True for an engine metric (`sglang_token_usage`,
    `sglang_kv_transfer_latency_ms`, ...) that is averaged."""
    return metric.removeprefix("sglang_").startswith(AVERAGED_ENGINE_GAUGES)


def engine_totals(values: dict[tuple[str, str, str], float]) -> dict[str, float]:
    """(engine addr, metric, labels) -> newest value, folded per metric: averaged gauges as the mean of each
    engine's mean over its dp ranks, every other gauge or counter summed over engines and ranks."""
    per_engine: dict[str, dict[str, list[float]]] = {}
    for (addr, metric, _labels), value in values.items():
        if math.isfinite(value):
            per_engine.setdefault(metric, {}).setdefault(addr, []).append(value)
    out: dict[str, float] = {}
    for metric, engines in per_engine.items():
        if is_averaged_gauge(metric):
            out[metric] = statistics.fmean(statistics.fmean(v) for v in engines.values())
        else:
            out[metric] = sum(sum(v) for v in engines.values())
    return dict(sorted(out.items()))


class DashboardStreams:
    """Summaries of the dashboard streams: latest per GPU, phase durations and open phases, engine gauges.

    A phase's close is matched to its open by `t0`: miles sends an open marker at once and closes in batches,
    so a close can arrive after the next open of the same name on the same rank (miles-run-output.md §4.3)."""

    def __init__(self, history: int = 256) -> None:
        self.gpus: dict[tuple[str, int], dict[str, float]] = {}
        self.phase_durations: dict[str, deque[float]] = {}
        self.open_phases: dict[tuple[str, int, str, str], float] = {}
        self._closed_t0: dict[tuple[str, int, str, str], float] = {}  # the newest closed t0 per phase key
        self.engines: dict[tuple[str, str, str], float] = {}  # (addr, metric, labels) -> newest value
        self.ranks = RankPhases()  # per-rank spans and rounds (the timeline, stragglers)
        self.last_ts = math.nan
        self._history = history

    def add(self, batch: DumpBatch) -> None:
        for g in batch.gpu_util:
            self._add_gpu(g)
        for p in batch.phases:
            self._add_phase(p)
        for e in batch.engine_series:
            self.engines[(e.addr, e.metric, e.labels)] = e.value
            self._seen(e.ts)

    def _add_gpu(self, g: Fields) -> None:
        """The newest reading of one GPU (an unreadable index is -1)."""
        index = g.reading("gpu")
        gpu = (g.text("node", "None"), int(index) if math.isfinite(index) else -1)
        self.gpus[gpu] = {
            "util": g.reading("util"),
            "mem_mb": g.reading("mem_mb"),
            "power_w": g.reading("power_w"),
            "ts": g.reading("ts"),
        }
        self._seen(g.reading("ts"))

    def _add_phase(self, p: PhaseEvent) -> None:
        """An open marker opens its phase; a close ends the open of the same t0 and records the duration."""
        name, t0, t1 = p.name, p.t0, p.t1
        phase = (p.node, p.rank, p.role, name)
        self.ranks.add_event(p)
        if p.is_open:
            if t0 > self._closed_t0.get(phase, -math.inf):  # not an open whose close came first
                self.open_phases[phase] = t0
            self._seen(t0)
        elif math.isfinite(t0) and math.isfinite(t1) and t1 >= t0:
            if self.open_phases.get(phase) == t0:  # the close of this open, not of an earlier one
                del self.open_phases[phase]
            self._closed_t0[phase] = max(t0, self._closed_t0.get(phase, -math.inf))
            self.phase_durations.setdefault(name, deque(maxlen=self._history)).append(t1 - t0)
            self._seen(t1)

    def _seen(self, ts: float) -> None:
        if math.isfinite(ts) and not ts <= self.last_ts:
            self.last_ts = ts

    def median_phase(self, name: str) -> float | None:
        durations = self.phase_durations.get(name)
        return statistics.median(durations) if durations else None

    def summary(self, now: float) -> StreamsSummary:
        engines = None
        if self.engines:
            engines = EngineSummary(len({k[0] for k in self.engines}), engine_totals(self.engines))
        return StreamsSummary(self._gpu_summary(), self._phase_summary(now), engines)

    def _gpu_summary(self) -> GpuSummary | None:
        """GPUs seen, mean and min utilisation over those with a reading, the mean per node."""
        if not self.gpus:
            return None
        utils = [g["util"] for g in self.gpus.values() if math.isfinite(g["util"])]
        per_node: dict[str, list[float]] = {}
        for (node, _gpu), g in self.gpus.items():
            if math.isfinite(g["util"]):
                per_node.setdefault(node, []).append(g["util"])
        return GpuSummary(
            len(self.gpus),
            statistics.fmean(utils) if utils else None,
            min(utils) if utils else None,
            {n: statistics.fmean(per_node[n]) for n in sorted(per_node, key=natural_key)},
        )

    def _phase_summary(self, now: float) -> PhaseSummary | None:
        """Each phase's count and median duration, and the phases open now (with their age)."""
        if not self.phase_durations and not self.open_phases:
            return None
        return PhaseSummary(
            {n: PhaseStat(len(d), statistics.median(d)) for n, d in sorted(self.phase_durations.items())},
            tuple(
                OpenPhase(node, rank, role, name, now - t0 if math.isfinite(now) else None)
                for (node, rank, role, name), t0 in sorted(self.open_phases.items())
            ),
        )


ENRICHED_KINDS = frozenset(
    {"perf-rollout"}
)  # the only records enrich adds to (MetricsCollector.add_enricher)


def enrich(rec: MetricRecord, facts: RunFacts) -> None:
    """Add per-record derived metrics (as `derived/*` keys on the record's own axis) before it is stored."""
    if rec.kind not in ENRICHED_KINDS:
        return
    n_groups = facts.rollout_batch_size
    frac = zero_std_fraction(rec.values, n_groups)
    if frac is not None:
        rec.values["derived/zero_std_frac"] = frac
    tpgs = rec.values.get("perf/tokens_per_gpu_per_sec")
    if tpgs is not None and facts.rollout_num_gpus:
        rec.values["derived/cluster_tokens_per_sec"] = tpgs * facts.rollout_num_gpus


def _median(values: list[float]) -> float | None:
    finite = [v for v in values if math.isfinite(v)]
    return statistics.median(finite) if finite else None


def median_step_seconds(collector: MetricsCollector) -> float | None:
    """Typical wall time of one rollout: `perf/step_time`, else the spacing of rollout-level records, else
    that of train steps times the steps per rollout the log shows (never an assumed count)."""
    series = collector.series
    step_time = series.get("perf/step_time")
    if step_time is not None and len(step_time) > 0:
        return _median(step_time.tail(32))
    for key in ("rollout/raw_reward", "perf/rollout_time"):
        rollout_level = series.get(key)
        if rollout_level is not None and len(rollout_level) > 2:
            return _median_spacing(rollout_level)
    return _train_rollout_seconds(collector)


def _train_rollout_seconds(collector: MetricsCollector) -> float | None:
    """The spacing of train steps times the steps per rollout, when the log shows that count."""
    per_rollout = collector.steps_per_rollout() or 0
    train = collector.series.get("train/loss")
    if not per_rollout or train is None or len(train) <= 2:
        return None
    median = _median_spacing(train)
    return median * per_rollout if median is not None else None


def _median_spacing(series: Series) -> float | None:
    """The median gap between a series' newest (up to 33) finite, increasing timestamps."""
    ts = [t for t in series.ts[-33:] if math.isfinite(t)]
    return _median([b - a for a, b in itertools.pairwise(ts) if b > a])


def derive_run_signals(
    collector: MetricsCollector, facts: RunFacts, telemetry: DashboardStreams | None, now: float
) -> RunSignals:
    """The derived signals of a snapshot. `now` is epoch seconds on miles' clock (nan = unknown)."""
    has_last = math.isfinite(collector.last_ts)
    return RunSignals(
        checkpoint=_checkpoint_state(facts, now),
        throughput=_throughput(collector, facts),
        time_per_rollout=_time_per_rollout(collector),
        progress=_progress(collector, facts),
        zero_std_frac=collector.series.latest("derived/zero_std_frac"),
        has_last_metric=has_last,
        since_last_metric_s=now - collector.last_ts if has_last and math.isfinite(now) else None,
        streams=telemetry.summary(now) if telemetry is not None else StreamsSummary(),
    )


def _throughput(collector: MetricsCollector, facts: RunFacts) -> Throughput | None:
    """Tokens per GPU per second, and over the rollout GPUs when their count is known."""
    tpgs = collector.series.latest("perf/tokens_per_gpu_per_sec")
    if tpgs is None:
        return None
    gpus = facts.rollout_num_gpus
    effective = collector.series.latest("perf/effective_tokens_per_gpu_per_sec")
    return Throughput(tpgs, gpus, tpgs * gpus if gpus else None, effective)


def _time_per_rollout(collector: MetricsCollector) -> TimePerRollout | None:
    series = collector.series
    rollout_s, train_s = series.latest("perf/rollout_time"), series.latest("perf/train_time")
    if rollout_s is None and train_s is None:
        return None
    return TimePerRollout(
        rollout_s,
        train_s,
        series.latest("perf/step_time"),
        series.latest("perf/wait_time_ratio"),
        rollout_s / train_s if rollout_s is not None and train_s else None,
    )


def _progress(collector: MetricsCollector, facts: RunFacts) -> Progress | None:
    """Rollouts done of num_rollout, with the fraction and ETA only while the run is within it."""
    last = collector.last_step
    done = max((last.get(k, -1) for k in ("perf-rollout", "rollout", "perf-train")), default=-1) + 1
    total = facts.num_rollout
    if done <= 0 and not total:
        return None
    step_s = median_step_seconds(collector)
    end = total if total and not past_num_rollout(done, total) else None  # past it: no fraction, no ETA
    remaining = end - done if end else None
    return Progress(
        done,
        total,
        done / end if end else None,
        last.get("step", -1) + 1,
        collector.steps_per_rollout(),
        step_s,
        remaining * step_s if remaining is not None and step_s else None,
    )


def _checkpoint_state(facts: RunFacts, now: float) -> CheckpointState:
    """Saves seen, the newest one's iteration and age; none yet: the interval they are due at."""
    if not facts.checkpoints:
        return CheckpointState(0, None, None, facts.save_interval)
    last_ts, iteration = max(facts.checkpoints, key=lambda c: c[0] if math.isfinite(c[0]) else -math.inf)
    age = now - last_ts if math.isfinite(now) and math.isfinite(last_ts) else None
    return CheckpointState(len(facts.checkpoints), iteration, age)
