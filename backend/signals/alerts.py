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
from typing import TYPE_CHECKING, Any

from backend.errors import ConsoleError
from backend.json_fields import Fields
from backend.sanitize import one_line
from backend.severity import Severity
from backend.signals.actors import TRAIN, role_of
from backend.signals.bounded_json import SHIM_LINE
from backend.signals.bounded_json import loads as bounded_loads
from backend.signals.failures import Diagnosis, FailureEvent, FailureScanner, diagnose
from backend.signals.failures.owner import line_label, traceback_owner
from backend.signals.grammar import REPEATED, ParsedLine, parse_line, parse_prefix_inner
from backend.signals.metrics import Point, lines_containing
from backend.signals.rank_phases import LaneKey, RankPhases, lane_name, rounds_after
from backend.signals.series import Series
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
    *BLIND_CHECKS,
    *RANK_CHECKS,
)
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
        data = tomllib.loads(path.read_text(encoding="utf-8"))
    except (OSError, tomllib.TOMLDecodeError) as err:
        raise AlertRuleError(f"cannot read alert rules {path}: {err}") from None
    rules, seen = [], set()
    for i, raw in enumerate(Fields(data).objs("rule")):
        rid = raw.string("id")
        where = f"alert rule #{i + 1} ({rid or 'no id'}) in {path}"
        if not rid or rid in seen:
            raise AlertRuleError(f"{where}: needs a unique string id")
        seen.add(rid)
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
        if when in METRIC_CHECKS and not metrics:
            raise AlertRuleError(f"{where}: a {when} rule needs metrics")
        if when == "key_missing" and not metrics:
            raise AlertRuleError(f"{where}: a key_missing rule needs metrics")
        pattern = None
        hints: tuple[str, ...] = ()
        if when == "log":
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
        numbers, words = _params(raw.raw, where)
        rules.append(AlertRule(rid, severity, when, message, metrics, numbers, words, pattern, hints))
    return rules


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
        self._fired: set[tuple[object, ...]] = set()
        self._listeners: list[Callable[[Alert], None]] = []
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
        """Evaluate the rules of `point.key`; call for every new or changed point."""
        fired = []
        for rule in self._by_metric.get(point.key, ()):
            hit, fields = self._check(rule, point, series)
            episode = (rule.id, point.key)
            current = self._episodes.get(episode)
            if not hit:
                self._episodes.pop(episode, None)
                continue
            if current is not None:
                current.count += 1
                current.last_step = point.step
                continue
            alert = self._fire(
                rule,
                {"key": point.key, "step": point.step, "value": point.value, **rule.numbers, **fields},
                step=point.step,
                key=point.key,
            )
            if alert is not None:
                self._episodes[episode] = alert
                fired.append(alert)
        return fired

    def _check(self, rule: AlertRule, point: Point, series: Series | None) -> tuple[bool, dict[str, object]]:
        """Whether `rule` fires on `point`, and what the alert says besides the rule's numbers (a spike's
        baseline); the fields are built only when it fires (this runs for every watched point)."""
        v = point.value
        fields: dict[str, object] = {}
        if rule.when == "nonfinite":
            return not math.isfinite(v), fields
        if not math.isfinite(v):
            return False, fields
        if rule.when == "above":
            return v >= rule.param("threshold", math.inf), fields
        if rule.when == "below":
            return v <= rule.param("threshold", -math.inf), fields
        if series is None or not series.steps or series.steps[-1] != point.step:
            return False, fields  # history rules judge only the newest point
        window = int(rule.param("window", 5))
        if rule.when == "climb":
            tail = series.tail(window + 1)
            rising = (
                len(tail) == window + 1
                and all(math.isfinite(x) for x in tail)
                and all(a < b for a, b in itertools.pairwise(tail))
            )
            return rising and v >= rule.param("floor", 0.0), fields
        if rule.when == "collapse":
            tail = series.tail(window)
            finite = [x for x in tail if math.isfinite(x)]
            return len(finite) == window and max(finite) - min(finite) <= rule.param("tolerance", 0.0), fields
        if rule.when == "spike":
            history = [abs(x) for x in series.values[-window - 1 : -1] if math.isfinite(x)]
            if len(history) < int(rule.param("min_history", 3)):
                return False, fields
            base = statistics.median(history)
            fields["baseline"] = base
            return abs(v) >= rule.param("floor", 0.0) and abs(v) > rule.param("factor", 5.0) * base, fields
        return False, fields

    # ------------------------------------------------------------------ log rules

    def on_log_text(self, text: str, scan: Scan | None = None) -> list[Alert]:
        """Scan sanitised complete lines for the log rules' patterns (only the lines their hints find).
        `scan`: the monitor's prefilter already searched the
        chunk for every hint (backend.signals.prefilter)."""
        fired = []
        for rule in self._log_rules:
            assert rule.pattern is not None
            for hint in rule.hints:
                if not (scan.has(hint) if scan is not None else hint in text):
                    continue
                for start, line in _lines_at(text, hint):
                    alert = self._log_line(rule, line, text, start)
                    if alert is not None:
                        fired.append(alert)
        if scan is None or scan.has(shim_logline.LINE_PREFIX):
            for line in lines_containing(text, shim_logline.LINE_PREFIX):
                fired.extend(self._shim_line(line))
        changed = self.failures.feed(text, scan)
        if changed:
            fired.extend(self._on_failures(changed))
        return fired

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
                    sample=_sample(event.line),
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

    def _restate_causes(self) -> None:
        """Words and places in the diagnosis for every failure alert (a later line can change the cause)."""
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
            succeeded=self.failures.succeeded or self.job_status == "SUCCEEDED",
        )

    def _log_line(self, rule: AlertRule, line: str, text: str, start: int) -> Alert | None:
        assert rule.pattern is not None
        m = rule.pattern.search(line)
        if m is None:
            return None
        parsed = parse_line(line)
        groups = {k: v for k, v in m.groupdict().items() if v is not None}
        for name in [k for k in groups if k.endswith("_alt")]:  # a second spelling fills the first's field
            groups.setdefault(name[: -len("_alt")], groups.pop(name))
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
        if parsed is None:
            return []
        prefix = _LINE_PREFIX.match(line)
        if prefix is None:
            return []  # the driver's own line (or one without Ray's prefix) is no train actor's report
        actor = prefix["prefix"]
        named, pid, ip = parse_prefix_inner(actor)  # a worker setup hook's `(pid=N)` names no class
        role = role_of(named) if named is not None else None
        if pid is None or (role is not None and role != TRAIN):
            return []  # the hook runs in every Ray worker; only train actors' lines say what a model got
        # Ray folds identical lines of other actors into one "[repeated Nx across cluster]" line.
        repeats = int(repeat.group(1)) if repeat else 1
        self.shim_lines_seen += repeats
        self.shim.report((pid, ip or ""), parsed, repeats)
        if parsed.status == "not_applied":
            rule = next((r for r in self._log_rules if r.id == "shim-not-loaded"), None)
            alert = rule and self._fire(
                rule,
                {"reason": parsed.reason[:200] or "no reason given", "actor": actor},
                key=actor,
                once=(rule.id, actor),
                sample=line,
            )
            return [alert] if alert else []
        rule = self._rule("shim_fields")
        if rule is None:
            return []
        name = rule.texts("field", ("moe_router_topk_scaling_factor",))[0]
        value = parsed.fields.get(name)
        ok = (
            isinstance(value, int | float)
            and not isinstance(value, bool)
            and math.isclose(float(value), self.expected_scaling, rel_tol=1e-6)
        )
        if ok:
            return []
        alert = self._fire(
            rule,
            {"actor": actor, "value": value, "expected": self.expected_scaling},
            key=actor,
            once=(rule.id, actor),
        )
        return [alert] if alert else []

    # ------------------------------------------------------------------ what the run controller reports

    def on_shim_missing(self, actors: Iterable[str]) -> Alert | None:
        """Train actors that never logged the shim line (`self.shim.missing()` once they trained, or the
        controller's own list)."""
        names = sorted(set(actors))
        rule = self._rule("shim_missing")
        if not names or rule is None:
            return None
        shown = ", ".join(names[:8]) + (f" and {len(names) - 8} more" if len(names) > 8 else "")
        return self._fire(rule, {"actor": shown}, once=(rule.id, tuple(names)))

    def on_job_status(self, status: str, message: str | None = None) -> Alert | None:
        """Ray job status change; FAILED raises the alert with its cause: what the log said (OOM, an actor
        died, NaN), else Ray's own reason."""
        self.job_status = str(status).upper()
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
        self._episodes.pop((rule_id, episode), None)

    def check_unreadable(self, count: int, sample: str) -> Alert | None:
        """Metric-looking lines that did not parse: charts would stay empty without a word."""
        rule = self._rule("unreadable_metrics")
        if rule is None or count < int(rule.param("min_count", 1)):
            return None
        return self._update(rule, "unreadable", {"count": count}, count, sample)

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
            if len(rnd.ends) < int(rule.param("min_peers", 3)):
                continue
            median_end = statistics.median(t1 for _, _, t1 in rnd.ends)
            length = statistics.median(t1 - t0 for _, t0, t1 in rnd.ends)
            limit = max(rule.param("factor", 0.5) * length, rule.param("min_s", 2.0))
            for lane, _t0, t1 in rnd.ends:
                episode = (lane, rnd.name)
                if t1 - median_end <= limit:
                    if self._straggles.pop(episode, 0) >= int(rule.param("times", 3)):
                        self._end(rule.id, f"{lane_name(lane)}:{rnd.name}")
                    continue
                streak = self._straggles[episode] = self._straggles.get(episode, 0) + 1
                if streak < int(rule.param("times", 3)):
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
        if (
            rule is None
            or not phases.lanes
            or not math.isfinite(phases.last_change)
            or not math.isfinite(phase_now)
        ):
            return None
        idle = min(
            phase_now - phases.last_change, metric_idle_s if math.isfinite(metric_idle_s) else math.inf
        )
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


