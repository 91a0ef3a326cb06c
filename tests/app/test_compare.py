"""Two runs side by side with Pilot: `replay A B` over two logs of two miles versions (the newest shape of
backend/demo/sample_log.py and the 2026-04 shape of tests/support/miles_log_shapes.py), overlaid step-aligned
in every compared chart, legends and colours right, the rollout cursor marking every run, the header per run
with what changed between their launches (their argument dumps; a secret never shown), and the same numbers
as `metrics --from-log A --compare B --json`.
"""

from __future__ import annotations

import dataclasses
import json
import re
import shlex
from pathlib import Path
from types import MappingProxyType

import miles_log_shapes as shapes
import pytest
from app_helpers import PilotApp, make_app, type_text
from run_fixtures import T0, metrics_view, status
from textual.widgets import Input, Static
from waiting import until

from backend.demo import sample_log
from backend.settings import Settings
from backend.signals.compare import RunSide
from backend.signals.launch_flags import flags_from_command
from backend.signals.replay import ReplaySession, RolloutMark, detect_source
from backend.signals.series import SeriesSetSnapshot
from console.cli import main as cli_main
from console.messages import BaselineAdded, MetricsArrived, RolloutCursor, RunStateChanged
from console.views.run import RunView
from console.widgets.charts import LineChart
from console.widgets.compare_prompt import ComparePrompt

SECRET_A, SECRET_B = "sk-live-AAAA1111secret", "sk-live-BBBB2222secret"
CHARTS = {
    "throughput": "perf/tokens_per_gpu_per_sec",
    "time": "perf/step_time",
    "kl": "train/ppo_kl",
    "reward": "rollout/raw_reward",
}


def _dump(prefix: str, pairs: dict[str, object]) -> list[str]:
    head = [f"{prefix}------------------------ arguments ------------------------"]
    body = [f"{prefix}  {k} {'.' * (48 - len(k))} {v}" for k, v in pairs.items()]
    return [*head, *body, f"{prefix}-------------------- end of arguments ---------------------"]


def newest_log(path: Path) -> sample_log.SampleRun:
    """A: the newest shape, 5 rollouts; its argument dump gains a W&B key (a secret Megatron would print)."""
    run = sample_log.write(path, sample_log.SampleRun(rollouts=5, noise_per_rollout=4))
    lines = path.read_text().splitlines()
    i = next(i for i, line in enumerate(lines) if "  global_batch_size ." in line)
    lines.insert(i, re.sub(r"global_batch_size \.+ \d+", f"wandb_key {'.' * 39} {SECRET_A}", lines[i]))
    path.write_text("\n".join(lines) + "\n")
    return run


def april_log(path: Path) -> shapes.Shape:
    """B: the 2026-04 shape, 4 rollouts, other values; its dump differs in two flags and the secret."""
    shape = shapes.Shape(format="2026-04", rollouts=4)
    dump = _dump(
        "(MegatronTrainRayActor pid=4100) ",
        {
            "num_rollout": 30,
            "rollout_num_gpus": 8,
            "rollout_batch_size": 64,
            "n_samples_per_prompt": 8,
            "global_batch_size": 256,
            "wandb_key": SECRET_B,
        },
    )
    path.write_text("\n".join(dump) + "\n" + shapes.text(shape))
    return shape


@pytest.fixture
def two_logs(tmp_path: Path) -> tuple[Path, Path]:
    a, b = tmp_path / "run-new.log", tmp_path / "run-april.log"
    newest_log(a)
    april_log(b)
    return a, b


def _headless(a: Path, b: Path, capsys: pytest.CaptureFixture[str]) -> dict:
    code = cli_main(["metrics", "--from-log", str(a), "--compare", str(b), "--json"])
    out = capsys.readouterr().out
    assert code == 0
    return json.loads(out)


