"""Red-flag alerts: rules are data (`configs/alerts.toml`), this module only knows the kinds of check.

A metric rule is evaluated on every new point of its series and fires once per episode: when its condition
becomes true, not again until it has been false (an alert that repeats every rollout is noise). Log rules
(the NemotronH shim failing to load, CUDA out of memory, an actor that died, NaN) look at sanitised log text,
found by a literal hint first; each names the line that said it (`Alert.sample`). Failures (an OOM, an actor
that died, an NCCL timeout, ...) are the failure catalog's (backend.signals.failures): each fires an alert,
and the diagnosis marks which one is the cause (`Alert.cause` 1) and which its consequences (2). The shim's
own `applied NemotronH provider fields {...}` line is checked against the expected scaling. Blind spots are
alerts too, so empty charts are never silent: metric-looking lines that do not parse, a running run with no
metric for longer than a first rollout takes, a chart's key that never arrives, a run that only prints
health checks (a hang). The run controller reports what only it can see: the Ray job failing
(`on_job_status`), a node dying (`on_node_dead`), train actors that never logged the shim
(`on_shim_missing`), and the passage of time (`check_stall`, `check_phases`, `check_quiet`).
"""

from __future__ import annotations

import dataclasses
import itertools
import math
import re
import statistics
import sys
import time
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from importlib import resources
from pathlib import Path
from types import MappingProxyType
from typing import TYPE_CHECKING, Any

from backend.errors import ConsoleError
from backend.json_fields import Fields
from backend.regular_files import read_config_text
from backend.sanitize import one_line
from backend.severity import Severity
from backend.signals.actors import TRAIN, role_of
from backend.signals.bounded_json import SHIM_LINE
from backend.signals.bounded_json import loads as bounded_loads
from backend.signals.failures import Diagnosis, FailureEvent, FailureScanner, Incident, diagnose, incidents
from backend.signals.failures.owner import line_label, traceback_owner
from backend.signals.failures.scanner import RANK_CENSUS, TIMER_NEEDLE
from backend.signals.grammar import METRIC_NEEDLES, REPEATED, ParsedLine, parse_line, parse_prefix_inner
from backend.signals.metrics import Point, lines_containing
from backend.signals.rank_phases import LaneKey, RankPhases, Round, lane_name, rounds_after
from backend.signals.series import PointRun, Series
from backend.signals.shim_reports import ShimLedger
from shim import logline as shim_logline

if TYPE_CHECKING:
    from backend.signals.prefilter import Scan

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover
    import tomli as tomllib

SEVERITIES = (Severity.CRITICAL, Severity.WARNING, Severity.INFO)  # the scale alerts use
METRIC_CHECKS = ("above", "below", "nonfinite", "climb", "spike", "collapse")
RANK_CHECKS = ("straggler", "no_progress")  # per-rank phases (backend.signals.rank_phases)
BLIND_CHECKS = (
    "unreadable_metrics",
    "cut_metrics",
    "no_metrics",
    "log_without_metrics",
    "key_missing",
    "hang",
    "series_cap",
)
OTHER_CHECKS = (
    "log",
    "shim_fields",
    "shim_missing",
    "stall",
    "phase_stall",
    "job_failed",
    "node_dead",
    "unreadable_bytes",
    "clock_skew",
    *BLIND_CHECKS,
    *RANK_CHECKS,
)
RAY_JOB_STATUSES = frozenset({"PENDING", "RUNNING", "STOPPED", "SUCCEEDED", "FAILED"})
MAX_ALERTS = 1000
SAMPLE_CHARS = 200
_LINE_PREFIX = re.compile(r"^\((?P<prefix>[^()\n]*)\) ")
_RESERVED = ("id", "severity", "when", "message", "metrics", "pattern", "hints")


class AlertRuleError(ConsoleError):
    """The alert definitions are malformed."""


@dataclass(frozen=True)
class AlertRule:
    id: str
    severity: Severity
    when: str
    message: str
    metrics: tuple[str, ...] = ()
    numbers: Mapping[str, float] = field(default_factory=dict)  # thresholds, windows, factors (the file's)
    words: Mapping[str, tuple[str, ...]] = field(default_factory=dict)  # `field`, `noise`, `once_by`
    pattern: re.Pattern[str] | None = None
    hints: tuple[str, ...] = ()  # literal text every line the pattern matches holds (found with str.find)

    def param(self, name: str, default: float) -> float:
        return self.numbers.get(name, default)

    def texts(self, name: str, default: tuple[str, ...] = ()) -> tuple[str, ...]:
        return self.words.get(name, default)


@dataclass
class Alert:
    """A fired rule. `step` is where the episode began; `last_step`/`count` follow it while it lasts."""

    id: str
    severity: Severity
    message: str
    step: float | None = None
    key: str | None = None
    ts: float = field(default_factory=time.time)
    last_step: float | None = None
    count: int = 1
    sample: str = ""  # the log line that said it (sanitised, cut), where a line did
    cause: int | None = None  # a failure's place in the diagnosis: 1 the cause, 2 a consequence
    blind: bool = False  # says a chart is blind (unreadable lines, no metric, a missing key, a hang)
    advice: str = ""  # what to try, for a failure (the catalog's line for its kind and role)
    action: str = ""  # what the console offers to do about it ("stacks": dump every rank's stack)

    def to_json(self) -> dict[str, Any]:
        step = self.step
        if isinstance(step, float) and step.is_integer():
            step = int(step)
        return {
            "id": self.id,
            "severity": self.severity.value,
            "message": self.message,
            "step": step,
            "key": self.key,
            "count": self.count,
            "sample": self.sample,
            **({"action": self.action} if self.action else {}),
        }


def default_rules_path() -> Path:
    return Path(str(resources.files("configs").joinpath("alerts.toml")))


