"""Workers against the real Ray dashboard seen through a TCP relay we can cut: the dashboard goes
away -> DashboardLost (banner), comes back -> DashboardBack, with no operator action."""

from __future__ import annotations

import asyncio
import contextlib

import pytest
from app_helpers import MODELS, RUN_ID, PilotApp
from raycluster import free_port
from waiting import until

from backend.settings import Settings
from console.widgets.gpu_fleet import GpuFleet

pytestmark = pytest.mark.ray


class Relay:
    """127.0.0.1:port -> the dashboard; `cut()` closes the listener and every open connection."""

    def __init__(self, target_port: int) -> None:
        self.port = free_port()
        self.target_port = target_port
        self.server: asyncio.AbstractServer | None = None
        self.writers: set[asyncio.StreamWriter] = set()

    async def start(self) -> None:
        self.server = await asyncio.start_server(self._serve, "127.0.0.1", self.port, reuse_address=True)

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            up_r, up_w = await asyncio.open_connection("127.0.0.1", self.target_port)
        except OSError:
            writer.close()
            return
        self.writers |= {writer, up_w}

        async def pipe(src: asyncio.StreamReader, dst: asyncio.StreamWriter) -> None:
            with contextlib.suppress(OSError, asyncio.CancelledError):
                while data := await src.read(65536):
                    dst.write(data)
                    await dst.drain()
            with contextlib.suppress(OSError):
                dst.close()

        await asyncio.gather(pipe(reader, up_w), pipe(up_r, writer))

    async def cut(self) -> None:
        assert self.server is not None
        self.server.close()
        for w in list(self.writers):
            with contextlib.suppress(OSError):
                w.close()
        self.writers.clear()
        await self.server.wait_closed()


async def test_dashboard_lost_then_back_by_itself(ray_cluster, tmp_path):
    relay = Relay(int(ray_cluster.address.rsplit(":", 1)[1]))
    await relay.start()
    app = PilotApp(
        Settings(address=f"http://127.0.0.1:{relay.port}", state_dir=tmp_path),
        watchdog=False,
        preview_run_id=RUN_ID,
        model_dir=str(MODELS),
    )
    try:
        async with app.run_test(size=(120, 40)) as pilot:
            await pilot.press("2")
            fleet = app.query_one(GpuFleet)
            await until(pilot, lambda: len(fleet.rows) >= 3, "a first snapshot through the relay")
            assert app.dashboard_error is None
            await relay.cut()
            await until(pilot, lambda: app.dashboard_error is not None, "the dashboard-lost banner")
            assert app.query_one("#banner").has_class("-shown")
            await pilot.press("3", "2")  # the app keeps responding while the dashboard is gone
            assert app.current_view == "run"
            await relay.start()
            await until(pilot, lambda: app.dashboard_error is None, "recovery without any key", timeout=30)
            assert not app.query_one("#banner").has_class("-shown")
    finally:
        with contextlib.suppress(Exception):
            await relay.cut()
