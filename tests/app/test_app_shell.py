"""Pilot tests of the app shell: views, Esc, help, palette, dashboard banner, keymap, density."""

from __future__ import annotations

from app_helpers import make_app
from rich.console import Group
from textual.command import CommandList, CommandPalette
from textual.widgets import ContentSwitcher, Static
from waiting import until

from backend.settings import load_settings
from backend.severity import Severity
from console.app import StateLine
from console.messages import DashboardBack, DashboardLost, HistoryProgress, Notice
from console.widgets.help_screen import HelpScreen
from console.widgets.layout_form import LayoutForm


def _current(app) -> str:
    return app.query_one(ContentSwitcher).current


async def test_views_switch_on_digits_and_tab(tmp_path):
    app = make_app(tmp_path)
    async with app.run_test(size=(120, 40)) as pilot:
        assert _current(app) == "plan"
        for key, name in (("2", "run"), ("3", "logs"), ("4", "events"), ("1", "plan")):
            await pilot.press(key)
            assert _current(app) == name, key
        await pilot.press("tab")
        assert _current(app) == "run"
        await pilot.press("tab", "tab", "tab")
        assert _current(app) == "plan"
        await pilot.press("shift+tab")
        assert _current(app) == "events"
        assert " 4 Events " in str(app.query_one(StateLine).content)


async def test_escape_leaves_field_then_goes_back(tmp_path):
    app = make_app(tmp_path)
    async with app.run_test(size=(120, 40)) as pilot:
        await pilot.press("4", "1")
        await pilot.press("down", "down")  # into the form
        form = app.query_one(LayoutForm)
        assert app.focused is form and form.current_path == "cluster.nodes"
        await pilot.press("2")  # typed into the field, not a view switch
        assert _current(app) == "plan"
        await pilot.press("backspace", "escape")
        assert app.focused is app.query_one("#plan")
        await pilot.press("escape")
        assert _current(app) == "events"


async def test_help_lists_keys_and_ssh_tips(tmp_path):
    app = make_app(tmp_path, keys={"plan.launch": "ctrl+l"})
    async with app.run_test(size=(120, 40)) as pilot:
        await pilot.press("question_mark")
        await pilot.pause()
        assert isinstance(app.screen, HelpScreen)
        content = app.screen.query_one("VerticalScroll > Static", Static).content
        assert isinstance(content, Group)
        text = str(content.renderables[-1])
        for tip in ("COLORTERM", "escape-time", "Shift", "OSC 52"):
            assert tip in text
        await pilot.press("escape")
        assert not isinstance(app.screen, HelpScreen)


async def test_palette_offers_every_action_and_runs_it(tmp_path):
    app = make_app(tmp_path)
    async with app.run_test(size=(120, 40)) as pilot:
        await pilot.press("ctrl+p")
        await pilot.pause()
        assert isinstance(app.screen, CommandPalette)
        await pilot.press(*"Events")
        commands = app.screen.query_one(CommandList)
        await until(
            pilot,
            lambda: (
                commands.highlighted is not None
                and "Events" in str(commands.get_option_at_index(commands.highlighted).prompt)
            ),
            "the palette to offer Events",
        )
        await pilot.press("enter")
        await pilot.pause()
        assert not isinstance(app.screen, CommandPalette)
        assert _current(app) == "events"


async def test_palette_provider_lists_keymap_actions(tmp_path):
    from console import keymap
    from console.palette import HIDDEN, KeymapCommands

    app = make_app(tmp_path, readonly=True)
    async with app.run_test(size=(120, 40)):
        provider = KeymapCommands(app.screen)
        ids = [entry[0] for entry in provider._entries()]
        expected = [s.id for s in keymap.specs() if s.id not in HIDDEN and not s.mutates]
        assert ids == expected
        assert "plan.launch" not in ids and "plan.preflight" in ids


async def test_dashboard_lost_banner_then_recovered(tmp_path):
    app = make_app(tmp_path)
    async with app.run_test(size=(120, 40)) as pilot:
        banner = app.query_one("#banner", Static)
        assert not banner.display or not banner.has_class("-shown")
        app.post_message(DashboardLost("connection refused at http://127.0.0.1:8265"))
        await pilot.pause()
        assert banner.has_class("-shown") and banner.display
        assert "connection refused" in str(banner.content)
        assert "LOST" in str(app.query_one(StateLine).content)
        await pilot.press("4")  # still responding
        assert _current(app) == "events"
        app.post_message(DashboardBack())
        await pilot.pause()
        assert not banner.has_class("-shown")
        assert "LOST" not in str(app.query_one(StateLine).content)


async def test_notice_becomes_toast(tmp_path):
    app = make_app(tmp_path)
    async with app.run_test(size=(120, 40)) as pilot:
        app.post_message(Notice("hello operator", Severity.WARNING))
        await pilot.pause()
        assert any(n.message == "hello operator" and n.severity == "warning" for n in app._notifications)


async def test_keymap_remap_from_settings(tmp_path):
    app = make_app(tmp_path, keys={"app.view_events": "e", "no.such.binding": "x"})
    async with app.run_test(size=(120, 40)) as pilot:
        assert any("no.such.binding" in n.message for n in app._notifications)
        await pilot.press("e")
        assert _current(app) == "events"
        await pilot.press("4")  # the old key no longer does it
        assert _current(app) == "events"
        await pilot.press("1")
        await pilot.press("4")
        assert _current(app) == "plan"