async def test_replay_a_b_overlays_two_shapes(tmp_path, two_logs, capsys):
    a, b = two_logs
    headless = _headless(a, b, capsys)["compare"]
    session = ReplaySession(detect_source(a), tmp_path / "spool")
    app = PilotApp(Settings(state_dir=tmp_path / "state"), replay=session, watchdog=False, compare=[str(b)])
    expected_b = shapes.expected_series(shapes.Shape(format="2026-04", rollouts=4))
    async with app.run_test(size=(200, 50)) as pilot:
        await pilot.press("2")
        run = app.view("run")
        assert isinstance(run, RunView)

        def chart(name: str) -> LineChart:
            return run.query_one(f"#chart-{name}", LineChart)

        await until(
            pilot,
            lambda: (
                run.query("#chart-reward")
                and len(chart("reward").series) == 2
                and len(chart("kl").series[-1].points) == 10
            ),
            "both runs overlaid",
        )
        for name, key in CHARTS.items():
            series = chart(name).series
            # the other run first, the run being looked at last (drawn on top), each in its colour
            assert [s.label for s in series] == ["run-april.log", "run-new.log"], name
            assert [s.color for s in series] == ["orange", "cyan"]
            assert list(series[0].points) == expected_b[key], name  # the 2026-04 run's own numbers
            # the headless comparison's numbers are the charts'
            (metric,) = [m for m in headless["metrics"] if m["key"] == key]
            assert [[[float(s), v] for s, v in r["points"]] for r in metric["runs"]] == [
                [list(p) for p in series[1].points],
                [list(p) for p in series[0].points],
            ]
        assert [p[1] for p in chart("kl").series[1].points] == [0.001 * (s % 3) for s in range(10)]
        drawn = "\n".join(chart("kl").render_line(y).text for y in range(chart("kl").size.height))
        assert "run-april.log" in drawn and "run-new.log" in drawn  # the legend names both

        panel = str(run.query_one("#run-compare", Static).content)
        lines = panel.splitlines()
        assert lines[0].startswith("■ run-new.log SAVED  step 9  17.5 tok/s/GPU  KL 0  reward 0.325"), lines
        assert lines[1].startswith("■ run-april.log SAVED  step 7  16.5 tok/s/GPU"), lines
        assert [r["label"] for r in headless["runs"]] == ["run-new.log", "run-april.log"]
        assert headless["runs"][1]["reward_delta"] == {
            "step": 3,
            "value": 0.5,
            "first": 0.275,
            "diff": 0.5 - 0.275,
        }
        assert "diverges: rollout/raw_reward from rollout 2" in lines[1]
        changed = headless["changes"][0]["diff"]["changes"]
        assert [c["flag"] for c in changed] == ["--global-batch-size", "--rollout-batch-size", "--wandb-key"]
        assert "--rollout-batch-size 64 → 32" in panel and "--wandb-key *** → ***" in panel
        assert SECRET_A not in panel and SECRET_B not in panel and "sk-live" not in json.dumps(headless)

        # the rollout cursor marks the same rollout (and its first step) on every run
        await pilot.press("right_square_bracket", "right_square_bracket", "right_square_bracket")
        await until(
            pilot, lambda: app.rollout_cursor == 2 and chart("reward").marker == 2, "the cursor on rollout 2"
        )
        assert chart("kl").marker == 4 and chart("throughput").marker == 2 and chart("time").marker == 2
        panel = str(run.query_one("#run-compare", Static).content)
        cursor = panel.splitlines()[-1]
        assert "reward at rollout 2: run-new.log 0.225 · run-april.log 0.375" in cursor, cursor
        assert f"KL (ppo_kl) at step 4: run-new.log 0.001 · run-april.log {-3.1e-05 * 5:.4g}" in cursor
        assert "step time (s) at rollout 2: run-new.log 60 · run-april.log 59.5" in cursor
        await until(pilot, lambda: "reward · at 2" in chart("reward").render_line(0).text, "the mark drawn")


async def test_compare_with_prompt_and_bad_input(tmp_path, two_logs):
    """The key (run.compare) asks for a run; a path that is no run is one notice and changes nothing."""
    a, b = two_logs
    session = ReplaySession(detect_source(a), tmp_path / "spool")
    app = PilotApp(Settings(state_dir=tmp_path / "state"), replay=session, watchdog=False)
    async with app.run_test(size=(160, 45)) as pilot:
        await pilot.press("2")
        run = app.view("run")
        assert isinstance(run, RunView)
        await until(pilot, lambda: app.history_text == "" and run.metrics is not None, "the replay read")
        await pilot.press("C")
        await until(pilot, lambda: isinstance(app.screen, ComparePrompt), "the prompt")
        field = await until(pilot, lambda: next(iter(app.screen.query(Input)), None), "the prompt's field")
        nope = str(tmp_path / "nope.log")
        await type_text(pilot, nope, lambda: field.value == nope, "the path typed")
        await pilot.press("enter")
        await until(pilot, lambda: any("no such file" in n.message for n in app._notifications), "one notice")
        assert not run.comparison.active and not run.query("#run-compare")
        await app.run_binding("run.compare")  # what the palette's "Run: Compare with…" entry runs
        await until(pilot, lambda: isinstance(app.screen, ComparePrompt), "the prompt again")
        field = await until(pilot, lambda: next(iter(app.screen.query(Input)), None), "the prompt's field")
        await type_text(pilot, str(b), lambda: field.value == str(b), "the path typed")
        await pilot.press("enter")
        await until(
            pilot,
            lambda: run.query("#chart-reward") and len(run.query_one("#chart-kl", LineChart).series) == 2,
            "the run overlaid",
        )
        assert re.search(r"run-april\.log SAVED", str(run.query_one("#run-compare", Static).content))


