"""The layout form: one compact line per spec field (label, input, note).

It holds text, not numbers: every keystroke posts `LayoutForm.Edited(path, text)` and the plan view
asks backend to rebuild and check the spec. The view then calls `mark(...)` with what backend said,
and the inputs a finding names get the `-error` / `-warning` class, their label is highlighted and
the finding's message shows beside them.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import ClassVar

from textual import on
from textual.app import ComposeResult
from textual.binding import Binding, BindingType
from textual.containers import Horizontal, Vertical
from textual.markup import escape
from textual.message import Message
from textual.widgets import Input, Select, Static


@dataclass(frozen=True)
class FormField:
    path: str  # dotted RunSpec path (what backend.recipe.apply_overrides takes)
    label: str
    choices: tuple[str, ...] = ()  # non-empty: a Select instead of an Input


FIELDS: tuple[FormField, ...] = (
    FormField("cluster.nodes", "Nodes"),
    FormField("cluster.gpus_per_node", "GPUs / node"),
    FormField("train.tp", "TP"),
    FormField("train.pp", "PP"),
    FormField("train.cp", "CP"),
    FormField("train.ep", "EP"),
    FormField("train.etp", "ETP"),
    FormField("rollout.gpus_per_engine", "Engine GPUs"),
    FormField("rollout.ep", "Engine EP"),
    FormField("rollout.dp", "Engine DP"),
    FormField("rollout.mem_fraction", "Mem fraction"),
    FormField("batch.rollout_batch_size", "Rollout batch"),
    FormField("batch.n_samples_per_prompt", "Samples/prompt"),
    FormField("batch.global_batch_size", "Global batch"),
    FormField("batch.max_tokens_per_gpu", "Max tok / GPU"),
    FormField("batch.num_rollout", "Rollouts"),
    FormField("run.mode", "Mode", ("normal", "debug_minimal")),
)


def _row_id(path: str) -> str:
    return "field-" + path.replace(".", "-").replace("_", "-")


class FieldInput(Input):
    """A one-line input that knows its spec path."""

    def __init__(self, path: str, **kwargs: object) -> None:
        super().__init__(**kwargs)  # type: ignore[arg-type]
        self.path = path


class QuietSelect(Select[str], inherit_bindings=False):
    """A Select that opens with Enter/Space only, so Up/Down keep moving between fields."""

    BINDINGS: ClassVar[list[BindingType]] = [Binding("enter,space", "show_overlay", "Open", show=False)]


class FieldSelect(QuietSelect):
    """A choice field of the form."""

    def __init__(self, path: str, choices: tuple[str, ...], **kwargs: object) -> None:
        super().__init__([(c, c) for c in choices], allow_blank=False, **kwargs)  # type: ignore[arg-type]
        self.path = path


class LayoutForm(Horizontal):
    """Three columns: labels (one Static), the controls, notes (one Static); `Edited` on every change.

    Labels and notes are one widget each rather than one per row: every widget costs a restyle on
    each focus move, and the form has a row per field.
    """

    DEFAULT_CSS = """
    LayoutForm { height: auto; }
    LayoutForm #form-labels { width: 15; height: auto; color: $text-muted; text-wrap: nowrap; }
    LayoutForm #form-controls { width: 18; height: auto; }
    LayoutForm #form-controls Input { width: 12; height: 1; border: none; padding: 0 1; }
    LayoutForm #form-controls Input:focus { background: $boost; text-style: bold; }
    LayoutForm #form-controls Input.-error { background: $error 30%; }
    LayoutForm #form-controls Input.-warning { background: $warning 20%; }
    LayoutForm #form-controls Select { width: 18; height: 1; }
    LayoutForm #form-controls Select > SelectCurrent { height: 1; border: none; padding: 0 1; }
    LayoutForm #form-notes { width: 1fr; height: auto; padding-left: 1; text-wrap: nowrap; text-overflow: ellipsis; }
    """

    class Edited(Message):
        def __init__(self, path: str, text: str) -> None:
            super().__init__()
            self.path = path
            self.text = text

    def __init__(self, values: Mapping[str, str] | None = None, **kwargs: object) -> None:
        """values: what the fields show first (as `load` would), set before they are mounted."""
        super().__init__(**kwargs)  # type: ignore[arg-type]
        self._notes: dict[str, tuple[str, str]] = {}
        self._initial = dict(values or {})

    def compose(self) -> ComposeResult:
        yield Static(self._labels_markup(), id="form-labels")
        with Vertical(id="form-controls"):
            for f in FIELDS:
                text = self._initial.get(f.path, "")
                if f.choices:
                    yield FieldSelect(f.path, f.choices, id=_row_id(f.path) + "-input",
                                      **({"value": text} if text in f.choices else {}))
                else:
                    yield FieldInput(f.path, id=_row_id(f.path) + "-input", compact=True, select_on_focus=False,
                                     value=text)
        yield Static("", id="form-notes")

    def on_mount(self) -> None:
        for column in self.query_one("#form-labels"), self.query_one("#form-notes"):
            column.styles.height = len(FIELDS)  # fixed, so a new note never needs a re-layout

    def control(self, path: str) -> Input | Select[str]:
        return self.query_one(f"#{_row_id(path)}-input")  # type: ignore[return-value]

    def load(self, values: Mapping[str, str]) -> None:
        """Show `values` (path -> text) without treating them as operator edits."""
        for f in FIELDS:
            text = values.get(f.path, "")
            ctl = self.control(f.path)
            if isinstance(ctl, Select):
                with ctl.prevent(Select.Changed):
                    if text in f.choices:
                        ctl.value = text
            else:
                with ctl.prevent(Input.Changed):
                    ctl.value = text

    def _labels_markup(self) -> str:
        lines = []
        for f in FIELDS:
            severity = self._notes.get(f.path, ("", ""))[0]
            style = {"error": "bold reverse $error", "warning": "bold $warning"}.get(severity)
            lines.append(f"[{style}]{escape(f.label)}[/]" if style else escape(f.label))
        return "\n".join(lines)

    def _notes_markup(self) -> str:
        lines = []
        for f in FIELDS:
            severity, note = self._notes.get(f.path, ("", ""))
            style = {"error": "$error", "warning": "$warning"}.get(severity)
            lines.append(f"[{style}]{escape(note)}[/]" if style and note else escape(note))
        return "\n".join(lines)

    def mark(self, notes: Mapping[str, tuple[str, str]]) -> None:
        """notes: path -> (severity "error"|"warning"|"info", one-line note); others are cleared."""
        notes = {path: (sev, " ".join(note.split())) for path, (sev, note) in notes.items()}
        if notes == self._notes:
            return
        self._notes = notes
        for f in FIELDS:
            severity = notes.get(f.path, ("", ""))[0]
            ctl = self.control(f.path)
            ctl.set_class(severity == "error", "-error")
            ctl.set_class(severity == "warning", "-warning")
        self.query_one("#form-labels", Static).update(self._labels_markup(), layout=False)
        self.query_one("#form-notes", Static).update(self._notes_markup(), layout=False)

    def severity_of(self, path: str) -> str:
        """The highlight a field shows now ("error", "warning" or "")."""
        ctl = self.control(path)
        return "error" if ctl.has_class("-error") else "warning" if ctl.has_class("-warning") else ""

    def note_of(self, path: str) -> str:
        return self._notes.get(path, ("", ""))[1]

    @on(Input.Changed)
    def _input_changed(self, event: Input.Changed) -> None:
        if isinstance(event.input, FieldInput):
            event.stop()
            self.post_message(self.Edited(event.input.path, event.value))

    @on(Select.Changed)
    def _select_changed(self, event: Select.Changed) -> None:
        if isinstance(event.select, FieldSelect):
            event.stop()
            self.post_message(self.Edited(event.select.path, str(event.value)))