def load_rules(path: str | Path | None = None) -> list[AlertRule]:
    """Parse and validate rule definitions; a bad file is one clear error."""
    path = Path(path) if path is not None else default_rules_path()
    try:
        data = tomllib.loads(read_config_text(path, "alert rules file"))  # size-capped before reading
    except (OSError, ValueError, ConsoleError) as err:  # TOMLDecodeError, UnicodeDecodeError are ValueErrors
        raise AlertRuleError(f"cannot read alert rules {path}: {err}") from None
    rules, seen = [], set()
    for i, raw in enumerate(Fields(data).objs("rule")):
        rid = raw.string("id")
        where = f"alert rule #{i + 1} ({rid or 'no id'}) in {path}"
        if not rid or rid in seen:
            raise AlertRuleError(f"{where}: needs a unique string id")
        seen.add(rid)
        rules.append(_rule(raw, rid, where))
    return rules


_NEEDS_METRICS = (*METRIC_CHECKS, "key_missing")  # the checks that read named series


def _rule(raw: Fields, rid: str, where: str) -> AlertRule:
    """One rule of the file, checked (`where` names it in the error)."""
    severity = Severity.parse(raw.value("severity"))
    if severity not in SEVERITIES:
        raise AlertRuleError(f"{where}: severity must be one of {', '.join(SEVERITIES)}")
    when = raw.text("when")
    if when not in METRIC_CHECKS + OTHER_CHECKS:
        raise AlertRuleError(f"{where}: unknown check {raw.value('when')!r}")
    message = raw.string("message")
    if message is None:
        raise AlertRuleError(f"{where}: needs a message")
    metrics = tuple(map(str, raw.items("metrics")))
    if when in _NEEDS_METRICS and not metrics:
        raise AlertRuleError(f"{where}: a {when} rule needs metrics")
    pattern, hints = _log_pattern(raw, where) if when == "log" else (None, ())
    numbers, words = _params(raw.raw, where)
    return AlertRule(rid, severity, when, message, metrics, numbers, words, pattern, hints)


def _log_pattern(raw: Fields, where: str) -> tuple[re.Pattern[str], tuple[str, ...]]:
    """A log rule's pattern and hints (the literal text every line it matches holds), both required."""
    try:
        pattern = re.compile(raw.string("pattern") or "")
    except re.error as err:
        raise AlertRuleError(f"{where}: bad pattern: {err}") from None
    if not pattern.pattern:
        raise AlertRuleError(f"{where}: a log rule needs a pattern")
    items = raw.items("hints")
    hints = tuple(h for h in items if isinstance(h, str) and h)
    if not hints or len(hints) < len(items):
        raise AlertRuleError(f"{where}: a log rule needs hints (literal text its lines hold)")
    return pattern, hints


def _params(raw: Mapping[str, object], where: str) -> tuple[dict[str, float], dict[str, tuple[str, ...]]]:
    """A rule's other keys: numbers, and words (a string or a list of them); anything else is refused."""
    numbers: dict[str, float] = {}
    words: dict[str, tuple[str, ...]] = {}
    for name, value in raw.items():
        if name in _RESERVED:
            continue
        if isinstance(value, int | float) and not isinstance(value, bool):
            numbers[name] = value
        elif isinstance(value, str):
            words[name] = (value,)
        elif isinstance(value, list) and all(isinstance(v, str) for v in value):
            words[name] = tuple(value)
        else:
            raise AlertRuleError(f"{where}: {name} must be a number, a string or a list of strings")
    return numbers, words


def _fmt(value: object) -> str:
    if value is None:
        return "?"
    if isinstance(value, float):
        if value.is_integer() and abs(value) < 1e15:
            return str(int(value))
        return f"{value:.4g}"
    return str(value)


class _Fields(dict):
    def __missing__(self, key: str) -> str:
        return "?"


