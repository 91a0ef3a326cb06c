"""`ultra-console replay` with Pilot: the real app, read-only, over a saved miles log (the newest shape and
the 2026-04 shape) and over a `--dump-details` directory. Charts fill, search finds a step, the Events view
holds the alerts the run would have raised, and the rollout cursor (`[` / `]`) moves the charts' mark and the
log together. No cluster: a path needs none.
"""

from __future__ import annotations

import json
import re
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
from app_helpers import PilotApp
from inproc_cli import run_cli
from runhelp import job_reaches
from waiting import until

from backend.demo import sample_log as miles_sample_log
from backend.settings import Settings
from backend.signals.replay import ReplayError, ReplaySession, detect_source
from console.app import UltraConsoleApp
from console.views.events import EventsView
from console.views.logs import LogsView
from console.views.run import RunView
from console.widgets.charts import LineChart

REPO = Path(__file__).resolve().parents[2]
_NEW_BRACKET = re.compile(r"\[(\d{4}-\d\d-\d\d \d\d:\d\d:\d\d)\.\d{3} [^\]]+\]")


def newest_log(path: Path, **kw) -> miles_sample_log.SampleRun:
    return miles_sample_log.write(path, miles_sample_log.SampleRun(rollouts=5, noise_per_rollout=12, **kw))


def april_log(path: Path) -> miles_sample_log.SampleRun:
    """The 2026-04 shape: `[2026-03-02 10:00:05] log_utils.py:443
    - step 6: {...}` (no ms, no process name)."""
    run = newest_log(path)
    path.write_text(_NEW_BRACKET.sub(r"[\1]", path.read_text()))
    return run


def dump_dir(root: Path, rollouts: int = 5) -> Path:
    """A miles `--dump-details` directory: MetricEvents in events/*.jsonl, as the EventLogger writes them."""
    events = root / "dump_details" / "events"
    events.mkdir(parents=True)
    base = datetime(2026, 8, 21, 10, 0, tzinfo=UTC)
    rm, actor = [], []

    def event(t: float, source: dict, rollout: int, metrics: dict) -> str:
        stamp = (base + timedelta(seconds=t)).isoformat()
        return (
            json.dumps(
                {
                    "timestamp": stamp,
                    "source": source,
                    "type": "metric",
                    "rollout_id": rollout,
                    "attempt": 0,
                    "metrics": metrics,
                }
            )
            + "\n"
        )

    rank0 = {"component": "actor", "cell_index": 0, "rank_within_cell": 0}
    for i in range(rollouts):
        t = 60.0 * i
        rm.append(
            event(
                t + 40,
                {"component": "rollout_manager"},
                i,
                {"perf/rollout_time": 31.8 + i, "perf/tokens_per_gpu_per_sec": 13.5 + i, "rollout/step": i},
            )
        )
        actor.append(event(t + 42, rank0, i, {"rollout/raw_reward": 0.1 + 0.05 * i, "rollout/step": i}))
        for s in range(2):
            step = 2 * i + s
            actor.append(
                event(
                    t + 45 + s,
                    rank0,
                    i,
                    {
                        "train/loss": -0.001 * step,
                        "train/ppo_kl": 0.001 * s,
                        "train/grad_norm": 0.08,
                        "train/step": step,
                    },
                )
            )
        actor.append(
            event(t + 56, rank0, i, {"perf/train_time": 12.7, "perf/step_time": 60.0, "rollout/step": i})
        )
    (events / "rollout_manager.jsonl").write_text("".join(rm))
    (events / "actor_cell0_rank0.jsonl").write_text("".join(actor))
    (events / "main.jsonl").write_text("")
    return root


def replay_app(tmp_path: Path, target: Path) -> UltraConsoleApp:
    session = ReplaySession(detect_source(target), tmp_path / "spool")
    return PilotApp(Settings(state_dir=tmp_path / "state"), replay=session, watchdog=False)


def chart_points(app: UltraConsoleApp, chart_id: str) -> int:
    chart = app.view("run").query_one(chart_id, LineChart)
    return sum(len(s.points) for s in chart.series)


async def _charts_filled(app: UltraConsoleApp, pilot, what: str) -> None:
    """The run view draws only while shown: look at it, then go back to the log."""
    await pilot.press("2")
    await until(
        pilot,
        lambda: chart_points(app, "#chart-throughput") >= 5 and chart_points(app, "#chart-kl") >= 10,
        what,
    )
    await pilot.press("3")
    await until(pilot, lambda: app.current_view == "logs", "the logs view")