async def test_every_scope_remappable_from_the_config_file(tmp_path, monkeypatch):
    """Keys of the views mounted after the first frame (run, logs) are remapped like the app's own."""
    cfg = tmp_path / "config.toml"
    cfg.write_text('[keys]\n"logs.search" = "ctrl+f"\n"run.abort" = "ctrl+k"\n"no.such.binding" = "x"\n')
    monkeypatch.setenv("ULTRA_CONSOLE_CONFIG", str(cfg))
    app = make_app(tmp_path, load_settings(state_dir=tmp_path))
    async with app.run_test(size=(120, 40)) as pilot:
        problems = [n.message for n in app._notifications if "key binding" in n.message]
        assert len(problems) == 1 and "'no.such.binding'" in problems[0], problems
        await pilot.press("3")
        prompt = app.query_one("#logs-prompt")
        await pilot.press("slash")  # the old key no longer searches
        assert not prompt.has_class("visible")
        await pilot.press("ctrl+f")
        await until(pilot, lambda: prompt.has_class("visible") and app.focused is prompt, "search prompt")
        await pilot.press("escape", "2")
        assert _current(app) == "run"
        await pilot.press("A")  # the old key no longer aborts
        assert not any("nothing to abort" in n.message for n in app._notifications)
        await pilot.press("ctrl+k")
        await until(
            pilot,
            lambda: any("nothing to abort" in n.message for n in app._notifications),
            "the abort action on ctrl+k",
        )


async def test_density_class_follows_size(tmp_path):
    app = make_app(tmp_path)
    async with app.run_test(size=(80, 24)) as pilot:
        assert app.has_class("-compact") and not app.has_class("-wide")
        await pilot.resize_terminal(250, 70)
        await pilot.pause()
        assert not app.has_class("-compact") and app.has_class("-wide")
        checks, numbers = app.query_one("#plan-checks"), app.query_one("#plan-numbers")
        assert checks.region.y == numbers.region.y and checks.region.x < numbers.region.x  # side by side
        await pilot.resize_terminal(120, 40)
        await pilot.pause()
        assert not app.has_class("-compact") and not app.has_class("-wide")


async def test_quit_key_exits(tmp_path):
    app = make_app(tmp_path)
    async with app.run_test(size=(120, 40)) as pilot:
        await pilot.press("q")
        await pilot.pause()
    assert app.return_code == 0


async def test_readonly_hides_every_mutating_key(tmp_path):
    from console import keymap

    app = make_app(tmp_path, readonly=True)
    async with app.run_test(size=(120, 40)) as pilot:
        mutating = [s for s in keymap.specs() if s.mutates]
        assert {s.id for s in mutating} >= {"plan.launch"}
        for spec in mutating:
            scope = keymap.scope_of(spec.id)
            assert scope is not None, spec.id
            if scope == "prepare":  # a screen of the plan view, not a view
                from backend.plan.spec import build_spec
                from console.widgets.prepare_screen import PrepareScreen

                app.push_screen(PrepareScreen(build_spec(), app.view("plan")))
                await pilot.pause()
                assert spec.key not in app.screen.active_bindings, spec.id
                app.pop_screen()
                continue
            await pilot.press({"plan": "1", "run": "2", "logs": "3", "events": "4"}[scope])
            app.view(scope).focus()
            await pilot.pause()
            assert spec.key not in app.screen.active_bindings, spec.id
        assert "READ-ONLY" in str(app.query_one(StateLine).content)


async def test_ctrl_c_hints_at_the_quit_key(tmp_path):
    app = make_app(tmp_path)
    async with app.run_test(size=(120, 40)) as pilot:
        await pilot.press("ctrl+c")
        await pilot.pause()
        assert any("to quit" in n.message for n in app._notifications)


async def test_history_progress_shows_in_the_state_line(tmp_path):
    app = make_app(tmp_path)
    async with app.run_test(size=(120, 40)) as pilot:
        app.post_message(HistoryProgress("raysubmit_1", 120_000, done=False))
        await pilot.pause()
        assert "reading history: 120,000 lines" in str(app.query_one(StateLine).content)
        app.post_message(HistoryProgress("raysubmit_1", 150_000, done=True))
        await pilot.pause()
        assert "reading history" not in str(app.query_one(StateLine).content)


async def test_workers_start_even_if_the_key_bar_never_draws(tmp_path, monkeypatch):
    """The key bar tells the app its first frame is out; should it never, a timer does."""
    from console import app as app_module
    from console.widgets.key_bar import KeyBar

    monkeypatch.setattr(app_module, "FIRST_FRAME_FALLBACK_S", 0.3)
    monkeypatch.setattr(KeyBar, "on_mount", lambda self: None)
    app = make_app(tmp_path)
    async with app.run_test(size=(120, 40)) as pilot:
        assert not app._after_first_frame_done
        await until(pilot, lambda: app._after_first_frame_done, "the fallback timer to start the workers", 5)
