"""Run view: state line, fleet and charts from backend data; nothing drawn while off screen; the abort
modal's escalation (Cancel focused, graceful, then force as a separate step, then leftovers)."""

from __future__ import annotations

import asyncio

from app_helpers import make_app
from run_fixtures import JOB, T0, metrics_view, snapshot, status
from textual.widgets import Button, Static
from waiting import until

from backend.cluster.leftovers import Leftover, LeftoverReport, NodeCheck
from backend.severity import Severity
from backend.signals.alerts import Alert
from console.messages import AlertsChanged, MetricsArrived, RunStateChanged, RunStatus, SnapshotArrived
from console.views.run import RunView, state_line
from console.widgets.abort_modal import AbortActions, AbortModal
from console.widgets.charts import LineChart
from console.widgets.gpu_fleet import GpuFleet


def test_state_line_from_backend_numbers():
    line = state_line(status(), metrics_view(), [Alert("kl-spike", Severity.WARNING, "kl rose")], T0 + 3723)
    assert line == (f"job {JOB}  RUNNING  elapsed 1h02m  rollout 12/40  ETA 26m52s  ckpt 7m30s ago  alerts 1")
    assert state_line(status(), None, [Alert("stall", Severity.ERROR, "stalled")], T0).endswith("alerts 1!")
    assert "no run attached" in state_line(None, None, [], T0)
    past = state_line(status(), metrics_view(rollouts=12, num_rollout=10), [], T0 + 3723)
    assert "  rollout 12 (past num_rollout 10)  ckpt" in past and "ETA" not in past  # not "12/10, ETA 0s"
    before_any = state_line(status(), None, [], T0 + 60)  # no checkpoint yet: said so, not "ckpt — ago"
    assert "  ckpt none  alerts 0" in before_any and "ago" not in before_any


def test_state_line_says_a_failed_runs_cause_and_a_blind_chart():
    from miles_log_shapes import OOM_TRACEBACK

    from backend.signals.monitor import RunMonitor

    monitor = RunMonitor()
    monitor.feed_text("\n".join(OOM_TRACEBACK) + "\n")
    monitor.on_job_status("FAILED", "exit code 1")
    line = state_line(status("FAILED"), None, monitor.alerts.snapshot(), T0 + 60)
    assert line.endswith(
        "  · FAILED: CUDA out of memory on GPU 3 in MegatronTrainRayActor pid=4101 on 10.0.0.3: "
        "asked for 2.10 GiB, 1.02 GiB free of 139.80 GiB"
    )
    blind = RunMonitor()
    blind.feed_text("step 2: {'train/lo\n")
    assert state_line(status(), None, blind.alerts.snapshot(), T0).endswith(
        "  · 1 metric line(s) in the log could not be read: the charts miss them (the sample shows one)"
    )


async def _feed(app) -> None:
    app.post_message(SnapshotArrived(snapshot()))
    app.post_message(MetricsArrived(metrics_view()))
    app.post_message(RunStateChanged(status()))


async def test_run_view_draws_backend_data_only_when_shown(tmp_path):
    app = make_app(tmp_path)
    async with app.run_test(size=(120, 40)) as pilot:
        view = app.query_one(RunView)
        view.clock = lambda: T0 + 3723
        await pilot.press("2", "1")  # the operator chose the plan view: an active run does not take it over
        await pilot.pause()
        charts = list(app.query(LineChart))
        drawn = [c.builds for c in charts]
        await _feed(app)
        await pilot.pause()
        assert not app.fleet_wanted  # the plan view is showing: no polling for the fleet
        assert [c.builds for c in charts] == drawn  # and no chart was drawn off screen
        assert app.query_one(GpuFleet).rows == ()
        await pilot.press("2")
        await pilot.pause()
        assert app.fleet_wanted  # the run view told the app (FleetWanted): the telemetry worker polls
        assert len(app.query_one(GpuFleet).rows) == 16
        assert all(c.builds >= 1 for c in charts)
        kl = app.query_one("#chart-kl", LineChart)
        assert {s.label for s in kl.series if s.points} == {
            "ppo_kl",
            "train/rollout kl",
            "logprob |diff|",
            "raw reward",
        }
        tput = app.query_one("#chart-throughput", LineChart)
        assert [len(s.points) for s in tput.series if s.label == "per GPU"] == [12]
        assert "rollout 12/40" in str(app.query_one("#run-state", Static).content)
        builds = [c.builds for c in charts]
        app.post_message(MetricsArrived(metrics_view()))  # same numbers: no chart rebuilt
        await pilot.pause()
        assert [c.builds for c in charts] == builds


