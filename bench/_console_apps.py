"""The apps the console benches run in a pty: a bare Textual app (the baseline) and the console
fed with fixed data (no Ray): `python bench/_console_apps.py bare|idle|fleet NODES [HZ]`."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import ClassVar

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from textual.app import App, ComposeResult  # noqa: E402
from textual.binding import Binding, BindingType  # noqa: E402
from textual.widgets import Footer, Static  # noqa: E402


class Bare(App[None]):
    """What every Textual app pays: a static line and a footer. Its palette key is labelled
    "Commands" like the console's, so both benches stop on the same footer text."""

    BINDINGS: ClassVar[list[BindingType]] = [Binding("ctrl+p", "command_palette", "Commands", show=False)]

    def compose(self) -> ComposeResult:
        yield Static("bare-app-ready")
        yield Footer()


def console(mode: str, nodes: int, hz: float):
    import tempfile

    from backend.settings import Settings
    from console.app import UltraConsoleApp
    from console.messages import MetricsArrived, RunStateChanged, SnapshotArrived

    class Fed(UltraConsoleApp):
        """The console with its views on data a telemetry worker would post, at `hz`."""

        CSS_PATH = str(Path(sys.modules[UltraConsoleApp.__module__].__file__).with_name("app.tcss"))
        phase = 0

        def on_mount(self) -> None:
            from backend.demo.sample_run import JOB, T0, metrics
            from console.messages import RunStatus

            self.action_show_view("run")
            if mode == "fleet":
                self.post_message(RunStateChanged(RunStatus(JOB, "RUNNING", started_at=T0, simulated=True)))
                self.post_message(MetricsArrived(metrics()))
                self._tick()
                self.set_interval(1.0 / hz, self._tick)

        def _tick(self) -> None:
            from backend.demo.sample_run import snapshot

            self.phase += 1
            self.post_message(SnapshotArrived(snapshot(nodes, 8, phase=self.phase)))

    state = Path(tempfile.mkdtemp(prefix="uc-bench-"))
    return Fed(
        Settings(state_dir=state, address="http://127.0.0.1:9"),
        start_workers=False,
        watchdog=False,
        preview_run_id="260101-120000-000",
    )


if __name__ == "__main__":
    kind = sys.argv[1]
    if kind == "bare":
        Bare().run()
    else:
        console(
            kind,
            int(sys.argv[2]) if len(sys.argv) > 2 else 16,
            float(sys.argv[3]) if len(sys.argv) > 3 else 1.0,
        ).run()
