"""The dead run's keys, in a replay of a run that died: Enter in the Run view opens the Logs view at the
cause's line (the diagnosis panel's `line`), and an Events entry cut at the terminal's width opens whole."""

from __future__ import annotations

from pathlib import Path

from textual.widgets import DataTable, Static
from waiting import until

from backend.settings import Settings
from backend.signals.replay import ReplaySession, detect_source
from console.app import UltraConsoleApp
from console.views.events import EventsView
from console.views.logs import LogsView
from console.views.run import RunView
from console.widgets.text_modal import TextModal

STEPS = [
    f"(MegatronTrainRayActor pid=4101, ip=10.0.0.3) [2026-03-02 10:00:{n:02d}] log_utils.py:443 - step {n}: "
    f"{{'train/loss': 0.5, 'train/ppo_kl': 0.001, 'train/grad_norm': 0.2}}"
    for n in range(6)
]
OOM = (
    "(MegatronTrainRayActor pid=4101, ip=10.0.0.3) torch.OutOfMemoryError: CUDA out of memory. Tried to "
    "allocate 2.10 GiB. GPU 3 has a total capacity of 139.80 GiB of which 1.02 GiB is free. Process 4101 has "
    "138.77 GiB memory in use. Of the allocated memory 131.20 GiB is allocated by PyTorch, and 5.10 GiB is "
    "reserved by PyTorch but unallocated."
)
NOISE = [
    f"(RolloutManager pid=5100) [2026-03-02 10:00:0{n}] rollout.py:88 - generating batch {n}"
    for n in range(9)
]


def _replay(tmp_path: Path) -> UltraConsoleApp:
    path = tmp_path / "job-driver.log"
    lines = [
        *STEPS,
        *NOISE,
        "(MegatronTrainRayActor pid=4101, ip=10.0.0.3) Traceback (most recent call last):",
        '(MegatronTrainRayActor pid=4101, ip=10.0.0.3)   File "/root/miles/miles/backends/megatron_utils/'
        'actor.py", line 571, in train',
        "(MegatronTrainRayActor pid=4101, ip=10.0.0.3)     loss = self.model(batch)",
        OOM,
        *NOISE,
    ]
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    session = ReplaySession(detect_source(path), tmp_path / "spool")
    return UltraConsoleApp(Settings(state_dir=tmp_path / "state"), replay=session, watchdog=False)


async def test_enter_goes_to_the_causes_line_and_an_event_opens_whole(tmp_path: Path) -> None:
    app = _replay(tmp_path)
    async with app.run_test(size=(80, 24)) as pilot:
        await pilot.press("2")
        run = app.query_one(RunView)
        panel = run.query_one("#run-diagnosis", Static)
        await until(pilot, lambda: "CUDA out of memory" in str(panel.content), "the diagnosis panel")
        session = app.session
        assert session is not None
        await until(pilot, lambda: session.store is not None and len(session.store) >= 28, "the whole log")
        run.focus()
        await pilot.press("enter")
        await until(pilot, lambda: app.current_view == "logs", "the Logs view")
        logs = app.query_one(LogsView)
        store = session.store
        assert store is not None
        await until(
            pilot,
            lambda: "CUDA out of memory" in store.line(logs.lines.cursor).message,
            "the cursor on the cause's line",
        )
        assert (
            logs.lines.cursor == len(STEPS) + len(NOISE) + 3
        )  # the OOM line itself, not the traceback's head

        await pilot.press("4")
        events = app.query_one(EventsView)
        await until(pilot, lambda: any(a.id == "cuda-oom" for a in events.alerts), "the cause in Events")
        table = events.query_one("#alerts", DataTable)
        table.focus()
        await pilot.pause()
        await pilot.press("enter")
        await until(pilot, lambda: isinstance(app.screen, TextModal), "the entry opened")
        body = str(app.screen.query_one("#text-body", Static).content)
        assert "5.10 GiB is reserved" in OOM and "GPU 3" in body and "2.10 GiB" in body
        assert "reserved by PyTorch but unallocated" in body  # the sample whole, never cut at 80 columns
        await pilot.press("escape")
        await until(pilot, lambda: not isinstance(app.screen, TextModal), "the modal closed")