def _scaled(snap: SeriesSetSnapshot, factor: float) -> SeriesSetSnapshot:
    return SeriesSetSnapshot(
        MappingProxyType(
            {
                k: dataclasses.replace(s, values=tuple(v * factor for v in s.values))
                for k, s in snap.by_key.items()
            }
        )
    )


@pytest.mark.parametrize("size", [(80, 24), (120, 40), (200, 50)], ids=lambda s: f"{s[0]}x{s[1]}")
def test_compare_run_view_snapshot(snap_compare, tmp_path, size):
    """The Run view of a live run with a finished baseline overlaid: the header per run, what changed (a W&B
    key hidden), each chart with both runs and a legend, the cursor on rollout 3. Under 100 columns the
    compact layout: a short line per run, the charts in two rows, the fleet out of their way."""
    app = make_app(tmp_path)
    live = metrics_view(rollouts=10)
    base = RunSide(
        "baseline-0412.log",
        "SUCCEEDED",
        _scaled(metrics_view(rollouts=12).series, 1.3),
        flags_from_command(f"python3 train.py --rollout-batch-size 32 --wandb-key {SECRET_B} --lr 1e-6"),
    )
    mine = flags_from_command(f"python3 train.py --rollout-batch-size 64 --wandb-key {SECRET_A} --lr 1e-6")

    async def run_before(pilot) -> None:
        app.query_one(RunView).clock = lambda: T0 + 3723
        await pilot.press("2")
        app.post_message(MetricsArrived(live))
        app.post_message(RunStateChanged(status()))
        app.post_message(BaselineAdded(base, mine))
        await pilot.pause()
        app.post_message(RolloutCursor(RolloutMark(3, 0, 3)))
        await pilot.pause()
        await pilot.pause()

    assert snap_compare(app, terminal_size=size, run_before=run_before)


@pytest.mark.ray
@pytest.mark.timeout(
    600
)  # its bounded waits add up to over 300 s on a loaded runner: fail by them, never by a kill
async def test_live_simulated_run_compared_with_a_saved_one(ray_cluster, tmp_path):
    """A live run of the simulated trainer on the real Ray cluster, "compare with…" a saved 2026-04 log: both
    overlaid, the live run last in its own colour, the flags both name compared (argv vs the log's dump)."""
    from app_helpers import MODELS, RUN_ID
    from runhelp import launch_when_free, sim_spec, stop_quietly

    from backend.cluster.controller import RunController
    from backend.cluster.dashboard import RayClient

    saved = tmp_path / "baseline.log"
    april_log(saved)
    dump = {
        "--num-rollout": 30,
        "--rollout-num-gpus": 8,
        "--rollout-batch-size": 64,
        "--n-samples-per-prompt": 8,
        "--global-batch-size": 256,
    }
    state = tmp_path / "state"
    async with RayClient(ray_cluster.address, timeout=30.0) as client:
        job = await launch_when_free(RunController(client, state_dir=state), sim_spec(tmp_path, nodes=1))
        try:
            app = PilotApp(
                Settings(address=ray_cluster.address, state_dir=state),
                job=job.id,
                watchdog=False,
                preview_run_id=RUN_ID,
                model_dir=str(MODELS),
            )
            async with app.run_test(size=(200, 50)) as pilot:
                run = app.query_one(RunView)
                await until(
                    pilot, lambda: app.current_view == "run", "the run view of the active run", timeout=90
                )
                await until(
                    pilot,
                    lambda: run.metrics is not None and run.metrics.series.get("train/ppo_kl"),
                    "live metrics",
                    timeout=120,
                )
                await pilot.press("C")
                await until(pilot, lambda: isinstance(app.screen, ComparePrompt), "the prompt")
                await pilot.press(*str(saved), "enter")
                kl = run.query_one("#chart-kl", LineChart)
                await until(
                    pilot,
                    lambda: run.query("#chart-reward") and len(kl.series) == 2,
                    "both runs overlaid",
                    timeout=60,
                )
                assert [s.label for s in kl.series] == ["baseline.log", job.id]  # the live run last
                assert [s.color for s in kl.series] == ["orange", "cyan"]
                await until(pilot, lambda: len(kl.series[1].points) >= 4, "the live line growing", timeout=60)
                assert run.metrics is not None
                live = dict(run.metrics.series.by_key["train/ppo_kl"].finite_points())
                assert all(live.get(s) == v for s, v in kl.series[1].points)  # the live run's own numbers
                panel = str(run.query_one("#run-compare", Static).content)
                assert panel.splitlines()[0].startswith(f"■ {job.id} RUNNING"), panel
                argv = shlex.split(job.entrypoint)
                said = {tok: argv[i + 1] for i, tok in enumerate(argv[:-1]) if tok in dump}
                expected = sorted(f for f, v in said.items() if float(v) != dump[f])
                assert expected and "--rollout-batch-size" in expected
                changed = re.search(r"\(args-dump vs argv\): (.*)", panel)
                assert changed is not None, panel
                assert re.findall(r"(--[a-z-]+) \S+ → ", changed.group(1)) == expected
                assert SECRET_B not in panel
                await pilot.press("right_square_bracket")
                await until(
                    pilot,
                    lambda: all(run.query_one(f"#chart-{c}", LineChart).marker is not None for c in CHARTS),
                    "the cursor on every chart",
                )
        finally:
            await stop_quietly(client, job.id)


