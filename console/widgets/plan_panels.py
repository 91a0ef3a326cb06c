"""Read-only panels of the plan view: launch status, findings, derived numbers, preflight, command.

Each renders what backend returned (Finding objects, the `LayoutFigures` figures, the Submission's shell
text) and computes nothing. Updates replace one renderable, with `layout=False` where the panel's
size is fixed, and only when the content changed.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING

from rich.text import Text
from textual.containers import VerticalScroll
from textual.widgets import Static

from backend.severity import Severity

if TYPE_CHECKING:
    from rich.console import RenderableType

    from backend.plan.derived import LayoutFigures
    from backend.plan.finding import Finding

SEVERITY_MARK = {
    Severity.CRITICAL: ("✗", "bold red"),
    Severity.ERROR: ("✗", "bold red"),
    Severity.WARNING: ("!", "bold yellow"),
    Severity.INFO: ("i", "cyan"),
}


def _mark(severity: Severity) -> tuple[str, str]:
    return SEVERITY_MARK[severity]


class _Panel(Static):
    """A Static that skips identical updates (Textual would repaint them anyway)."""

    _last: object = None

    def show(self, key: object, renderable: RenderableType) -> None:
        if key == self._last:
            return
        self._last = key
        self.update(renderable)


class LaunchStatus(_Panel):
    DEFAULT_CSS = """
    LaunchStatus { height: auto; padding: 0 1; text-style: bold; }
    LaunchStatus.-ready { background: $success 20%; color: $text; }
    LaunchStatus.-blocked { background: $error 20%; color: $text; }
    LaunchStatus.-readonly { background: $warning 20%; color: $text; }
    """

    def set_status(self, state: str, text: str) -> None:
        for cls in ("-ready", "-blocked", "-readonly"):
            self.set_class(cls == f"-{state}", cls)
        self.show((state, text), Text(text))


class FindingsPanel(_Panel):
    DEFAULT_CSS = """
    FindingsPanel { height: auto; padding: 0 1; }
    """

    def set_findings(
        self, findings: Sequence[Finding], field_errors: Mapping[str, str], error: str | None
    ) -> None:
        key = (
            tuple((f.rule, f.severity, tuple(f.fields), f.message, f.fix) for f in findings),
            tuple(sorted(field_errors.items())),
            error,
        )
        text = Text()
        for path, message in field_errors.items():
            text.append("✗ ", "bold red").append(f"{path}: ", "bold").append(f"{message}\n")
        if error:
            text.append("✗ ", "bold red").append(f"{error}\n")
        for f in findings:
            mark, style = _mark(f.severity)
            text.append(f"{mark} ", style).append(f"{f.rule} ", "bold").append(f"{f.message}\n")
            if f.fix:
                text.append("    fix: ", "dim").append(f"{f.fix}\n")
        if not text:
            text.append("✓ no findings: every rule passes", "green")
        text.rstrip()
        self.show(key, text)


def figure_text(value: object) -> str:
    """One figure of `LayoutFigures.to_json` (a number, a flag, a word, or a list of numbers) for a panel
    row."""
    if isinstance(value, float):
        return f"{value:,.3g}" if abs(value) < 1000 else f"{value:,.0f}"
    if isinstance(value, int) and not isinstance(value, bool):
        return f"{value:,}"
    if isinstance(value, list):
        return ", ".join(figure_text(v) for v in value)
    if value is None:  # a figure the layout does not define (dp of a grid that does not divide the GPUs)
        return "—"
    return str(value)


# The longest figure name (optimizer_steps_per_rollout, host_grad_copies_gb_per_gpu) whole: at 26 their last
# letters were cut ("optimizer steps per rollou").
LABEL_CAP = 28


class DerivedPanel(_Panel):
    DEFAULT_CSS = """
    DerivedPanel { height: auto; padding: 0 1; text-wrap: nowrap; text-overflow: ellipsis; }
    """

    def set_derived(self, derived: LayoutFigures | None) -> None:
        """Every figure under its name, in `LayoutFigures.to_json`'s order; each pipeline stage on a row of
        its own."""
        items: list[tuple[str, str]] = []
        if derived is not None:
            for name, value in derived.to_json().items():
                if name == "stages":
                    items.extend(
                        (
                            f"stages[{s.stage}]",
                            " ".join(f"{k}={figure_text(v)}" for k, v in s.to_json().items()),
                        )
                        for s in derived.training.stages
                    )
                else:
                    items.append((name, figure_text(value)))
        width = min(max((len(k) for k, _ in items), default=0), LABEL_CAP) + 2
        text = Text(
            no_wrap=True, overflow="ellipsis"
        )  # plain lines: a Rich Table re-measures on every render
        for k, v in items:
            text.append(k.replace("_", " ")[: width - 2].ljust(width), "dim").append(v + "\n")
        text.rstrip()
        self.show(tuple(items), text if items else Text("(no derived numbers)", "dim"))


class PreflightPanel(_Panel):
    DEFAULT_CSS = """
    PreflightPanel { height: auto; padding: 0 1; }
    """

    def set_preflight(self, state: str, findings: Sequence[Finding], note: str = "") -> None:
        key = (state, note, tuple((f.rule, f.severity, f.message) for f in findings))
        text = Text()
        label = {
            "not checked": ("not checked — press p to check the cluster", "dim"),
            "running": ("checking the cluster…", "yellow"),
            "stale": ("stale: the spec changed since the last check — press p", "yellow"),
            "passed": ("passed", "green"),
            "failed": ("FAILED", "bold red"),
            "unavailable": ("could not run", "yellow"),
        }.get(state, (state, ""))
        text.append("preflight: ", "bold").append(label[0], label[1])
        if note:
            text.append(f"\n  {note}", "dim")
        for f in findings:
            mark, style = _mark(f.severity)
            text.append(f"\n{mark} ", style).append(f"{f.rule} ", "bold").append(f.message)
            if f.fix:
                text.append(f"\n    fix: {f.fix}", "dim")
        self.show(key, text)


class CommandPanel(VerticalScroll, can_focus=True):
    """The exact submission (redacted), scrollable; the plan view copies it with OSC 52."""

    DEFAULT_CSS = """
    CommandPanel { height: 10; border: round $panel; padding: 0 1; overflow-y: scroll; }
    CommandPanel:focus { border: round $accent; }
    CommandPanel > Static { width: 1fr; }
    """

    text: str = ""

    def compose(self):  # type: ignore[no-untyped-def]
        yield Static("", markup=False, id="command-text")
        yield Static("", markup=False, id="command-note")

    def set_command(self, text: str, note: str = "") -> None:
        """The command, and below it (never copied) a note on what it turns on."""
        if text == self.text:
            return
        self.text = text
        self.query_one("#command-text", Static).update(Text(text))
        self.query_one("#command-note", Static).update(Text(f"# {note}", "dim") if note else "")