class AlertEngine:
    """Evaluates rules; keeps what fired, in order; tells subscribers."""

    def __init__(self, rules: list[AlertRule] | None = None, *, expected_scaling: float = 5.0) -> None:
        self.rules = rules if rules is not None else load_rules()
        self.expected_scaling = expected_scaling
        self.alerts: list[Alert] = []
        self.shim = ShimLedger()  # train actors and the shim reports their processes made
        self.shim_lines_seen = 0  # how many actors logged the line, counting Ray's dedup
        self._by_metric: dict[str, list[AlertRule]] = {}
        for rule in self.rules:
            for key in rule.metrics:
                self._by_metric.setdefault(key, []).append(rule)
        self._log_rules = [r for r in self.rules if r.when == "log"]
        self._episodes: dict[tuple[str, str], Alert] = {}
        # a batch's metric verdicts, acted on at `settle`: (order, rule's place, rule, point, hit, fields)
        self._verdicts: list[tuple[tuple[int, int], int, AlertRule, Point, bool, Mapping[str, object]]] = []
        self._judged: set[tuple[str, str]] = set()  # (rule, key) episodes with verdicts this batch
        self._fired: set[tuple[object, ...]] = set()
        self._listeners: list[Callable[[Alert], None]] = []
        self._clear_listeners: list[Callable[[Alert], None]] = []
        self.job_status = ""  # the Ray job's status, as the controller last reported it
        self.version = 0  # bumped whenever an alert fires or a blind spot's count changes (UI refresh)
        self._ray_reason = ""
        self.failures = FailureScanner()
        # train ranks in the run, where known (names the NCCL
        # ranks that did not time out); the monitor's facts
        self.world_of: Callable[[], int | None] = lambda: None
        self._failure_alerts: dict[tuple[str, int], Alert] = {}
        self._straggles: dict[tuple[LaneKey, str], int] = {}  # (lane, phase) -> late rounds in a row
        self._rounds_seen = 0

    def subscribe(self, listener: Callable[[Alert], None]) -> None:
        self._listeners.append(listener)

    def subscribe_clears(self, listener: Callable[[Alert], None]) -> None:
        """`listener(alert)` when an alert's episode ends (its rule no longer holds): the watcher's clear."""
        self._clear_listeners.append(listener)

    def _close(self, episode: tuple[str, str]) -> None:
        ended = self._episodes.pop(episode, None)
        if ended is not None:
            for listener in self._clear_listeners:
                listener(ended)

    def snapshot(self) -> list[Alert]:
        """Copies of the alerts so far, for another thread (an episode's count keeps growing here)."""
        return [dataclasses.replace(a) for a in self.alerts]

    def _rule(self, when: str) -> AlertRule | None:
        return next((r for r in self.rules if r.when == when), None)

    def _fire(
        self,
        rule: AlertRule,
        fields: Mapping[str, object],
        *,
        step: float | None = None,
        key: str | None = None,
        once: tuple[object, ...] | None = None,
        sample: str = "",
    ) -> Alert | None:
        if once is not None:
            if once in self._fired:
                return None
            self._fired.add(once)
        text = rule.message.format_map(_Fields({k: _fmt(v) for k, v in fields.items()}))
        alert = Alert(
            rule.id,
            rule.severity,
            text,
            step,
            key,
            last_step=step,
            sample=_sample(sample),
            blind=rule.when in BLIND_CHECKS,
        )
        self._add(alert)
        return alert

    def _add(self, alert: Alert) -> None:
        if len(self.alerts) >= MAX_ALERTS:
            del self.alerts[: MAX_ALERTS // 10]
        self.alerts.append(alert)
        self.version += 1
        for listener in self._listeners:
            listener(alert)

    # ------------------------------------------------------------------ metric rules

    def watches(self, key: str) -> bool:
        """Whether any metric rule judges `key` (on_point does nothing for the others)."""
        return key in self._by_metric

    def on_point(self, point: Point, series: Series | None) -> list[Alert]:
        """Evaluate the rules of `point.key` on one new or changed point (a batch of one)."""
        self.judge_point(point, (0, 0), series)
        return self.settle()

    def judge_point(self, point: Point, order: tuple[int, int], series: Series | None) -> None:
        """The rules of `point.key` on a point that just changed `series` (the collector's `Judge`): judged
        now, acted on at `settle`."""
        newest = bool(series is not None and series.steps and series.steps[-1] == point.step)
        values = series.values if series is not None and newest else [point.value]
        for place, rule in enumerate(self._by_metric.get(point.key, ())):
            hit = judge_metric(rule, values, len(values) - 1, len(values), newest)[0]
            if self._active(rule, point.key, hit):
                fields = metric_fields(rule, values, len(values)) if hit else _NO_FIELDS
                self._verdicts.append((order, place, rule, point, hit, fields))

    def judge_run(
        self, run: PointRun, order: Callable[[int], tuple[int, int]], point: Callable[[int], Point]
    ) -> None:
        """The rules of a series on a batch's points appended to it in one go (at `run.start`): each point
        judged on the series as it stood when it came; nothing more to do (no point, no order built) for a
        rule that none of them fires and that has no episode open (the usual case)."""
        key, values, start = run.series.key, run.series.values, run.start
        for place, rule in enumerate(self._by_metric.get(key, ())):
            hits = judge_metric(rule, values, start, start + len(run.values), True)
            if self._active(rule, key, any(hits)):
                self._verdicts.extend(
                    (
                        order(i),
                        place,
                        rule,
                        point(i),
                        hit,
                        metric_fields(rule, values, start + i + 1) if hit else _NO_FIELDS,
                    )
                    for i, hit in enumerate(hits)
                )

    def _active(self, rule: AlertRule, key: str, hit: bool) -> bool:
        """Whether a rule's verdicts on a key matter this batch: one fires, or its episode is open (a miss
        ends it)."""
        episode = (rule.id, key)
        if hit or episode in self._episodes or episode in self._judged:
            self._judged.add(episode)
            return True
        return False

    def settle(self) -> list[Alert]:
        """Act on the batch's verdicts in the points' order (record by record's order): an episode begins
        (the alert fires), goes on (counted) or ends."""
        verdicts = sorted(self._verdicts, key=lambda v: (v[0], v[1]))
        self._verdicts, self._judged = [], set()
        fired = []
        for _, _, rule, point, hit, fields in verdicts:
            alert = self._act(rule, point, hit, fields)
            if alert is not None:
                fired.append(alert)
        return fired

    def _act(self, rule: AlertRule, point: Point, hit: bool, fields: Mapping[str, object]) -> Alert | None:
        episode = (rule.id, point.key)
        if not hit:
            self._close(episode)
            return None
        current = self._episodes.get(episode)
        if current is not None:
            current.count += 1
            current.last_step = point.step
            return None
        alert = self._fire(
            rule,
            {"key": point.key, "step": point.step, "value": point.value, **rule.numbers, **fields},
            step=point.step,
            key=point.key,
        )
        if alert is not None:
            self._episodes[episode] = alert
        return alert

    # ------------------------------------------------------------------ log rules

    def log_needles(self) -> tuple[str, ...]:
        """What the log rules' and the shim's lines hold: the monitor's scan finds them (`Scan.at`)."""
        hints = (hint for rule in self._log_rules for hint in rule.hints)
        # and what the failure scanner asks the scan about (`Scan.has`): Timer and metric lines
        return (*hints, shim_logline.LINE_PREFIX, TIMER_NEEDLE, *METRIC_NEEDLES)

    def flat_needles(self) -> tuple[str, ...]:
        """What the failure scanner looks for across line breaks (the catalog's hints, the rank census)."""
        return (*self.failures.catalog.hints(), RANK_CENSUS)

    def on_log_text(self, text: str, scan: Scan | None = None) -> list[Alert]:
        """Scan sanitised complete lines for the log rules' patterns (only the lines their hints find).
        `scan`: the monitor's prefilter already searched the
        chunk for every hint (backend.signals.prefilter)."""
        fired = self._log_rule_alerts(text, scan)
        if scan is None or scan.has(shim_logline.LINE_PREFIX):
            for line in lines_containing(text, shim_logline.LINE_PREFIX):
                fired.extend(self._shim_line(line))
        fired.extend(self._feed_failures(text, scan))
        return fired

    def _log_rule_alerts(self, text: str, scan: Scan | None) -> list[Alert]:
        """What the log rules fire on the lines their hints find."""
        fired = []
        for rule in self._log_rules:
            assert rule.pattern is not None
            for hint in rule.hints:
                if not (scan.has(hint) if scan is not None else hint in text):
                    continue
                for start, line in _lines_at(text, hint, scan):
                    alert = self._log_line(rule, line, text, start)
                    if alert is not None:
                        fired.append(alert)
        return fired

    def _feed_failures(self, text: str, scan: Scan | None) -> list[Alert]:
        """The failure scanner's new or changed failures as alerts; progress alone restates the causes."""
        progressed = len(self.failures.progress)
        changed = self.failures.feed(text, scan)
        if changed:
            return self._on_failures(changed)
        if len(self.failures.progress) != progressed and self._failure_alerts:
            self._restate_causes()  # the run went on after an error: it may be an incident now, not the cause
            self.version += 1
        return []

    # ------------------------------------------------------------------ failures (the catalog's)

    def _on_failures(self, changed: list[FailureEvent]) -> list[Alert]:
        """An alert per failure (its count and words kept current), then which one is the cause."""
        fired = []
        for event in changed:
            alert = self._failure_alerts.get((event.kind, event.seq))
            if alert is None:
                kind = self.failures.catalog.kind(event.kind)
                alert = Alert(
                    event.kind,
                    Severity.WARNING if kind.cascade == "report" else Severity.CRITICAL,
                    "",
                    key=event.who,
                    sample=" ".join(event.line.split()),  # the failure's line as kept (LINE_CHARS), not cut
                )
                self._failure_alerts[(event.kind, event.seq)] = alert
                fired.append(alert)
            alert.count = event.count
        self._restate_causes()
        for alert in fired:
            self._add(alert)
        self.version += 1
        if self.job_status == "FAILED":
            self._restate_failure()
        return fired

    def incidents(self) -> tuple[Incident, ...]:
        """The failures the run outlived (progress came after them): alerts, never the cause."""
        return incidents(self.failures.events, self.failures.catalog, progress=self.failures.progress)

    def _restate_causes(self) -> None:
        """Words and places in the diagnosis for every failure alert (a later line can change the cause)."""
        for incident in self.incidents():
            alert = self._failure_alerts.get(incident.finding.key)
            if alert is not None:
                alert.severity, alert.cause, alert.advice = Severity.WARNING, None, ""
                alert.message = (
                    f"incident (the run went on: {incident.progress} and {incident.progress_after - 1} "
                    f"more progress line(s) after it): {incident.finding.message}"
                )
        found = self.diagnosis()
        if found is None:
            return
        for rank, finding in ((1, found.cause), *((2, f) for f in found.consequences)):
            alert = self._failure_alerts.get(finding.key)
            if alert is not None:
                alert.message, alert.cause = finding.message, rank
                alert.advice = finding.try_ if rank == 1 else ""

    def diagnosis(self) -> Diagnosis | None:
        """Why the run failed (or is failing): the cause and its consequences, from every failure seen."""
        return diagnose(
            self.failures.events,
            self.failures.catalog,
            world=self.world_of(),
            ranks_seen=sorted(self.failures.ranks_seen),
            ranks_alive=self.failures.ranks_alive,
            progress=self.failures.progress,
            succeeded=self._succeeded(),
        )

    def _succeeded(self) -> bool:
        """Whether the run succeeded: Ray's job status when the controller reported one (it outranks any
        `Job '...' succeeded` banner a log prints: the driver can print anything); the log's banner only
        for a saved log, where nothing else says."""
        if self.job_status in RAY_JOB_STATUSES:
            return self.job_status == "SUCCEEDED"
        return self.failures.succeeded

    def _log_line(self, rule: AlertRule, line: str, text: str, start: int) -> Alert | None:
        assert rule.pattern is not None
        m = rule.pattern.search(line)
        if m is None:
            return None
        parsed = parse_line(line)
        groups = _match_groups(m)
        owner = parsed if parsed.actor is not None else _owner_in(text, start)
        actor = groups.pop("actor", None) or line_label(owner)
        fields: dict[str, str] = {k: v.strip()[:200] for k, v in groups.items()}
        fields.setdefault("reason", "no reason given")
        fields["actor"] = actor
        once_by = tuple(fields.get(name, "") for name in rule.texts("once_by", ("actor",)))
        return self._fire(rule, fields, key=actor, once=(rule.id, *once_by), sample=parsed.message)

    def on_log_lines(self, first: int, count: int, text: str) -> None:
        """`LogStore.subscribe` signature."""
        self.on_log_text(text)

    @property
    def shim_reports(self) -> dict[str, dict[str, object]]:
        """Train actor -> the fields it logged: only reports
        its own process made (backend.signals.shim_reports)."""
        return self.shim.trusted()

    def _shim_line(self, line: str) -> list[Alert]:
        """One of the shim's own lines (all three forms, parsed by shim.logline, the one source of them,
        within bounded_json's limits: an oversized or deeply
        nested line is an unreadable one, never a crash)."""
        repeat = REPEATED.search(line)
        if repeat is not None:
            line = line[: repeat.start()]
        parsed = shim_logline.parse(line, _load_shim_fields)
        who = _train_actor(line) if parsed is not None else None
        if parsed is None or who is None:
            return []
        actor, pid, ip = who
        # Ray folds identical lines of other actors into one "[repeated Nx across cluster]" line.
        repeats = int(repeat.group(1)) if repeat else 1
        self.shim_lines_seen += repeats
        self.shim.report((pid, ip), parsed, repeats)
        if parsed.status == "not_applied":
            alert = self._shim_not_loaded(parsed.reason, actor, line)
        else:
            alert = self._shim_fields(parsed.fields, actor)
        return [alert] if alert else []

    def _shim_not_loaded(self, reason: str, actor: str, line: str) -> Alert | None:
        rule = next((r for r in self._log_rules if r.id == "shim-not-loaded"), None)
        if rule is None:
            return None
        fields = {"reason": reason[:200] or "no reason given", "actor": actor}
        return self._fire(rule, fields, key=actor, once=(rule.id, actor), sample=line)

    def _shim_fields(self, fields: Mapping[str, object], actor: str) -> Alert | None:
        """The provider field the shim applied (the rule's `field`) against the expected scaling."""
        rule = self._rule("shim_fields")
        if rule is None:
            return None
        name = rule.texts("field", ("moe_router_topk_scaling_factor",))[0]
        value = fields.get(name)
        ok = (
            isinstance(value, int | float)
            and not isinstance(value, bool)
            and math.isclose(float(value), self.expected_scaling, rel_tol=1e-6)
        )
        if ok:
            return None
        return self._fire(
            rule,
            {"actor": actor, "value": value, "expected": self.expected_scaling},
            key=actor,
            once=(rule.id, actor),
        )

    # ------------------------------------------------------------------ what the run controller reports

    def on_shim_missing(self, actors: Iterable[str]) -> Alert | None:
        """Train actors that never logged the shim line (`self.shim.missing()` once they trained, or the
        controller's own list)."""
        names = sorted(set(actors))
        rule = self._rule("shim_missing")
        if not names or rule is None:
            return None
        shown = ", ".join(names[:8]) + (f" and {len(names) - 8} more" if len(names) > 8 else "")
        checked = (
            "train actors as Ray's actor list names them"
            if self.shim.verified
            else "unverified: judged by the log's prefixes, Ray's actor list was not read"
        )
        return self._fire(rule, {"actor": shown, "checked": checked}, once=(rule.id, tuple(names)))

    def on_run_over(self) -> list[Alert]:
        """The run is over and its log is in: a phase the log ends in standing still, with no error after it,
        is a cause (never for a run that succeeded)."""
        changed = [] if self._succeeded() else self.failures.stall_at_end()
        return self._on_failures(changed) if changed else []

    def on_job_status(self, status: str, message: str | None = None) -> Alert | None:
        """Ray job status change; FAILED raises the alert with its cause: what the log said (OOM, an actor
        died, NaN), else Ray's own reason."""
        self.job_status = str(status).upper()
        if self.job_status in ("FAILED", "STOPPED") and self.failures.lines_read:
            self.on_run_over()  # a live run's log is in by now (a log read after the status: input_ended)
        rule = self._rule("job_failed")
        if rule is None or self.job_status != "FAILED":
            return None
        # Ray's message quotes the log's tail, escape sequences and all
        self._ray_reason = one_line(message or "Ray gave no reason")[:300]
        return self._fire(rule, self._failed_fields(), once=(rule.id, status), sample=self._failed_sample())

    def _failed_fields(self) -> dict[str, str]:
        cause = self.failure_cause()
        reason = f"{cause.message} (Ray: {self._ray_reason})" if cause is not None else self._ray_reason
        return {"status": "failed", "reason": reason}

    def _failed_sample(self) -> str:
        cause = self.failure_cause()
        return cause.sample if cause is not None else ""

    def _restate_failure(self) -> None:
        """The job's FAILED state can arrive before the log lines that say why: restate it when they do."""
        rule = self._rule("job_failed")
        failed = next((a for a in reversed(self.alerts) if rule is not None and a.id == rule.id), None)
        if rule is None or failed is None:
            return
        failed.message = rule.message.format_map(
            _Fields({k: _fmt(v) for k, v in self._failed_fields().items()})
        )
        failed.sample = self._failed_sample()
        self.version += 1

    def failure_cause(self) -> Alert | None:
        return failure_cause(self.alerts)

    def headline(self) -> str:
        return headline(self.alerts, self.job_status)

    def blind_spots(self) -> list[Alert]:
        return [a for a in self.alerts if a.blind]

    def noise_needles(self) -> tuple[str, ...]:
        """What health-check noise looks like (the hang rule's `noise`, as data)."""
        rule = self._rule("hang")
        return rule.texts("noise") if rule is not None else ()

    # ------------------------------------------------------------------ blind spots

    def _update(
        self, rule: AlertRule, episode: str, fields: Mapping[str, object], count: int, sample: str
    ) -> Alert | None:
        """Fire a blind-spot alert once per episode; while it lasts, keep its count and message current."""
        current = self._episodes.get((rule.id, episode))
        if current is not None:
            if current.count != count:
                self.version += 1
            current.count = count
            current.message = rule.message.format_map(_Fields({k: _fmt(v) for k, v in fields.items()}))
            return None
        alert = self._fire(rule, fields, key=episode, sample=sample)
        if alert is not None:
            alert.count = count
            self._episodes[(rule.id, episode)] = alert
        return alert

    def _end(self, rule_id: str, episode: str) -> None:
        self._close((rule_id, episode))

    def check_unreadable(self, count: int, sample: str) -> Alert | None:
        """Metric-looking lines that did not parse: charts would stay empty without a word."""
        rule = self._rule("unreadable_metrics")
        if rule is None or count < int(rule.param("min_count", 1)):
            return None
        return self._update(rule, "unreadable", {"count": count}, count, sample)

    def check_cut_metrics(self, count: int, sample: str) -> Alert | None:
        """Metric dicts cut mid-way (a paste's width): their complete pairs were read, the rest is missing."""
        rule = self._rule("cut_metrics")
        if rule is None or count <= 0:
            return None
        return self._update(rule, "cut", {"count": count}, count, sample)

    def skew_limit_s(self) -> float:
        """How far ahead of the log's clock a stamp may run before it is skew, not time (the rule's min_s)."""
        rule = self._rule("clock_skew")
        return rule.param("min_s", 120.0) if rule is not None else 120.0

    def check_clock_skew(self, ahead_s: float, sample: str) -> Alert | None:
        """A stamp far ahead of the log's clock (a node's clock, or a message's own timestamp): said, with
        how far, and never taken for "now" (the stall is measured on the console's clock)."""
        rule = self._rule("clock_skew")
        if rule is None or ahead_s < rule.param("min_s", 120.0):
            return None
        return self._update(rule, "ahead", {"minutes": round(ahead_s / 60, 1)}, round(ahead_s), sample)

    def check_unreadable_bytes(self, count: int, said: str) -> Alert | None:
        """Bytes of the log that are no text (NUL, invalid UTF-8, stray controls) or lines over the cap:
        dropped or cut and counted, never a reason to refuse the log."""
        rule = self._rule("unreadable_bytes")
        if rule is None or count <= 0:
            return None
        return self._update(rule, "bytes", {"reason": said, "count": count}, count, "")

    def check_series_cap(self, dropped: int, limit: int, sample: list[str]) -> Alert | None:
        """Metric keys dropped because the run has more series than the cap: their charts stay empty."""
        rule = self._rule("series_cap")
        if rule is None or dropped <= 0:
            return None
        shown = ", ".join(sample[:3]) + (" …" if dropped > 3 else "")
        return self._update(
            rule, "series-cap", {"count": dropped, "threshold": limit, "key": shown}, dropped, shown
        )

    def check_missing_keys(
        self,
        records_by_prefix: dict[str, int],
        present: Callable[[str], bool],
        keys_seen: Callable[[str], list[str]],
    ) -> list[Alert]:
        """A chart's key that never arrived although `after` dicts with its prefix did (no `train/ppo_kl`)."""
        fired = []
        for rule in self.rules:
            if rule.when != "key_missing":
                continue
            after = int(rule.param("after", 3))
            for key in rule.metrics:
                prefix = key.split("/", 1)[0] + "/"
                seen = records_by_prefix.get(prefix, 0)
                if present(key):
                    self._end(rule.id, key)
                    continue
                if seen < after:
                    continue
                others = keys_seen(prefix)
                shown = ", ".join(others[:6]) + (f" and {len(others) - 6} more" if len(others) > 6 else "")
                alert = self._update(
                    rule, key, {"key": key, "count": seen, "reason": shown or "none"}, seen, ""
                )
                if alert is not None:
                    fired.append(alert)
        return fired

    def check_no_metrics(
        self, running: bool, logged_s: float, lines: int, records: int, sample: str
    ) -> Alert | None:
        """A running run that has logged longer than a first rollout takes, with no metric at all."""
        rule = self._rule("no_metrics")
        if rule is None or not running or records > 0 or not math.isfinite(logged_s):
            if rule is not None and records > 0:
                self._end(rule.id, "no-metrics")
            return None
        if logged_s <= rule.param("min_s", 1800.0):
            return None
        return self._update(
            rule, "no-metrics", {"minutes": round(logged_s / 60), "count": lines}, lines, sample
        )

    def check_log_without_metrics(self, source: str, lines: int, records: int, sample: str) -> Alert | None:
        """A whole log (or dump) read to its end with no metric: the charts are empty, and this says so."""
        rule = self._rule("log_without_metrics")
        if rule is None or records > 0:
            return None
        return self._update(rule, "log-without-metrics", {"reason": source, "count": lines}, lines, sample)

    def check_quiet(self, running: bool, quiet_s: float, noise_lines: int, sample: str) -> Alert | None:
        """A hang: while running, only health/metrics noise for `min_s` seconds."""
        rule = self._rule("hang")
        if rule is None:
            return None
        if (
            not running
            or noise_lines == 0
            or not math.isfinite(quiet_s)
            or quiet_s <= rule.param("min_s", 600.0)
        ):
            if noise_lines == 0:
                self._end(rule.id, "hang")
            return None
        return self._update(
            rule, "hang", {"minutes": round(quiet_s / 60), "count": noise_lines}, noise_lines, sample
        )

    def on_node_dead(self, node_id: str, reason: str | None = None) -> Alert | None:
        rule = self._rule("node_dead")
        if rule is None:
            return None
        return self._fire(
            rule,
            {"node": node_id, "reason": (reason or "no reason given")[:500]},
            key=node_id,
            once=(rule.id, node_id),
        )

    def check_stall(self, now: float, last_metric_ts: float, median_step_s: float | None) -> Alert | None:
        """No new metric for max(factor x median rollout time, min_s) seconds (all on miles' clock)."""
        rule = self._rule("stall")
        if rule is None or not (math.isfinite(now) and math.isfinite(last_metric_ts)):
            return None
        floor = rule.param("min_s", 1800.0)
        limit = max(rule.param("factor", 6.0) * (median_step_s or 0.0), floor)
        idle = now - last_metric_ts
        if idle <= limit:
            return None
        return self._fire(
            rule,
            {
                "minutes": round(idle / 60),
                "factor": rule.param("factor", 6.0),
                "threshold": round(limit / 60),
            },
            once=(rule.id, last_metric_ts),
        )

    def check_phases(
        self,
        open_phases: dict[tuple[str, int, str, str], float],
        median_of: Callable[[str], float | None],
        now: float,
    ) -> list[Alert]:
        """Dashboard phases open longer than max(factor x their median, min_s)."""
        rule, fired = self._rule("phase_stall"), list[Alert]()
        if rule is None or not math.isfinite(now):
            return fired
        for (node, rank, _role, name), t0 in open_phases.items():
            limit = max(rule.param("factor", 6.0) * (median_of(name) or 0.0), rule.param("min_s", 1800.0))
            if now - t0 <= limit:
                continue
            note = ": the trainer is starved of rollout data" if name == "train_wait" else ""
            alert = self._fire(
                rule,
                {
                    "key": name,
                    "node": f"{node} rank {rank}" if rank >= 0 else node,
                    "minutes": round((now - t0) / 60),
                    "factor": rule.param("factor", 6.0),
                    "threshold": round(limit / 60),
                    "reason": note,
                },
                key=name,
                once=(rule.id, node, rank, name, t0),
            )
            if alert:
                fired.append(alert)
        return fired

    # ------------------------------------------------------------------ per-rank phases

    def check_stragglers(self, phases: RankPhases) -> list[Alert]:
        """A rank whose phase ends later than its peers' median end by more than max(factor x the phase's
        median length, min_s), `times` rounds in a row, is named (once per episode)."""
        rule, fired = self._rule("straggler"), list[Alert]()
        if rule is None:
            return fired
        for rnd in rounds_after(phases, self._rounds_seen):
            self._rounds_seen = rnd.seq
            if len(rnd.ends) >= int(rule.param("min_peers", 3)):
                fired.extend(self._straggles_in(rule, rnd))
        return fired

    def _straggles_in(self, rule: AlertRule, rnd: Round) -> list[Alert]:
        """One round's late ranks: a streak of `times` late rounds fires, an on-time round ends it."""
        fired = []
        median_end = statistics.median(t1 for _, _, t1 in rnd.ends)
        length = statistics.median(t1 - t0 for _, t0, t1 in rnd.ends)
        limit = max(rule.param("factor", 0.5) * length, rule.param("min_s", 2.0))
        times = int(rule.param("times", 3))
        for lane, _t0, t1 in rnd.ends:
            episode = (lane, rnd.name)
            if t1 - median_end <= limit:
                if self._straggles.pop(episode, 0) >= times:
                    self._end(rule.id, f"{lane_name(lane)}:{rnd.name}")
                continue
            streak = self._straggles[episode] = self._straggles.get(episode, 0) + 1
            if streak < times:
                continue
            alert = self._update(
                rule,
                f"{lane_name(lane)}:{rnd.name}",
                {
                    "node": lane_name(lane),
                    "key": rnd.name,
                    "value": round(t1 - median_end, 1),
                    "count": streak,
                    "threshold": round(limit, 1),
                },
                streak,
                "",
            )
            if alert is not None:
                fired.append(alert)
        return fired

    def check_no_progress(
        self,
        running: bool,
        phases: RankPhases,
        phase_now: float,
        metric_idle_s: float,
        median_step_s: float | None,
    ) -> Alert | None:
        """No metric and no phase change for more than max(factor x the median step time, min_s): a hang;
        names the ranks longest in one phase and offers `stacks`."""
        rule = self._rule("no_progress")
        idle = _idle_s(phases, phase_now, metric_idle_s)
        if rule is None or idle is None:
            return None
        limit = max(rule.param("factor", 5.0) * (median_step_s or 0.0), rule.param("min_s", 300.0))
        if not running or idle <= limit:
            self._end(rule.id, "no-progress")
            return None
        longest = phases.longest_in_phase(phase_now)
        names = ", ".join(f"{lane_name(k)} in {name} for {round(s / 60, 1)} min" for k, name, s in longest)
        alert = self._update(
            rule,
            "no-progress",
            {
                "minutes": round(idle / 60, 1),
                "factor": rule.param("factor", 5.0),
                "threshold": round(limit / 60, 1),
                "reason": names or "no rank in an open phase",
            },
            1,
            "",
        )
        if alert is not None:
            alert.action = "stacks"
        return alert


def _idle_s(phases: RankPhases, phase_now: float, metric_idle_s: float) -> float | None:
    """Seconds with no phase change and no metric; None when the phases cannot say (none, no clock)."""
    if not phases.lanes or not math.isfinite(phases.last_change) or not math.isfinite(phase_now):
        return None
    return min(phase_now - phases.last_change, metric_idle_s if math.isfinite(metric_idle_s) else math.inf)


_NO_FIELDS: Mapping[str, object] = MappingProxyType({})
# A metric rule kind: (rule, a series' values, first, last) -> whether the rule fires on each point
# values[first:last], each judged on the series as it stood when it came (`values[:i + 1]`: the point its
# last value), whether it was added alone or in a batch's run.
MetricCheck = Callable[[AlertRule, Sequence[float], int, int], list[bool]]


def _tail(values: Sequence[float], end: int, start: int, stop: int | None = None) -> Sequence[float]:
    """`values[:end][start:stop]` without the copy of `values[:end]`."""
    first, last, _ = slice(start, stop).indices(end)
    return values[first:last]


def _nonfinite(rule: AlertRule, values: Sequence[float], first: int, last: int) -> list[bool]:
    return [not math.isfinite(v) for v in values[first:last]]


def _above(rule: AlertRule, values: Sequence[float], first: int, last: int) -> list[bool]:
    threshold = rule.param("threshold", math.inf)
    return [v >= threshold and math.isfinite(v) for v in values[first:last]]


def _below(rule: AlertRule, values: Sequence[float], first: int, last: int) -> list[bool]:
    threshold = rule.param("threshold", -math.inf)
    return [v <= threshold and math.isfinite(v) for v in values[first:last]]


def _climbs(tail: Sequence[float], size: int) -> bool:
    return (
        len(tail) == size
        and all(math.isfinite(x) for x in tail)
        and all(a < b for a, b in itertools.pairwise(tail))
    )


def _climb(rule: AlertRule, values: Sequence[float], first: int, last: int) -> list[bool]:
    window, floor = int(rule.param("window", 5)), rule.param("floor", 0.0)
    return [
        math.isfinite(values[i])
        and values[i] >= floor
        and _climbs(_tail(values, i + 1, -(window + 1)), window + 1)
        for i in range(first, last)
    ]


def _collapsed(tail: Sequence[float], window: int, tolerance: float) -> bool:
    finite = [x for x in tail if math.isfinite(x)]
    return len(finite) == window and max(finite) - min(finite) <= tolerance


def _collapse(rule: AlertRule, values: Sequence[float], first: int, last: int) -> list[bool]:
    window, tolerance = int(rule.param("window", 5)), rule.param("tolerance", 0.0)
    return [
        math.isfinite(values[i]) and _collapsed(_tail(values, i + 1, -window), window, tolerance)
        for i in range(first, last)
    ]


def _spike_baseline(rule: AlertRule, values: Sequence[float], end: int) -> float | None:
    """The median size of the `window` values before the newest (None with too few of them)."""
    return _median_size(values, end, int(rule.param("window", 5)), int(rule.param("min_history", 3)))


def _median_size(values: Sequence[float], end: int, window: int, least: int) -> float | None:
    """The median size of the finite ones of the `window` values before values[end - 1], None with fewer
    than `least` of them."""
    history = [abs(x) for x in _tail(values, end, -window - 1, -1) if math.isfinite(x)]
    return statistics.median(history) if len(history) >= least else None


def _spike(rule: AlertRule, values: Sequence[float], first: int, last: int) -> list[bool]:
    """A point far above the median size of the ones before it. The rule's numbers are read once, and the
    baseline only for a point that is finite and at the floor (most are not: the usual case is cheap)."""
    floor, factor = rule.param("floor", 0.0), rule.param("factor", 5.0)
    window, least = int(rule.param("window", 5)), int(rule.param("min_history", 3))
    out = []
    for i in range(first, last):
        size = abs(values[i])
        if not (math.isfinite(size) and size >= floor):
            out.append(False)
            continue
        base = _median_size(values, i + 1, window, least)
        out.append(base is not None and size > factor * base)
    return out


# The metric rule kinds: a new kind is a function here (and its name in METRIC_CHECKS). The value kinds judge
# any point; the history kinds only a series' newest point.
VALUE_KINDS: dict[str, MetricCheck] = {"nonfinite": _nonfinite, "above": _above, "below": _below}
HISTORY_KINDS: dict[str, MetricCheck] = {"climb": _climb, "collapse": _collapse, "spike": _spike}


def judge_metric(rule: AlertRule, values: Sequence[float], first: int, last: int, newest: bool) -> list[bool]:
    """Whether `rule` fires on each point values[first:last] (`newest`: they are each the series' newest
    when they came; history rules judge only such points)."""
    check = VALUE_KINDS.get(rule.when)
    if check is not None:
        return check(rule, values, first, last)
    check = HISTORY_KINDS.get(rule.when)
    if check is None or not newest:
        return [False] * (last - first)
    return check(rule, values, first, last)


def metric_fields(rule: AlertRule, values: Sequence[float], end: int) -> Mapping[str, object]:
    """What a firing metric alert says besides the rule's numbers (a spike's baseline), as of
    `values[:end]`."""
    if rule.when != "spike":
        return _NO_FIELDS
    return {"baseline": _spike_baseline(rule, values, end)}


def failure_cause(alerts: Sequence[Alert]) -> Alert | None:
    """The alert the diagnosis names as why the run failed (or is failing); None if the log said nothing."""
    return next((a for a in alerts if a.cause == 1), None)


def cause_first(alerts: Sequence[Alert]) -> list[Alert]:
    """The alerts as Events lists them: a failure's cause, then its consequences, where the first of them
    fired (a consequence's line can reach the log before its cause's: listed first, it read as the cause);
    every other alert keeps its place."""
    group = sorted((a for a in alerts if a.cause is not None), key=lambda a: a.cause or 0)
    if not group:
        return list(alerts)
    out: list[Alert] = []
    for alert in alerts:
        if alert.cause is None:
            out.append(alert)
        elif group:
            out.extend(group)
            group = []
    return out


def headline(alerts: Sequence[Alert], job_state: str) -> str:
    """The one phrase a run's header adds: the failure's cause (the moment its line arrives, not only once
    Ray says FAILED), else the newest blind spot, else ""."""
    if job_state.upper() == "FAILED":
        return _failed_headline(alerts)
    cause = failure_cause(alerts)
    if cause is not None:  # a live run says it is failing; a finished or replayed one what killed it
        live = job_state.upper() in ("PENDING", "RUNNING")
        return f"{'FAILING' if live else 'failure'}: {cause.message}"
    newest = next((a for a in reversed(alerts) if a.blind), None)
    return newest.message if newest is not None else ""


def _match_groups(m: re.Match[str]) -> dict[str, str]:
    """A log rule match's named groups that matched; a second spelling (`NAME_alt`) fills NAME's field."""
    groups = {k: v for k, v in m.groupdict().items() if v is not None}
    for name in [k for k in groups if k.endswith("_alt")]:
        groups.setdefault(name[: -len("_alt")], groups.pop(name))
    return groups


def _train_actor(line: str) -> tuple[str, int, str] | None:
    """(Ray's prefix, pid, ip or "") of a train actor's line; None for the driver's own line (no prefix)
    or another role's: the shim's hook runs in every Ray worker, only train actors say what a model got."""
    prefix = _LINE_PREFIX.match(line)
    if prefix is None:
        return None
    actor = prefix["prefix"]
    named, pid, ip = parse_prefix_inner(actor)  # a worker setup hook's `(pid=N)` names no class
    role = role_of(named) if named is not None else None
    if pid is None or (role is not None and role != TRAIN):
        return None
    return actor, pid, ip or ""


def _failed_headline(alerts: Sequence[Alert]) -> str:
    """A FAILED run's phrase: the cause, else Ray's job-failed alert, else nothing."""
    failed = failure_cause(alerts) or next((a for a in reversed(alerts) if a.id == "job-failed"), None)
    return f"FAILED: {failed.message}" if failed is not None else ""


def _load_shim_fields(text: str) -> Any:
    return bounded_loads(text, SHIM_LINE)


def _sample(line: str) -> str:
    line = " ".join(line.split())
    return line if len(line) <= SAMPLE_CHARS else line[:SAMPLE_CHARS] + "…"


def _lines_at(text: str, needle: str, scan: Scan | None) -> Iterator[tuple[int, str]]:
    """(start offset, line) of each line of `text` holding `needle`, once each (where the monitor's scan
    found it, else by str.find)."""
    found = iter(scan.at.get(needle, ())) if scan is not None else None
    pos = text.find(needle) if found is None else next(found, -1)
    while pos >= 0:
        start = text.rfind("\n", 0, pos) + 1
        end = text.find("\n", pos)
        end = len(text) if end < 0 else end
        yield start, text[start:end]
        pos = text.find(needle, end) if found is None else next((p for p in found if p >= end), -1)


def _owner_in(text: str, start: int) -> ParsedLine | None:
    """The process a prefix-less line at `start` of `text` belongs to (its traceback's first line)."""
    head = text[max(0, start - 64 * 1024) : start]
    lines = head.split("\n")
    if lines and lines[-1] == "":
        lines.pop()
    return traceback_owner([*lines, ""], len(lines))