async def test_x_clears_a_comparison_and_a_new_run_starts_without_one(tmp_path):
    """Issue 35: a comparison can be cleared (X), and belongs to the run it was opened on: the next run shown
    (a launch, another attach) has none, its charts titled as the single-run view titles them."""
    app = make_app(tmp_path)
    base = RunSide("baseline-0412.log", "SUCCEEDED", metrics_view(rollouts=12).series, None)
    async with app.run_test(size=(160, 45)) as pilot:
        await pilot.press("2")
        run = app.query_one(RunView)
        titles = {c.id: c.title for c in run.query(LineChart)}
        app.post_message(MetricsArrived(metrics_view(rollouts=10)))
        app.post_message(RunStateChanged(status()))
        app.post_message(BaselineAdded(base, None))
        await until(
            pilot, lambda: run.comparison.active and run.query("#run-compare"), "the comparison drawn"
        )
        run.focus()
        await pilot.press("X")
        await until(pilot, lambda: not run.comparison.active and not run.query("#run-compare"), "it cleared")
        await pilot.pause()
        assert {c.id: c.title.split(" · from ")[0] for c in run.query(LineChart)} == titles

        app.post_message(BaselineAdded(base, None))
        await until(pilot, lambda: run.comparison.active, "compared again")
        app.post_message(RunStateChanged(dataclasses.replace(status(), job_id="raysubmit_next")))
        await until(pilot, lambda: not run.comparison.active, "the next run's view without the comparison")
        assert not run.query("#run-compare")


async def test_the_palette_entry_clears_a_comparison_and_80_columns_get_the_compact_layout(tmp_path):
    """Issue 35: "Clear the comparison" in ctrl+p (run.compare_clear, the X key's entry) clears it; under 100
    columns the comparison's four charts take two rows of at least 7 lines each (never squeezed to one row),
    the panel a short line per run, and the fleet comes back once it is cleared."""
    app = make_app(tmp_path)
    base = RunSide("baseline-0412.log", "SUCCEEDED", metrics_view(rollouts=12).series, None)
    async with app.run_test(size=(80, 24)) as pilot:
        await pilot.press("2")
        run = app.query_one(RunView)
        app.post_message(MetricsArrived(metrics_view(rollouts=10)))
        app.post_message(RunStateChanged(status()))
        app.post_message(BaselineAdded(base, None))
        await until(pilot, lambda: len(run.query(LineChart)) == 4, "the comparison's four charts")
        await pilot.pause()
        charts = list(run.query(LineChart))
        assert len({c.region.y for c in charts}) == 2 and all(c.region.height >= 7 for c in charts)
        assert not run.query_one("#fleet").display
        panel = run.query_one("#run-compare", Static)
        assert panel.region.height == 3  # the two runs' lines and what changed, one row each
        await app.run_binding("run.compare_clear")
        await until(pilot, lambda: not run.comparison.active and len(run.query(LineChart)) == 3, "cleared")
        await pilot.pause()
        assert run.query_one("#fleet").display and not run.query("#run-compare")
