"""The Doctor screen (D in the plan view): doctor's lines drawn from its worker's messages, the verdict on
top; against an unreachable dashboard the dashboard's line names its fix and the node checks are skipped."""

from __future__ import annotations

import pytest
from textual.app import App
from textual.widgets import Log, Static
from waiting import until

from backend.demo.local_cluster import free_port
from backend.plan.spec import build_spec
from backend.settings import Settings
from console.widgets.doctor_screen import DoctorScreen

pytestmark = pytest.mark.asyncio


class _Host(App[None]):
    def __init__(self, address: str) -> None:
        super().__init__()
        self.settings = Settings(address=address)


async def test_the_doctor_screen_shows_each_check_with_its_fix() -> None:
    app = _Host(f"http://127.0.0.1:{free_port()}")
    async with app.run_test(size=(160, 40)) as pilot:
        screen = DoctorScreen(build_spec("nemotron-3-ultra-550b-a55b-4layer"))
        await app.push_screen(screen)

        def done() -> bool:
            return not screen.running and "verdict:" in str(
                screen.query_one("#doctor-verdict", Static).render()
            )

        await until(pilot, done, "the doctor's verdict", 30)
        lines = screen.query_one(Log).lines
        dashboard = next(ln for ln in lines if ln.split()[1:2] == ["dashboard"])
        assert dashboard.lstrip().startswith("FIX") and "fix: start Ray with its dashboard" in dashboard
        assert any("SKIP clock" in ln for ln in lines)
        assert "1 to fix" in str(screen.query_one("#doctor-verdict", Static).render())
        await pilot.press("escape")
        assert not isinstance(app.screen, DoctorScreen)