async def _loaded(app: UltraConsoleApp, pilot) -> LogsView:
    logs = app.view("logs")
    assert isinstance(logs, LogsView)

    def read() -> bool:
        store = None if app.session is None else app.session.store
        done = "loading history" not in logs.history and app.history_text == ""
        return done and store is not None and len(store) > 0

    await until(pilot, read, "the replay to finish reading")
    return logs


async def _search(logs: LogsView, pilot, text: str) -> str:
    logs.start_search(text)
    await until(pilot, lambda: not logs.searching and bool(logs.matches), f"a hit for {text!r}")
    return logs.lines.record(logs.lines.cursor).text


async def _cursor_moves_charts_and_log(app: UltraConsoleApp, pilot, logs: LogsView) -> None:
    run = app.view("run")
    assert isinstance(run, RunView)
    await pilot.press("right_square_bracket")
    await until(pilot, lambda: app.rollout_cursor == 0, "the cursor on rollout 0")
    await until(pilot, lambda: logs.lines.cursor == 0, "the log at rollout 0's first line")
    await pilot.press("right_square_bracket", "right_square_bracket")
    await until(pilot, lambda: app.rollout_cursor == 2, "the cursor on rollout 2")
    kl = run.query_one("#chart-kl", LineChart)
    await until(pilot, lambda: kl.marker == 4, "the KL chart marking rollout 2's first step")
    assert run.query_one("#chart-throughput", LineChart).marker == 2
    assert run.query_one("#chart-time", LineChart).marker == 2
    at = logs.lines.cursor
    top, height = int(logs.lines.scroll_y), logs.lines.size.height
    assert at > 0 and (
        top == at or (top < at < top + height and top + height >= logs.lines.count)
    )  # on top, or all shown
    assert app.session is not None
    store = app.session.store
    assert store is not None
    assert re.search(r"\bperf 1: \{", store.line(at - 1).text)  # the line before it closed rollout 1
    later = [store.line(i).text for i in range(at, len(store))]
    first_of_2 = next(i for i, t in enumerate(later) if re.search(r"\b(rollout|perf) 2: \{", t))
    assert not any(re.search(r"\b(rollout|perf) 1: \{", t) for t in later[:first_of_2])
    await pilot.press("left_square_bracket")
    await until(pilot, lambda: app.rollout_cursor == 1 and kl.marker == 2, "the cursor back on rollout 1")
    await pilot.press("2")  # the mark is drawn on screen in the run view's charts
    await until(
        pilot,
        lambda: "· at 1" in str(run.query_one("#chart-time", LineChart).render_line(0)),
        "the time chart drawing the mark",
    )


@pytest.mark.parametrize("shape", ["newest", "2026-04"])
async def test_replay_of_a_saved_log(tmp_path, shape):
    path = tmp_path / "job-driver.log"
    (newest_log if shape == "newest" else april_log)(path)
    app = replay_app(tmp_path, path)
    async with app.run_test(size=(160, 48)) as pilot:
        assert app.current_view == "logs" and app.readonly
        logs = await _loaded(app, pilot)
        assert logs.lines.count == path.read_bytes().count(b"\n")
        await _charts_filled(app, pilot, "the charts to fill")
        hit = await _search(logs, pilot, "step 6:")
        assert "step 6: {" in hit
        await _cursor_moves_charts_and_log(app, pilot, logs)


async def test_quitting_mid_replay_stops_its_reading_thread(tmp_path):
    """The rest of a log is read in one thread, piece after piece: an app that quits stops it at its next
    piece (its front process reaped), never reading on to the end first."""
    path = tmp_path / "big.log"
    miles_sample_log.write(path, miles_sample_log.SampleRun(rollouts=40, noise_per_rollout=2000))
    total = path.read_bytes().count(b"\n")
    session = ReplaySession(detect_source(path), tmp_path / "spool", front_from=0, front_piece=16 << 10)
    front = session._front
    assert front is not None
    app = PilotApp(Settings(state_dir=tmp_path / "state"), replay=session, watchdog=False)
    async with app.run_test(size=(120, 40)) as pilot:
        await until(pilot, lambda: len(session.store) > 2000, "the replay to start reading")
        app.exit()
    read = len(session.store)
    time.sleep(0.5)
    assert read == len(session.store) < total  # stopped, well before the end
    assert front._proc.poll() is not None or session._front is front  # reaped, or still ours to close
    session.close()
    assert front._proc.poll() is not None


