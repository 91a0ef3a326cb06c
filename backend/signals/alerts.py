"""Red-flag alerts: rules are data (`configs/alerts.toml`), this module only knows the kinds of check.

A metric rule is evaluated on every new point of its series and fires once per episode: when its condition
becomes true, not again until it has been false (an alert that repeats every rollout is noise). Log rules
(the NemotronH shim failing to load; the shim's own `applied NemotronH provider fields {...}` line with a
wrong value) look at sanitised log text. The run controller reports what only it can see: the Ray job
failing (`on_job_status`), a node dying (`on_node_dead`), train actors that never logged the shim
(`on_shim_missing`), and the passage of time (`check_stall`, `check_phases`).
"""

from __future__ import annotations

import dataclasses
import itertools
import math
import re
import statistics
import sys
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from importlib import resources
from pathlib import Path
from typing import Any

from backend.errors import ConsoleError
from backend.signals.grammar import REPEATED
from backend.signals.metrics import Point, lines_containing
from backend.signals.series import Series
from shim import logline as shim_logline

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover
    import tomli as tomllib

SEVERITIES = ("critical", "warning", "info")
METRIC_CHECKS = ("above", "below", "nonfinite", "climb", "spike", "collapse")
OTHER_CHECKS = ("log", "shim_fields", "shim_missing", "stall", "phase_stall", "job_failed", "node_dead")
MAX_ALERTS = 1000
_LINE_PREFIX = re.compile(r"^\((?P<prefix>[^()\n]*)\) ")


class AlertRuleError(ConsoleError):
    """The alert definitions are malformed."""


@dataclass(frozen=True)
class Rule:
    id: str
    severity: str
    when: str
    message: str
    metrics: tuple[str, ...] = ()
    params: dict[str, Any] = field(default_factory=dict)
    pattern: re.Pattern[str] | None = None

    def param(self, name: str, default: float) -> float:
        value = self.params.get(name, default)
        return float(value)


@dataclass
class Alert:
    """A fired rule. `step` is where the episode began; `last_step`/`count` follow it while it lasts."""

    id: str
    severity: str
    message: str
    step: float | None = None
    key: str | None = None
    ts: float = field(default_factory=time.time)
    last_step: float | None = None
    count: int = 1
    sample: str = ""  # the log line that said it (sanitised, cut), where a line did

    def to_json(self) -> dict[str, Any]:
        step = self.step
        if isinstance(step, float) and step.is_integer():
            step = int(step)
        return {"id": self.id, "severity": self.severity, "message": self.message, "step": step,
                "key": self.key, "count": self.count, "sample": self.sample}


def default_rules_path() -> Path:
    return Path(str(resources.files("configs").joinpath("alerts.toml")))


def load_rules(path: str | Path | None = None) -> list[Rule]:
    """Parse and validate rule definitions; a bad file is one clear error."""
    path = Path(path) if path is not None else default_rules_path()
    try:
        data = tomllib.loads(path.read_text(encoding="utf-8"))
    except (OSError, tomllib.TOMLDecodeError) as err:
        raise AlertRuleError(f"cannot read alert rules {path}: {err}") from None
    rules, seen = [], set()
    for i, raw in enumerate(data.get("rule", [])):
        rid = raw.get("id")
        where = f"alert rule #{i + 1} ({rid or 'no id'}) in {path}"
        if not isinstance(rid, str) or not rid or rid in seen:
            raise AlertRuleError(f"{where}: needs a unique string id")
        seen.add(rid)
        if raw.get("severity") not in SEVERITIES:
            raise AlertRuleError(f"{where}: severity must be one of {', '.join(SEVERITIES)}")
        when = raw.get("when")
        if when not in METRIC_CHECKS + OTHER_CHECKS:
            raise AlertRuleError(f"{where}: unknown check {when!r}")
        if not isinstance(raw.get("message"), str):
            raise AlertRuleError(f"{where}: needs a message")
        metrics = tuple(raw.get("metrics", ()))
        if when in METRIC_CHECKS and not metrics:
            raise AlertRuleError(f"{where}: a {when} rule needs metrics")
        pattern = None
        if when == "log":
            try:
                pattern = re.compile(raw.get("pattern", ""))
            except re.error as err:
                raise AlertRuleError(f"{where}: bad pattern: {err}") from None
            if not pattern.pattern:
                raise AlertRuleError(f"{where}: a log rule needs a pattern")
        params = {k: v for k, v in raw.items() if k not in ("id", "severity", "when", "message", "metrics", "pattern")}
        rules.append(Rule(rid, raw["severity"], when, raw["message"], metrics, params, pattern))
    return rules