class _Actions:
    """Records the modal's calls; `stop_ok` decides whether the graceful stop ends the job."""

    def __init__(self, stop_ok: bool) -> None:
        self.calls: list[str] = []
        self.stop_ok = stop_ok

    def actions(self) -> AbortActions:
        async def stop() -> bool:
            self.calls.append("stop")
            return self.stop_ok

        async def force() -> bool:
            self.calls.append("force")
            return True

        async def check_nodes() -> list[str]:
            self.calls.append("check")
            return ["node-03"]

        async def leftovers() -> LeftoverReport:
            self.calls.append("leftovers")
            node = NodeCheck("03" * 20, "node-03", True)
            return LeftoverReport(JOB, (node,), (Leftover(node.node_id, "node-03", 2, 4242, 60000),))

        async def cleanup(items):
            self.calls.append(f"cleanup {len(items)}")
            return "killed 1 of 1 leftover process(es)"

        return AbortActions(stop, force, check_nodes, leftovers, cleanup)


async def _wait_stage(modal: AbortModal, stage: str, pilot) -> None:
    def reached() -> bool:
        go = modal.query_one("#abort-go", Button)
        cancel = modal.query_one("#abort-cancel", Button)
        return (
            modal.stage == stage
            and (not go.display or go in modal.focus_chain)
            and modal.app.focused is cancel
        )

    await until(pilot, reached, f"the abort modal at stage {stage}", timeout=10.0)
    await pilot.pause()  # the shown button has joined the focus chain


async def _choose_go(modal: AbortModal, pilot) -> None:
    """Move from the focused Cancel to the action button (as an operator must) and press it."""
    go = modal.query_one("#abort-go", Button)
    for _ in range(50):
        if modal.app.focused is go:
            break
        await pilot.press("right")
        await pilot.pause()
    assert modal.app.focused is go
    await pilot.press("enter")


async def test_abort_modal_escalates_in_separate_steps(tmp_path):
    app = make_app(tmp_path)
    rec = _Actions(stop_ok=False)
    async with app.run_test(size=(100, 30)) as pilot:
        results: list[str | None] = []
        modal = AbortModal(JOB, "Will be lost: 7m30s of training since the last checkpoint.", rec.actions())
        app.push_screen(modal, results.append)
        await pilot.pause()
        # a fast operator: each step's press comes well within Textual's press animation of the last one
        modal.query_one("#abort-go", Button).active_effect_duration = 5.0
        assert app.focused is modal.query_one("#abort-cancel", Button)  # Cancel has focus
        assert "7m30s" in str(modal.query_one("#abort-body", Static).content)
        await _choose_go(modal, pilot)  # the operator moves to "Stop gracefully" on purpose
        await _wait_stage(modal, "force?", pilot)
        assert rec.calls == ["stop"]  # graceful only: force is NOT sent with it
        assert app.focused is modal.query_one("#abort-cancel", Button)
        assert "Force stop" in str(modal.query_one("#abort-go", Button).label)
        await _choose_go(modal, pilot)
        await _wait_stage(modal, "leftovers", pilot)
        assert rec.calls == ["stop", "force", "check", "leftovers"]
        assert "pid 4242 on node-03 GPU 2, 60000 MiB" in str(modal.query_one("#abort-body", Static).content)
        await _choose_go(modal, pilot)
        await _wait_stage(modal, "done", pilot)
        assert rec.calls[-1] == "cleanup 1"
        await pilot.press("enter")  # Close
        await pilot.pause()
        assert results == ["cleaned"]