async def test_replay_raises_the_alerts_the_run_would_have(tmp_path):
    path = tmp_path / "job-driver.log"
    newest_log(path, nan_at_step=3)
    app = replay_app(tmp_path, path)
    async with app.run_test(size=(160, 48)) as pilot:
        await _loaded(app, pilot)
        await until(pilot, lambda: app.alert_count > 0, "an alert")
        await pilot.press("4")
        events = app.view("events")
        assert isinstance(events, EventsView)
        ids = [str(getattr(a, "id", "")) for a in events.alerts]
        assert "loss-nonfinite" in ids, ids


async def test_replay_of_a_dump_dir(tmp_path):
    root = dump_dir(tmp_path / "run")
    app = replay_app(tmp_path, root)
    async with app.run_test(size=(160, 48)) as pilot:
        logs = await _loaded(app, pilot)
        assert logs.lines.count == 5 * 5  # every metric event is a line
        await _charts_filled(app, pilot, "the charts to fill from the dump")
        hit = await _search(logs, pilot, "step 6:")
        assert "events - step 6: {" in hit and "'train/step': 6" in hit
        await _cursor_moves_charts_and_log(app, pilot, logs)


def test_bad_input_is_one_line(tmp_path):
    with pytest.raises(ReplayError, match="no such file"):
        detect_source(tmp_path / "nope.log")
    (tmp_path / "plain").mkdir()
    with pytest.raises(ReplayError, match="not a --dump-details directory"):
        detect_source(tmp_path / "plain")
    # in this process: the real subprocess of replay is test_parsing_bounds's FIFO case
    proc = run_cli(["replay", str(tmp_path / "nope.log")])
    assert proc.returncode == 1 and proc.stderr.strip().count("\n") == 0 and "Traceback" not in proc.stderr
    assert "no such file or directory" in proc.stderr


@pytest.mark.ray
async def test_replay_of_a_finished_job_on_the_cluster(ray_cluster, tmp_path):
    """`replay --job ID`: the whole log of a finished job
    read back from Ray, charts and cursor as for a file."""
    import time

    from backend.cluster.dashboard import RayClient
    from backend.signals.replay import ReplaySource

    sid = f"ultra-console-test-replay-{int(time.time() * 1000)}"
    script = REPO / "backend" / "demo" / "sample_log.py"
    async with RayClient(ray_cluster.address, timeout=30.0) as client:
        await client.submit({"entrypoint": f"python3 {script} --rollouts 4", "submission_id": sid})
        await job_reaches(client, sid, timeout=120)
    session = ReplaySession(ReplaySource("job", job_id=sid), tmp_path / "spool")
    app = PilotApp(
        Settings(state_dir=tmp_path / "state", address=ray_cluster.address), replay=session, watchdog=False
    )
    async with app.run_test(size=(160, 48)) as pilot:
        logs = await _loaded(app, pilot)
        assert logs.lines.count > 50
        await until(pilot, lambda: "SUCCEEDED" in app.run_state_text, "the job's final state")
        await _charts_filled(app, pilot, "the charts to fill from the job's log")
        hit = await _search(logs, pilot, "step 6:")
        assert "step 6: {" in hit
        await pilot.press("right_square_bracket", "right_square_bracket")
        await until(
            pilot, lambda: app.rollout_cursor == 1 and logs.lines.cursor > 0, "the cursor on rollout 1"
        )


async def test_rollout_cursor_on_a_live_runs_store(tmp_path):
    """The live app's store (console.workers.ConsoleSession)
    carries the rollout index too: `]` moves the log there."""
    from app_helpers import make_app

    from console.workers import ConsoleSession

    path = tmp_path / "job-driver.log"
    newest_log(path)
    app = make_app(tmp_path / "state")
    async with app.run_test(size=(160, 48)) as pilot:
        session = ConsoleSession(app)
        app.session = session
        store = session.new_run_log("live-job").store
        store.append(path.read_bytes())
        await pilot.press("3", "right_square_bracket", "right_square_bracket")
        logs = app.view("logs")
        assert isinstance(logs, LogsView)
        await until(
            pilot, lambda: app.rollout_cursor == 1 and logs.lines.cursor > 0, "the cursor on rollout 1"
        )
        assert re.search(r"\bperf 0: \{", store.line(logs.lines.cursor - 1).text)
        await session.client.aclose()
