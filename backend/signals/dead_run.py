"""The dead run's screen, as data: the diagnosis panel's rows and why the charts stay empty.

Why here and not in the view: the Run view leads with this panel when a run failed (live, attached or
replayed), and what it says is a reading of the diagnosis (the cause's fields, its consequences, the
incidents before it), which backend owns; the view only draws the rows.
"""

from __future__ import annotations

from dataclasses import dataclass

from backend.node_names import NodeNames
from backend.signals.failures import Diagnosis
from backend.signals.failures.diagnosis import Finding

MAX_LISTED = 3  # consequences and incidents named in the panel (Events lists every one)


@dataclass(frozen=True, slots=True)
class PanelRow:
    """One labelled row of the panel ("where", "line", ...)."""

    label: str
    text: str


@dataclass(frozen=True, slots=True)
class DiagnosisPanel:
    """The panel: a title line and labelled rows."""

    title: str
    rows: tuple[PanelRow, ...]

    def text(self) -> str:
        width = max(len(r.label) for r in self.rows) if self.rows else 0
        return "\n".join([self.title, *(f"{r.label.rjust(width)}  {r.text}" for r in self.rows)])


def _rank(f: Finding) -> str:
    parts = []
    if f.global_rank is not None:
        parts.append(f"rank {f.global_rank}")
    elif f.rank:
        parts.append(f"rank {f.rank}")
    if f.group_rank is not None:
        parts.append(f"rank {f.group_rank} in {f.group or 'its group'}")
    return ", ".join(parts)


def _where(f: Finding, names: NodeNames) -> str:
    bits = [
        f.role or "",
        f.actor or "",
        f"pid {f.pid}" if f.pid else "",
        f"node {names.shown(f.node)}" if f.node else "",
        _rank(f),
        f"GPU {f.gpu}" if f.gpu else "",
    ]
    return " · ".join(b for b in bits if b) or "not in the log"


def diagnosis_panel(
    found: Diagnosis, up_s: float | None = None, names: NodeNames | None = None
) -> DiagnosisPanel:
    """The panel for a diagnosis; `up_s`: how long the run had been up when the cause's line came; `names`:
    the cluster's node names, for the nodes the log names by IP or id (the line itself stays as written)."""
    names = names or NodeNames()
    cause = found.cause
    when = cause.time or "time not in the line"
    if up_s is not None and up_s >= 0:
        when += f" · {_duration(up_s)} after the run's first line"
    rows = [
        PanelRow("cause", f"{names.in_text(cause.message)} [{cause.id}]"),
        PanelRow("where", _where(cause, names)),
        PanelRow("when", when),
        PanelRow("line", f"{cause.line} (Enter: in Logs)" if cause.line else "—"),
        *_optional_rows(found),
    ]
    return DiagnosisPanel(f"FAILED: {cause.title}", tuple(rows))


def _optional_rows(found: Diagnosis) -> list[PanelRow]:
    """The rows only some diagnoses have: the frame, what to try, consequences, earlier incidents, doubt."""
    cause, rows = found.cause, []
    if cause.frame:
        rows.append(PanelRow("frame", cause.frame))
    if cause.try_:
        rows.append(PanelRow("try", cause.try_))
    if found.consequences:
        rows.append(PanelRow("then", _listed([c.title for c in found.consequences])))
    if found.incidents:
        rows.append(
            PanelRow("before", _listed([f"{i.finding.title} (then {i.progress})" for i in found.incidents]))
        )
    if found.doubt:
        rows.append(PanelRow("doubt", found.doubt))
    return rows


def _listed(names: list[str]) -> str:
    shown = "; ".join(names[:MAX_LISTED])
    return shown + (f"; and {len(names) - MAX_LISTED} more (Events)" if len(names) > MAX_LISTED else "")


def _duration(seconds: float) -> str:
    s = int(seconds)
    if s < 60:
        return f"{s}s"
    if s < 3600:
        return f"{s // 60}m{s % 60:02d}s"
    return f"{s // 3600}h{s % 3600 // 60:02d}m"


def empty_chart_note(*, replay: bool, ended: bool, metrics: int, failed: bool) -> str:
    """What an empty chart says: why it cannot fill, never "waiting" where nothing will come."""
    if metrics:
        return "waiting for metrics"
    if failed:
        return "no metrics: it died before its first rollout"
    if replay or ended:
        return "no metrics in this log"
    return "waiting for metrics"