def failure_cause(alerts: Sequence[Alert]) -> Alert | None:
    """The alert the diagnosis names as why the run failed (or is failing); None if the log said nothing."""
    return next((a for a in alerts if a.cause == 1), None)


def headline(alerts: Sequence[Alert], job_state: str) -> str:
    """The one phrase a run's header adds: the failure's cause (the moment its line arrives, not only once
    Ray says FAILED), else the newest blind spot, else ""."""
    cause = failure_cause(alerts)
    if job_state.upper() == "FAILED":
        if cause is not None:
            return f"FAILED: {cause.message}"
        failed = next((a for a in reversed(alerts) if a.id == "job-failed"), None)
        return f"FAILED: {failed.message}" if failed is not None else ""
    if cause is not None:  # a live run says it is failing; a finished or replayed one what killed it
        live = job_state.upper() in ("PENDING", "RUNNING")
        return f"{'FAILING' if live else 'failure'}: {cause.message}"
    newest = next((a for a in reversed(alerts) if a.blind), None)
    return newest.message if newest is not None else ""


def _load_shim_fields(text: str) -> Any:
    return bounded_loads(text, SHIM_LINE)


def _sample(line: str) -> str:
    line = " ".join(line.split())
    return line if len(line) <= SAMPLE_CHARS else line[:SAMPLE_CHARS] + "…"


def _lines_at(text: str, needle: str) -> Iterator[tuple[int, str]]:
    """(start offset, line) of each line of `text` holding `needle`, once each."""
    pos = text.find(needle)
    while pos >= 0:
        start = text.rfind("\n", 0, pos) + 1
        end = text.find("\n", pos)
        end = len(text) if end < 0 else end
        yield start, text[start:end]
        pos = text.find(needle, end)


def _owner_in(text: str, start: int) -> ParsedLine | None:
    """The process a prefix-less line at `start` of `text` belongs to (its traceback's first line)."""
    head = text[max(0, start - 64 * 1024) : start]
    lines = head.split("\n")
    if lines and lines[-1] == "":
        lines.pop()
    return traceback_owner([*lines, ""], len(lines))