async def test_abort_modal_cancel_sends_nothing(tmp_path):
    app = make_app(tmp_path)
    rec = _Actions(stop_ok=True)
    async with app.run_test(size=(100, 30)) as pilot:
        results: list[str | None] = []
        app.push_screen(AbortModal(JOB, "x", rec.actions()), results.append)
        await pilot.pause()
        await pilot.press("enter")  # Enter on the focused Cancel
        await pilot.pause()
        assert results == ["cancelled"] and rec.calls == []
        app.push_screen(AbortModal(JOB, "x", rec.actions()), results.append)
        await pilot.pause()
        await pilot.press("escape")
        await pilot.pause()
        assert results == ["cancelled", "cancelled"] and rec.calls == []


async def test_abort_key_refused_when_readonly(tmp_path):
    app = make_app(tmp_path, readonly=True)
    async with app.run_test(size=(100, 30)) as pilot:
        await pilot.press("2", "A")
        await pilot.pause()
        assert not isinstance(app.screen, AbortModal)


async def test_history_rebuild_progress_is_visible(tmp_path):
    from console.messages import HistoryProgress
    from console.views.logs import LogsView

    app = make_app(tmp_path)
    async with app.run_test(size=(120, 40)) as pilot:
        await pilot.press("2")
        app.post_message(RunStateChanged(status()))
        app.post_message(HistoryProgress(JOB, 20_000, done=False))
        await pilot.pause()
        assert "loading history 20,000 lines" in str(app.query_one("#run-state", Static).content)
        await pilot.press("3")
        await pilot.pause()
        assert f"loading history of {JOB}… 20,000 lines" in str(
            app.query_one(LogsView).query_one("#logs-status", Static).content
        )
        app.post_message(HistoryProgress(JOB, 25_000, done=True))
        await pilot.pause()
        assert "loading" not in str(app.query_one(LogsView).query_one("#logs-status", Static).content)
        await pilot.press("2")
        await pilot.pause()
        assert "loading" not in str(app.query_one("#run-state", Static).content)


def test_a_terminal_run_shows_how_long_it_ran_and_no_eta():
    ended = RunStatus(JOB, "STOPPED", started_at=T0, ended_at=T0 + 185)
    line = state_line(ended, metrics_view(), [], T0 + 9999)
    assert "STOPPED  ran 3m05s" in line and "ETA" not in line
    assert "ETA" not in state_line(ended, metrics_view(), [], T0 + 9999, compact=True)


async def test_the_state_line_under_the_abort_modal_follows_the_run(tmp_path):
    app = make_app(tmp_path)
    release = asyncio.Event()

    async def stop() -> bool:
        await release.wait()
        return True

    async def nothing() -> bool:
        return True

    async def no_nodes() -> list[str]:
        return []

    async def report() -> LeftoverReport:
        return LeftoverReport(JOB, ())

    async def cleanup(items) -> str:
        return ""

    async with app.run_test(size=(120, 40)) as pilot:
        view = app.query_one(RunView)
        view.clock = lambda: T0 + 30
        await pilot.press("2")
        app.post_message(RunStateChanged(status()))
        await until(pilot, lambda: "RUNNING" in str(view.query_one("#run-state", Static).content), "RUNNING")
        modal = AbortModal(JOB, "x", AbortActions(stop, nothing, no_nodes, report, cleanup))
        app.push_screen(modal)
        await until(pilot, lambda: app.screen is modal and bool(modal.query("#abort-go")), "the modal drawn")
        await _choose_go(modal, pilot)
        await until(pilot, lambda: modal.stage == "stopping", "stopping")
        app.post_message(RunStateChanged(RunStatus(JOB, "STOPPED", started_at=T0, ended_at=T0 + 14)))
        await until(
            pilot,
            lambda: "STOPPED  ran 14s" in str(view.query_one("#run-state", Static).content),
            "the state line under the modal to say STOPPED",
        )
        assert app.screen is modal and "ETA" not in str(view.query_one("#run-state", Static).content)
        release.set()
        await until(pilot, lambda: modal.stage == "done", "the modal to finish")


