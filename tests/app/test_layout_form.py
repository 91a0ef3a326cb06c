"""The one-widget layout form and the one-widget key bar, driven by Pilot in small host apps."""

from __future__ import annotations

from typing import ClassVar

from form_rows import form_row
from textual.app import App, ComposeResult
from textual.binding import Binding, BindingType

from console.widgets.key_bar import KeyBar
from console.widgets.layout_form import FIELDS, VARIANT, LayoutForm

VALUES = {f.path: str(i + 1) for i, f in enumerate(FIELDS)} | {"run.mode": "normal"}
VARIANTS = [("alpha (preset)", "preset:alpha"), ("beta \x1b[31m(checkpoint)", "checkpoint:beta")]


class FormHost(App[None]):
    BINDINGS: ClassVar[list[BindingType]] = [
        Binding("L", "launch", "Launch"),
        Binding("p", "preflight", "Preflight"),
    ]

    def __init__(self) -> None:
        super().__init__()
        self.edits: list[tuple[str, str]] = []
        self.picked: list[str] = []
        self.actions: list[str] = []

    def action_launch(self) -> None:
        self.actions.append("launch")

    def action_preflight(self) -> None:
        self.actions.append("preflight")

    def compose(self) -> ComposeResult:
        yield LayoutForm(VALUES, VARIANTS, "preset:alpha")

    def on_mount(self) -> None:
        self.query_one(LayoutForm).focus()

    def on_layout_form_edited(self, event: LayoutForm.Edited) -> None:
        self.edits.append((event.path, event.text))

    def on_layout_form_variant_picked(self, event: LayoutForm.VariantPicked) -> None:
        self.picked.append(event.key)

    def key_down(self) -> None:  # the plan view's keymap moves the cursor; here a plain key handler
        self.query_one(LayoutForm).cursor_down()


async def test_typing_edits_the_cursor_row_in_place():
    app = FormHost()
    async with app.run_test(size=(80, 24)) as pilot:
        form = app.query_one(LayoutForm)
        form.move_to("train.tp")
        await pilot.press("backspace", "4", "2")
        assert form_row(form, "train.tp").value == "42"
        assert app.edits[-1] == ("train.tp", "42")
        await pilot.press("home", "9", "end", "left", "delete")
        assert form_row(form, "train.tp").value == "94"
        await pilot.press("left", "ctrl+k")
        assert form_row(form, "train.tp").value == "9"
        await pilot.press("ctrl+u")
        assert form_row(form, "train.tp").value == ""
        await pilot.press("1", "e", "3")
        assert form_row(form, "train.tp").value == "1e3"  # a number's characters are text
        await pilot.press("L", "x", "p")  # a binding's key reaches its action; no value holds an x
        assert form_row(form, "train.tp").value == "1e3" and app.actions == ["launch", "preflight"]
        assert form_row(form, "train.pp").value == VALUES["train.pp"]  # other rows untouched


async def test_enter_moves_down_and_choice_rows_cycle():
    app = FormHost()
    async with app.run_test(size=(80, 24)) as pilot:
        form = app.query_one(LayoutForm)
        form.move_to("batch.num_rollout")
        await pilot.press("enter")
        assert form.current_path == "run.mode"
        await pilot.press("right")
        assert form_row(form, "run.mode").value == "debug_minimal"
        assert app.edits[-1] == ("run.mode", "debug_minimal")
        await pilot.press("space")
        assert form_row(form, "run.mode").value == "normal"
        await pilot.press("d")  # type-ahead: the first choice starting with d
        assert form_row(form, "run.mode").value == "debug_minimal"
        await pilot.press("9")  # no choice starts with 9: nothing changes, and no binding fires either
        assert form_row(form, "run.mode").value == "debug_minimal" and app.actions == []
        await pilot.press("p")  # a binding's key on a choice row is the binding's, not a type-ahead
        assert form_row(form, "run.mode").value == "debug_minimal" and app.actions == ["preflight"]


async def test_variant_row_cycles_and_shows_no_escape():
    app = FormHost()
    async with app.run_test(size=(80, 24)) as pilot:
        form = app.query_one(LayoutForm)
        assert form.current_path == VARIANT
        await pilot.press("right")
        assert app.picked == ["checkpoint:beta"] and form_row(form, VARIANT).value == "beta (checkpoint)"
        line = form.render_line(0)
        assert "beta" in line.text and all("\x1b" not in seg.text for seg in line)
        await pilot.press("left")
        assert app.picked[-1] == "preset:alpha"
        await pilot.press("B")  # type-ahead on the labels
        assert app.picked[-1] == "checkpoint:beta"
        await pilot.press("b")  # the only one starting with b: it stays
        assert form_row(form, VARIANT).value == "beta (checkpoint)"


async def test_marks_highlight_rows_and_clicks_move_the_cursor():
    app = FormHost()
    async with app.run_test(size=(100, 24)) as pilot:
        form = app.query_one(LayoutForm)
        form.mark(
            {
                "cluster.nodes": ("error", "does not\n divide"),
                "train.ep": ("warning", "wide"),
                "train.cp": ("info", "fine"),
            }
        )
        assert (
            form.severity_of("cluster.nodes") == "error"
            and form_row(form, "cluster.nodes").note == "does not divide"
        )
        assert form.severity_of("train.ep") == "warning" and form.severity_of("train.cp") == ""
        assert "does not divide" in form.render_line(1).text
        await pilot.click(LayoutForm, offset=(2, 3))
        assert form.current_path == FIELDS[2].path


class KeyHost(App[None]):
    BINDINGS: ClassVar[list[BindingType]] = [
        Binding("L", "launch", "Launch"),
        Binding("p", "preflight", "Preflight"),
        Binding("q", "quit", "Quit"),
        Binding("x", "hidden", "Hidden", show=False),
        Binding("ctrl+p", "command_palette", "Commands", show=False),
    ]
    allowed = True
    launched = 0

    def compose(self) -> ComposeResult:
        yield KeyBar()

    def check_action(self, action: str, parameters: tuple[object, ...]) -> bool | None:
        return None if action == "launch" and not self.allowed else True

    def action_launch(self) -> None:
        self.launched += 1


async def test_key_bar_draws_keys_dims_refused_ones_and_keeps_the_palette():
    app = KeyHost()
    async with app.run_test(size=(100, 5)) as pilot:
        bar = app.query_one(KeyBar)
        line = bar.render().plain
        assert "L Launch" in line and "p Preflight" in line and "Hidden" not in line
        assert line.rstrip().endswith("Commands")
        app.allowed = False
        app.refresh_bindings()
        await pilot.pause()
        launch = next(span for span in bar.render().spans if span.start <= 1 < span.end)
        assert "dim" in str(launch.style) or launch.style != bar.get_component_rich_style("key-bar--key")
        await pilot.click(KeyBar, offset=(1, 0))
        assert app.launched == 0  # refused keys do nothing when clicked either
        app.allowed = True
        app.refresh_bindings()
        await pilot.pause()
        await pilot.click(KeyBar, offset=(1, 0))
        assert app.launched == 1


async def test_key_bar_ends_in_an_ellipsis_when_narrow():
    app = KeyHost()
    async with app.run_test(size=(34, 5)):
        line = app.query_one(KeyBar).render().plain
        assert "…" in line and line.rstrip().endswith("Commands") and len(line) <= 34