def _fmt(value: Any) -> str:
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

    def __init__(self, rules: list[Rule] | None = None, *, expected_scaling: float = 5.0) -> None:
        self.rules = rules if rules is not None else load_rules()
        self.expected_scaling = expected_scaling
        self.alerts: list[Alert] = []
        self.shim_reports: dict[str, dict[str, Any]] = {}  # train actor -> fields it logged
        self.shim_lines_seen = 0  # how many actors logged the line, counting Ray's dedup
        self._by_metric: dict[str, list[Rule]] = {}
        for rule in self.rules:
            for key in rule.metrics:
                self._by_metric.setdefault(key, []).append(rule)
        self._log_rules = [r for r in self.rules if r.when == "log"]
        self._episodes: dict[tuple[str, str], Alert] = {}
        self._fired: set[tuple[Any, ...]] = set()
        self._listeners: list[Callable[[Alert], None]] = []

    def subscribe(self, listener: Callable[[Alert], None]) -> None:
        self._listeners.append(listener)

    def snapshot(self) -> list[Alert]:
        """Copies of the alerts so far, for another thread (an episode's count keeps growing here)."""
        return [dataclasses.replace(a) for a in self.alerts]

    def _rule(self, when: str) -> Rule | None:
        return next((r for r in self.rules if r.when == when), None)

    def _fire(self, rule: Rule, fields: dict[str, Any], *, step: float | None = None, key: str | None = None,
              once: tuple[Any, ...] | None = None) -> Alert | None:
        if once is not None:
            if once in self._fired:
                return None
            self._fired.add(once)
        text = rule.message.format_map(_Fields({k: _fmt(v) for k, v in fields.items()}))
        alert = Alert(rule.id, rule.severity, text, step, key, last_step=step)
        if len(self.alerts) >= MAX_ALERTS:
            del self.alerts[: MAX_ALERTS // 10]
        self.alerts.append(alert)
        for listener in self._listeners:
            listener(alert)
        return alert

    # ------------------------------------------------------------------ metric rules

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
            alert = self._fire(rule, {"key": point.key, "step": point.step, "value": point.value, **fields},
                               step=point.step, key=point.key)
            if alert is not None:
                self._episodes[episode] = alert
                fired.append(alert)
        return fired

    def _check(self, rule: Rule, point: Point, series: Series | None) -> tuple[bool, dict[str, Any]]:
        v = point.value
        fields: dict[str, Any] = {k: v for k, v in rule.params.items() if isinstance(v, int | float)}
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
            rising = len(tail) == window + 1 and all(math.isfinite(x) for x in tail) and all(
                a < b for a, b in itertools.pairwise(tail))
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

    def on_log_text(self, text: str) -> list[Alert]:
        """Scan sanitised complete lines for the shim's failure and report lines (str.find first)."""
        fired = []
        for line in lines_containing(text, "nemotron_h"):
            for rule in self._log_rules:
                assert rule.pattern is not None
                m = rule.pattern.search(line)
                if m is None:
                    continue
                prefix = _LINE_PREFIX.match(line)
                actor = prefix["prefix"] if prefix else "driver"
                reason = (m.groupdict().get("reason") or "").strip()[:200] or "no reason given"
                alert = self._fire(rule, {"reason": reason, "actor": actor}, key=actor, once=(rule.id, actor))
                if alert:
                    fired.append(alert)
        for line in lines_containing(text, shim_logline.LINE_PREFIX):
            fired.extend(self._shim_line(line))
        return fired

    def on_log_lines(self, first: int, count: int, text: str) -> None:
        """`LogStore.subscribe` signature."""
        self.on_log_text(text)

    def _shim_line(self, line: str) -> list[Alert]:
        """One of the shim's own lines (all three forms, parsed by shim.logline, the one source of them)."""
        repeat = REPEATED.search(line)
        if repeat is not None:
            line = line[: repeat.start()]
        parsed = shim_logline.parse(line)
        if parsed is None:
            return []
        prefix = _LINE_PREFIX.match(line)
        actor = prefix["prefix"] if prefix else "driver"
        # Ray folds identical lines of other actors into one "[repeated Nx across cluster]" line.
        self.shim_lines_seen += int(repeat.group(1)) if repeat else 1
        if parsed.status == "not_applied":
            rule = next((r for r in self._log_rules if r.id == "shim-not-loaded"), None)
            alert = rule and self._fire(rule, {"reason": parsed.reason[:200] or "no reason given", "actor": actor},
                                        key=actor, once=(rule.id, actor))
            return [alert] if alert else []
        self.shim_reports[actor] = dict(parsed.fields)
        rule = self._rule("shim_fields")
        if rule is None:
            return []
        name = str(rule.params.get("field", "moe_router_topk_scaling_factor"))
        value = parsed.fields.get(name)
        ok = isinstance(value, int | float) and not isinstance(value, bool) and math.isclose(
            float(value), self.expected_scaling, rel_tol=1e-6)
        if ok:
            return []
        alert = self._fire(rule, {"actor": actor, "value": value, "expected": self.expected_scaling},
                           key=actor, once=(rule.id, actor))
        return [alert] if alert else []

    # ------------------------------------------------------------------ what the run controller reports

    def on_shim_missing(self, actors: Iterable[str]) -> Alert | None:
        """The controller knows which train actors exist; these never logged the shim line."""
        names = sorted(set(actors))
        rule = self._rule("shim_missing")
        if not names or rule is None:
            return None
        shown = ", ".join(names[:8]) + (f" and {len(names) - 8} more" if len(names) > 8 else "")
        return self._fire(rule, {"actor": shown}, once=(rule.id, tuple(names)))

    def on_job_status(self, status: str, message: str | None = None) -> Alert | None:
        """Ray job status change; FAILED raises the alert with Ray's own reason."""
        rule = self._rule("job_failed")
        if rule is None or str(status).upper() != "FAILED":
            return None
        reason = (message or "Ray gave no reason").strip()[:500]
        return self._fire(rule, {"status": "failed", "reason": reason}, once=(rule.id, status, reason))

    def on_node_dead(self, node_id: str, reason: str | None = None) -> Alert | None:
        rule = self._rule("node_dead")
        if rule is None:
            return None
        return self._fire(rule, {"node": node_id, "reason": (reason or "no reason given")[:500]}, key=node_id,
                          once=(rule.id, node_id))

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
        return self._fire(rule, {"minutes": round(idle / 60), "factor": rule.param("factor", 6.0),
                                 "threshold": round(limit / 60)}, once=(rule.id, last_metric_ts))

    def check_phases(self, open_phases: dict[tuple[str, int, str, str], float],
                     median_of: Callable[[str], float | None], now: float) -> list[Alert]:
        """Dashboard phases open longer than max(factor x their median, min_s)."""
        rule, fired = self._rule("phase_stall"), []
        if rule is None or not math.isfinite(now):
            return fired
        for (node, rank, _role, name), t0 in open_phases.items():
            limit = max(rule.param("factor", 6.0) * (median_of(name) or 0.0), rule.param("min_s", 1800.0))
            if now - t0 <= limit:
                continue
            note = ": the trainer is starved of rollout data" if name == "train_wait" else ""
            alert = self._fire(rule, {"key": name, "node": f"{node} rank {rank}" if rank >= 0 else node,
                                      "minutes": round((now - t0) / 60), "factor": rule.param("factor", 6.0),
                                      "threshold": round(limit / 60), "reason": note},
                               key=name, once=(rule.id, node, rank, name, t0))
            if alert:
                fired.append(alert)
        return fired
