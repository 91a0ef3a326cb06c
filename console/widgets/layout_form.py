"""The layout form: one widget drawing a row per spec field (label, value, note), edited in place.

One widget rather than an Input per field: each widget costs style and layout work on mount and on
every focus move, and the form is on the first frame. The form holds text, not numbers: every
keystroke posts `LayoutForm.Edited(path, text)` and the plan view asks backend to rebuild and check
the spec, then calls `mark(...)` with what backend said; the rows a finding names are highlighted
with its message beside them. Row 0 picks the variant (`VariantPicked`); choice rows cycle with
Left/Right, Space or Enter. Up/Down belong to the plan view's keymap (`cursor_down`/`cursor_up`).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, ClassVar

from rich.segment import Segment
from rich.style import Style
from textual import events
from textual.geometry import Size
from textual.message import Message
from textual.strip import Strip
from textual.widget import Widget

from backend.plan.run_modes import RUN_MODES
from backend.sanitize import one_line


@dataclass(frozen=True)
class FormField:
    path: str  # dotted RunSpec path (what backend.plan.spec.apply_overrides takes)
    label: str
    choices: tuple[str, ...] = ()  # non-empty: cycled, not typed


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
    FormField("run.mode", "Mode", RUN_MODES),
)
VARIANT = "variant"  # row 0's path
LABEL_W = 15
VALUE_W = 14
MAX_TEXT = 40  # characters a value may hold (a layout number never needs more)
VALUE_CHARS = frozenset("0123456789.-+eE_")  # what a layout value is typed with (ints, 0.75, 1e-3)
EDIT_KEYS = frozenset(
    ("backspace", "delete", "left", "right", "home", "ctrl+a", "end", "ctrl+e", "ctrl+u", "ctrl+k")
)
CYCLE_KEYS = frozenset(("left", "right", "space", "enter"))  # a choice row's own keys


class LayoutForm(Widget, can_focus=True):
    """The variant row and one row per field; the cursor row is edited when the form has focus."""

    COMPONENT_CLASSES: ClassVar[set[str]] = {
        "layout-form--label",
        "layout-form--value",
        "layout-form--cursor",
        "layout-form--caret",
        "layout-form--error",
        "layout-form--warning",
        "layout-form--note-error",
        "layout-form--note-warning",
        "layout-form--note",
    }
    DEFAULT_CSS = """
    LayoutForm { height: auto; width: 1fr; }
    LayoutForm > .layout-form--label { color: $text-muted; }
    LayoutForm > .layout-form--value { background: $surface; }
    LayoutForm > .layout-form--cursor { background: $boost; text-style: bold; }
    LayoutForm:focus > .layout-form--cursor { background: $accent 30%; text-style: bold; }
    LayoutForm > .layout-form--caret { text-style: reverse; }
    LayoutForm > .layout-form--error { background: $error 30%; }
    LayoutForm > .layout-form--warning { background: $warning 20%; }
    LayoutForm > .layout-form--note { color: $text-muted; }
    LayoutForm > .layout-form--note-error { color: $error; }
    LayoutForm > .layout-form--note-warning { color: $warning; }
    """

    class Edited(Message):
        """The operator changed a field's text."""

        def __init__(self, path: str, text: str) -> None:
            super().__init__()
            self.path = path
            self.text = text

    class VariantPicked(Message):
        """The operator moved the variant row to another variant (by key)."""

        def __init__(self, key: str) -> None:
            super().__init__()
            self.key = key

    def __init__(
        self,
        values: Mapping[str, str] | None = None,
        variants: Sequence[tuple[str, str]] = (),
        variant: str | None = None,
        on_commit: Callable[[], None] | None = None,
        **kwargs: Any,
    ) -> None:
        """values: path -> text shown first; variants: (label, key) choices of row 0; on_commit: called when a
        binding's key arrives while the form is edited (the view checks the pending edit at once)."""
        super().__init__(**kwargs)
        self._on_commit = on_commit
        self._texts: dict[str, str] = {f.path: "" for f in FIELDS} | dict(values or {})
        self._notes: dict[str, tuple[str, str]] = {}
        self._variants: list[tuple[str, str]] = [(one_line(label), key) for label, key in variants]
        self._variant = variant
        self.cursor = 0  # row: 0 = variant, i + 1 = FIELDS[i]
        self.caret = len(self._texts.get(FIELDS[0].path, ""))

    # ------------------------------------------------------------------ what the view reads and sets

    @property
    def current_path(self) -> str:
        return VARIANT if self.cursor == 0 else FIELDS[self.cursor - 1].path

    def severity_of(self, path: str) -> str:
        """The highlight a row shows now ("error", "warning" or "")."""
        severity = self._notes.get(path, ("", ""))[0]
        return severity if severity in ("error", "warning") else ""

    def set_variants(self, variants: Sequence[tuple[str, str]], current: str | None) -> None:
        shown = [(one_line(label), key) for label, key in variants]
        if shown != self._variants or current != self._variant:
            self._variants, self._variant = shown, current
            self.refresh()

    def load(self, values: Mapping[str, str]) -> None:
        """Show `values` (path -> text) without treating them as operator edits."""
        texts = {f.path: values.get(f.path, "") for f in FIELDS}
        if texts != self._texts:
            self._texts = texts
            self._park_caret()
            self.refresh()

    def mark(self, notes: Mapping[str, tuple[str, str]]) -> None:
        """notes: path -> (severity "error"|"warning"|"info", one-line note); others are cleared."""
        notes = {path: (sev, one_line(note)) for path, (sev, note) in notes.items()}
        if notes != self._notes:
            self._notes = notes
            self.refresh()

    def move_to(self, path: str) -> None:
        """Put the cursor on `path`'s row (VARIANT for row 0)."""
        rows = [VARIANT, *(f.path for f in FIELDS)]
        self._set_cursor(rows.index(path))

    def cursor_down(self) -> None:
        self._set_cursor(min(self.cursor + 1, len(FIELDS)))

    def cursor_up(self) -> None:
        self._set_cursor(max(self.cursor - 1, 0))

    # ------------------------------------------------------------------ editing

    def _field(self) -> FormField | None:
        return None if self.cursor == 0 else FIELDS[self.cursor - 1]

    def _set_cursor(self, row: int) -> None:
        if row != self.cursor:
            self.cursor = row
            self._park_caret()
            self.refresh()

    def _park_caret(self) -> None:
        field = self._field()
        self.caret = len(self._texts[field.path]) if field is not None else 0

    def _set_text(self, text: str, caret: int) -> None:
        field = self._field()
        if field is None:
            return
        text = text[:MAX_TEXT]
        self.caret = max(0, min(caret, len(text)))
        if text != self._texts[field.path]:
            self._texts[field.path] = text
            self.post_message(self.Edited(field.path, text))
        self.refresh()

    def _cycle(self, step: int) -> None:
        field = self._field()
        if field is None:
            keys = [key for _, key in self._variants]
            if not keys:
                return
            at = keys.index(self._variant) if self._variant in keys else -1
            self._variant = keys[(at + step) % len(keys)]
            self.refresh()
            self.post_message(self.VariantPicked(self._variant))
            return
        choices = field.choices
        text = self._texts[field.path]
        at = choices.index(text) if text in choices else -1
        self._set_text(choices[(at + step) % len(choices)], 0)

    def _jump(self, char: str) -> None:
        """On a choice row: the next choice (after the current, wrapping) whose label starts with `char`."""
        field = self._field()
        labels = [label for label, _ in self._variants] if field is None else list(field.choices)
        current = self._variant if field is None else self._texts[field.path]
        keys = [key for _, key in self._variants] if field is None else labels
        at = keys.index(current) if current in keys else -1
        for step in range(1, len(keys) + 1):
            i = (at + step) % len(keys)
            if labels[i][:1].lower() == char.lower():
                if i != at:
                    self._cycle(i - at)
                return

    def takes(self, event: events.Key) -> bool:
        """The keys this form edits with (console/key_order.py's rule): on a typed row a number's characters
        and the line-editing keys, on a choice row the cycling keys and an unbound letter (type-ahead);
        every other key is a binding's (launch, preflight, Up/Down, ...) and commits the form first."""
        field = self._field()
        key = event.key
        if field is None or field.choices:
            if key in CYCLE_KEYS:
                return True
            return bool(event.is_printable and event.character) and not self._bound(key)
        if key == "enter":
            return True
        if event.is_printable and event.character:
            return event.character in VALUE_CHARS
        return key in EDIT_KEYS

    def commit(self) -> None:
        """The text typed so far is checked now (the view's rebuild waits a moment between keystrokes)."""
        if self._on_commit is not None:
            self._on_commit()

    async def _on_key(self, event: events.Key) -> None:
        if not self.takes(event):
            return  # bubbles on to the bindings
        event.stop()
        event.prevent_default()
        field = self._field()
        key = event.key
        if field is None or field.choices:
            if key in CYCLE_KEYS:
                self._cycle(-1 if key == "left" else 1)
            elif event.character:
                self._jump(event.character)  # type-ahead, as in a list
        elif key == "enter":
            self.cursor_down()
        elif event.is_printable and event.character:
            text = self._texts[field.path]
            self._set_text(text[: self.caret] + event.character + text[self.caret :], self.caret + 1)
        else:
            self._edit_key(key, self._texts[field.path])

    def _bound(self, key: str) -> bool:
        """A printable key a binding of the view or the app claims: on a choice row it is that binding's,
        never a type-ahead jump (on a typed row only a number's characters are text)."""
        return key in self.screen.active_bindings

    def _edit_key(self, key: str, text: str) -> None:
        """Line-editing keys on a typed row (EDIT_KEYS: what an Input answers to)."""
        caret = self.caret
        if key == "backspace":
            if caret:
                self._set_text(text[: caret - 1] + text[caret:], caret - 1)
        elif key == "delete":
            self._set_text(text[:caret] + text[caret + 1 :], caret)
        elif key == "left":
            self._set_text(text, caret - 1)
        elif key == "right":
            self._set_text(text, caret + 1)
        elif key in ("home", "ctrl+a"):
            self._set_text(text, 0)
        elif key in ("end", "ctrl+e"):
            self._set_text(text, len(text))
        elif key == "ctrl+u":
            self._set_text(text[caret:], 0)
        elif key == "ctrl+k":
            self._set_text(text[:caret], caret)

    def on_click(self, event: events.Click) -> None:
        if 0 <= event.y <= len(FIELDS):
            self._set_cursor(event.y)
            self.focus()

    def on_focus(self) -> None:
        self.refresh()

    def on_blur(self) -> None:
        self.refresh()

    # ------------------------------------------------------------------ drawing

    def get_content_height(self, container: Size, viewport: Size, width: int) -> int:
        return len(FIELDS) + 1

    def _style(self, name: str) -> Style:
        return self.get_component_rich_style(f"layout-form--{name}", partial=True)

    def render_line(self, y: int) -> Strip:
        if y > len(FIELDS):
            return Strip.blank(self.size.width, self.rich_style)
        if y == 0:
            return self._variant_line()
        field = FIELDS[y - 1]
        severity, note = self._notes.get(field.path, ("", ""))
        marked = severity in ("error", "warning")
        label_style, cell = self._field_styles(y, severity if marked else "")
        text = self._texts.get(field.path, "")
        label = Segment(field.label[: LABEL_W - 1].ljust(LABEL_W), label_style)
        value = self._choice_value(text, y, cell) if field.choices else self._text_value(text, y, cell)
        segments = [label, *value, *self._note(note, f"note-{severity}" if marked else "note")]
        return Strip(segments).crop_extend(0, self.size.width, self.rich_style)

    def _variant_line(self) -> Strip:
        """Row 0: the variant picked (‹between marks› while it is the focused row)."""
        base, width = self.rich_style, self.size.width
        value = next((lbl for lbl, key in self._variants if key == self._variant), "(no variants)")
        value_w = max(1, width - LABEL_W)
        shown = f"‹{value}›" if self.has_focus and self.cursor == 0 else f" {value}"
        shown = shown[:value_w].ljust(value_w)
        segments = [Segment("Variant".ljust(LABEL_W), base + self._style("label"))]
        cell = self._style("cursor") if self.cursor == 0 else Style()
        segments.append(Segment(shown, base + cell))
        return Strip(segments, width).crop_extend(0, width, base)

    def _field_styles(self, y: int, severity: str) -> tuple[Style, Style]:
        """(label, cell) styles of row `y`: tinted by an error or warning; the cursor marks the cell."""
        base = self.rich_style
        label_style = base + self._style("label")
        cell = base + self._style("value")
        if severity:
            label_style = base + self._style(severity) + Style(bold=True)
            cell = cell + self._style(severity)
        if self.cursor == y:
            cell = cell + self._style("cursor")
        return label_style, cell

    def _choice_value(self, text: str, y: int, cell: Style) -> list[Segment]:
        body = f"‹{text}›" if self.has_focus and self.cursor == y else f" {text}"
        return [Segment(body[:VALUE_W].ljust(VALUE_W), cell)]

    def _text_value(self, text: str, y: int, cell: Style) -> list[Segment]:
        """A text field's visible window, scrolled to keep the caret in it; the caret drawn while focused."""
        inner = VALUE_W - 2
        start = max(0, self.caret - inner + 1) if self.cursor == y else 0
        visible = text[start : start + inner]
        if not (self.has_focus and self.cursor == y):
            return [Segment(" ", cell), Segment(visible.ljust(inner) + " ", cell)]
        at = self.caret - start
        caret_char = visible[at] if at < len(visible) else " "
        return [
            Segment(" ", cell),
            Segment(visible[:at], cell),
            Segment(caret_char, cell + self._style("caret")),
            Segment(visible[at + 1 :].ljust(inner - at - 1) + " ", cell),
        ]

    def _note(self, note: str, style: str) -> list[Segment]:
        """The row's note right of the value, cut to the room left (none where there is none)."""
        note_w = self.size.width - LABEL_W - VALUE_W - 1
        if not note or note_w <= 0:
            return []
        base = self.rich_style
        shown = note if len(note) <= note_w else note[: note_w - 1] + "…"
        return [Segment(" ", base), Segment(shown, base + self._style(style))]
