"""The layout form: one compact row per spec field (label, input, note).

It holds text, not numbers: every keystroke posts `LayoutForm.Edited(path, text)` and the plan view
asks backend to rebuild and check the spec. The view then calls `mark(...)` with what backend said,
and the rows a finding names get the `-error` / `-warning` class and its message.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import ClassVar

from rich.text import Text
from textual import on
from textual.app import ComposeResult
from textual.binding import Binding, BindingType
from textual.containers import Horizontal, Vertical
from textual.message import Message
from textual.widgets import Input, Label, Select, Static


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


class LayoutForm(Vertical):
    """Rows of `FIELDS`; posts `Edited` on every change the operator makes."""

    DEFAULT_CSS = """
    LayoutForm { height: auto; }
    LayoutForm .form-row { height: 1; }
    LayoutForm .form-row Label { width: 15; color: $text-muted; }
    LayoutForm .form-row Input { width: 12; height: 1; border: none; padding: 0 1; }
    LayoutForm .form-row Input:focus { background: $boost; text-style: bold; }
    LayoutForm .form-row Select { width: 20; height: 1; }
    LayoutForm .form-row Select > SelectCurrent { height: 1; border: none; padding: 0 1; }
    LayoutForm .form-row .note { width: 1fr; height: 1; padding-left: 1; text-wrap: nowrap; text-overflow: ellipsis; }
    LayoutForm .form-row Label.-warning { color: $warning; text-style: bold; }
    LayoutForm .form-row .note.-warning { color: $warning; }
    LayoutForm .form-row Label.-error { color: $error; text-style: bold reverse; }
    LayoutForm .form-row .note.-error { color: $error; }
    """

    class Edited(Message):
        def __init__(self, path: str, text: str) -> None:
            super().__init__()
            self.path = path
            self.text = text

    def compose(self) -> ComposeResult:
        for f in FIELDS:
            with Horizontal(classes="form-row", id=_row_id(f.path)):
                yield Label(f.label)
                if f.choices:
                    yield FieldSelect(f.path, f.choices, id=_row_id(f.path) + "-input")
                else:
                    yield FieldInput(f.path, id=_row_id(f.path) + "-input", compact=True, select_on_focus=False)
                yield Static("", classes="note", markup=False)

    def row(self, path: str) -> Horizontal:
        return self.query_one(f"#{_row_id(path)}", Horizontal)

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

    def mark(self, notes: Mapping[str, tuple[str, str]]) -> None:
        """notes: path -> (severity "error"|"warning"|"info", one-line note); others are cleared.

        The class goes on the row's label and note (leaf widgets), not the row: restyling a row
        would restyle its Input too, and many rows flip on one keystroke.
        """
        for f in FIELDS:
            severity, note = notes.get(f.path, ("", ""))
            row = self.row(f.path)
            for part in (row.query_one(Label), row.query_one(".note", Static)):
                part.set_class(severity == "error", "-error")
                part.set_class(severity == "warning", "-warning")
            row.query_one(".note", Static).update(Text(note), layout=False)

    def severity_of(self, path: str) -> str:
        """The highlight a field shows now ("error", "warning" or "")."""
        label = self.row(path).query_one(Label)
        return "error" if label.has_class("-error") else "warning" if label.has_class("-warning") else ""

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