async def test_opening_on_an_active_run_lands_on_the_run_view(tmp_path):
    app = make_app(tmp_path)
    async with app.run_test(size=(120, 40)) as pilot:
        assert app.current_view == "plan"
        app.post_message(RunStateChanged(status("RUNNING")))  # the run worker attached to an active run
        await until(pilot, lambda: app.current_view == "run", "the run view")
    ended = make_app(tmp_path)
    async with ended.run_test(size=(120, 40)) as pilot:
        ended.post_message(RunStateChanged(RunStatus(JOB, "STOPPED", started_at=T0, ended_at=T0 + 5)))
        await until(pilot, lambda: ended.run_state_text.endswith("STOPPED"), "the state seen")
        assert ended.current_view == "plan"  # nothing running: the plan view stays


async def test_abort_modal_says_checking_n_nodes_until_they_answer_and_names_a_silent_one(tmp_path):
    app = make_app(tmp_path)
    answer = asyncio.Event()

    async def stopped() -> bool:
        return True

    async def nodes() -> list[str]:
        return ["node-01", "node-02"]

    async def report() -> LeftoverReport:
        await answer.wait()
        return LeftoverReport(
            JOB,
            (
                NodeCheck("01" * 20, "node-01", True),
                NodeCheck("02" * 20, "node-02", False, "no answer in 45 s"),
            ),
        )

    async def cleanup(items) -> str:
        return ""

    async with app.run_test(size=(120, 40)) as pilot:
        modal = AbortModal(JOB, "x", AbortActions(stopped, stopped, nodes, report, cleanup))
        app.push_screen(modal)
        await until(pilot, lambda: bool(modal.query("#abort-go")), "the modal drawn")
        await _choose_go(modal, pilot)
        body = lambda: str(modal.query_one("#abort-body", Static).content)  # noqa: E731
        await until(pilot, lambda: "Checking 2 node(s) for GPU processes left behind" in body(), "checking…")
        assert "node-01, node-02" in body()
        answer.set()
        await until(pilot, lambda: modal.stage == "done", "the answers")
        assert "node node-02 did not answer: no answer in 45 s" in body()
        assert "None on the node(s) that answered (1 of 2 node(s) answered)" in body()
        assert "No leftover GPU processes" not in body()


async def test_a_freshly_launched_run_s_header_shows_none_of_the_last_run_s_figures(tmp_path):
    """The last run ended at rollout 40/40 with a checkpoint 11 s before; a new run, 7 s up, must not show
    "rollout 40/40", an ETA or "ckpt 11s ago" (found driving the demo): every figure is the run shown's."""
    from console.workers import ConsoleSession

    app = make_app(tmp_path)
    async with app.run_test(size=(120, 40)) as pilot:
        view = app.query_one(RunView)
        view.clock = lambda: T0 + 7
        session = ConsoleSession(app)
        app.session = session
        await pilot.press("2")
        app.post_message(RunStateChanged(RunStatus("raysubmit_old", "SUCCEEDED", T0 - 3600, T0 - 5)))
        app.post_message(MetricsArrived(metrics_view(rollouts=40, num_rollout=40)))
        app.post_message(AlertsChanged([Alert("kl-spike", Severity.WARNING, "kl rose")]))
        header = view.query_one("#run-state", Static)
        await until(pilot, lambda: "rollout 40/40" in str(header.content), "the last run's header")
        app.post_message(RunStateChanged(RunStatus("raysubmit_new", "RUNNING", T0)))
        await until(pilot, lambda: "raysubmit_new" in str(header.content), "the new run's header")
        text = str(header.content)
        assert "rollout 40" not in text and "ETA 0s" not in text and " ago" not in text, text
        assert "ckpt none" in text and "alerts 0" in text, text
        assert not any(s.points for chart in view.query(LineChart) for s in chart.series)
        # the session, opening the new run's log, tells every view (Events too) that nothing is known yet
        app.post_message(AlertsChanged([Alert("kl-spike", Severity.WARNING, "kl rose")]))
        session.new_run_log("raysubmit_new")
        await until(pilot, lambda: view.alerts == () and "alerts 0" in str(header.content), "the alerts gone")
        await session.client.aclose()
