"""Hostile input, part B (issue 17 findings 4-6): whatever a run's log, dump or an operator's value holds,
every entry point answers in bounded time and memory with one clear line, a documented exit status and no
traceback; special files are refused by type; a shim report counts only from a train actor's own process and
a train actor that never reported is the critical `shim-missing` alert.

Each test fails on the code before this change (say so in its docstring): a crash ("internal error"), a hang
(the subprocess timeout), a silent pass (no shim-missing), or an unbounded loop/memory.
"""

from __future__ import annotations

import json
import math
import os
import resource
import subprocess
import sys
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
from inproc_cli import run_cli

from backend.plan.evaluation import evaluate
from backend.plan.spec import RunSpec, load_preset_dict
from backend.signals.alerts import Alert
from backend.signals.dump_reader import DumpReader
from backend.signals.monitor import RunMonitor
from backend.signals.replay import ReplayError, ReplaySession, detect_source
from shim import logline

REPO = Path(__file__).resolve().parents[2]
BOUND_S = 30.0  # a hang guard: each command takes about a second, but a loaded 2-core CI runner took 11.6 s
MAX_SERIES = (
    2000  # backend.signals.series.MAX_SERIES (a literal: the tests also run against the code before it)
)
MAX_SPEC_INT = 1 << 24  # backend.plan.spec.MAX_SPEC_INT
TRAIN = "(MegatronTrainRayActor pid={pid}, ip=10.0.0.{node})"
DEEP = "[" * 5000 + "]" * 5000
HUGE_INT = "7" * 5000


def cli(
    *args: str, timeout: float = BOUND_S, real: bool = False
) -> tuple[subprocess.CompletedProcess[str], float]:
    """`ultra-console ARGS`: (result, seconds). With `real`, a subprocess (a hang fails as TimeoutExpired):
    one case of each command, and where the child's peak memory is measured; else in this process
    (support/inproc_cli.py: the same `main`, exit status and stderr; pytest-timeout ends a hang)."""
    t0 = time.monotonic()
    if not real:
        proc = run_cli(args)
        return proc, time.monotonic() - t0
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    proc = subprocess.run(
        [sys.executable, "-m", "console.cli", *args],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=timeout,
        stdin=subprocess.DEVNULL,
        env=env,
    )
    return proc, time.monotonic() - t0


def assert_clean(proc: subprocess.CompletedProcess[str]) -> None:
    assert "Traceback" not in proc.stderr and "internal error" not in proc.stderr, proc.stderr[-2000:]


def one_line(proc: subprocess.CompletedProcess[str]) -> str:
    assert_clean(proc)
    lines = [ln for ln in proc.stderr.splitlines() if ln.strip()]
    assert len(lines) == 1, proc.stderr[-2000:]
    return lines[0]


def replayed_alerts(log: Path, spool: Path) -> list[Alert]:
    """The alerts `replay` raises over a saved log, read whole (the replay app's worker, without the app)."""
    session = ReplaySession(detect_source(log), spool)
    try:
        while session.load_step():
            pass
        session.finish()
        assert session.monitor is not None
        return list(session.monitor.alerts.alerts)
    finally:
        session.close()


def step_line(pid: int, node: int, step: int, payload: str | None = None) -> str:
    body = payload or f"{{'train/loss': 0.5, 'train/ppo_kl': 0.001, 'train/step': {step}}}"
    return (
        f"{TRAIN.format(pid=pid, node=node)} [2026-03-02 "
        f"10:00:0{step % 10}] log_utils.py:443 - step {step}: {body}"
    )


def ordinary(pid: int, node: int) -> str:
    return f"{TRAIN.format(pid=pid, node=node)} [2026-03-02 10:00:00] train_actor.py:53 - actor up"


def shim_good(prefix: str) -> str:
    return f"{prefix} {logline.applied({'moe_router_topk_scaling_factor': 5.0}, mapping_only=True)}"


# --------------------------------------------------------------- 4: one malformed shim line stops the monitor


@pytest.mark.parametrize(
    "body",
    [DEEP, HUGE_INT, "{" + ",".join(f'"k{i}":1' for i in range(300)) + "}"],
    ids=["5000-deep", "5000-digit", "300-keys"],
)
def test_a_hostile_shim_line_is_one_unreadable_line_never_a_crash(tmp_path: Path, body: str) -> None:
    """Before: RecursionError / ValueError out of shim.logline.parse, `metrics` said "internal error"."""
    log = tmp_path / "run.log"
    log.write_text(
        "\n".join(
            [
                f'(pid=11, ip=10.0.0.1) {logline.APPLIED_PREFIX}{{"a":{body}}}',
                ordinary(11, 1),
                step_line(11, 1, 0),
                step_line(11, 1, 1),
            ]
        )
        + "\n"
    )
    proc, took = cli("metrics", "--from-log", str(log))
    assert_clean(proc)
    assert took < BOUND_S and proc.returncode in (0, 3), proc.stderr
    assert "shim-not-loaded" in proc.stdout and "unreadable shim line" in proc.stdout
    monitor = RunMonitor()
    monitor.feed_text(log.read_text())  # the live app's path: it goes on with the next line
    monitor.feed_text(step_line(11, 1, 2) + "\n")
    assert monitor.collector.records["step"] == 3


def _shim_run_log(*, forged: str) -> str:
    """Two train actors (pids 21, 22 on two nodes); only pid 21's process logs the shim; `forged` adds a line
    that claims pid 22's report (or another's) without being its process."""
    return (
        "\n".join(
            [
                shim_good("(pid=21, ip=10.0.0.1)"),
                ordinary(21, 1),
                ordinary(22, 2),
                forged,
                step_line(21, 1, 0),
                step_line(21, 1, 1),
                step_line(21, 1, 2),
            ]
        )
        + "\n"
    )


@pytest.mark.parametrize(
    "forged",
    [
        shim_good(""),  # the driver's own (unprefixed) line
        shim_good(
            "(MegatronTrainRayActor pid=999, ip=10.0.0.2)"
        ),  # a forged prefix: pid 999 never logged a line
        shim_good("(RolloutManager pid=22, ip=10.0.0.2)"),  # another role's class on the actor's pid
    ],
    ids=["driver-line", "forged-pid", "other-role"],
)
def test_only_a_train_actors_own_process_reports_the_shim(forged: str) -> None:
    """Before: a driver line counted as a report, and nothing ever raised shim-missing."""
    monitor = RunMonitor()
    monitor.feed_text(_shim_run_log(forged=forged))
    missing = [a for a in monitor.alerts.alerts if a.id == "shim-missing"]
    assert len(missing) == 1 and missing[0].severity == "critical", monitor.alerts.alerts
    assert "pid=22, ip=10.0.0.2" in missing[0].message and "pid=21" not in missing[0].message
    assert set(monitor.alerts.shim_reports) == {"MegatronTrainRayActor pid=21, ip=10.0.0.1"}


def test_every_train_actor_reporting_raises_nothing_and_a_run_without_the_shim_is_not_called_missing() -> (
    None
):
    """The check is not noise: a full set of reports, or a run launched without the console's shim."""
    full = RunMonitor()
    full.feed_text(_shim_run_log(forged=shim_good("(pid=22, ip=10.0.0.2)")))
    full.input_ended()
    assert [a.id for a in full.alerts.alerts] == []
    plain = RunMonitor()  # no shim line anywhere and nobody said the job carries the hook
    plain.feed_text(
        "\n".join([ordinary(21, 1), ordinary(22, 2), step_line(21, 1, 0), step_line(21, 1, 1)]) + "\n"
    )
    plain.input_ended()
    assert [a.id for a in plain.alerts.alerts] == []
    plain.expect_shim()  # the live app / metrics --job: the job's runtime env runs the hook
    plain.input_ended()
    assert [a.id for a in plain.alerts.alerts] == ["shim-missing"]


def test_shim_missing_reaches_metrics_and_replay(tmp_path: Path) -> None:
    """`metrics --from-log` and `replay` judge at the end of the log (before: never)."""
    log = tmp_path / "run.log"
    log.write_text(_shim_run_log(forged=""))
    proc, took = cli("metrics", "--from-log", str(log), "--json")
    assert_clean(proc)
    assert took < BOUND_S
    ids = [a["id"] for a in json.loads(proc.stdout)["alerts"]]
    assert ids == ["shim-missing"]
    assert [a.id for a in replayed_alerts(log, tmp_path / "spool")] == ["shim-missing"]


# ---------------------------------------------------------------- 5: a large number freezes the app


def test_a_huge_node_count_is_refused_at_once_with_one_line() -> None:
    """Before: `plan --set cluster.nodes=100000007` ran divisors() up to 10^8 (~30 s, uninterruptible)."""
    proc, took = cli("plan", "--set", "cluster.nodes=100000007", timeout=60, real=True)
    line = one_line(proc)
    assert proc.returncode == 1 and took < BOUND_S, (took, line)
    assert "cluster.nodes" in line and "4096" in line


def test_every_whole_number_at_its_cap_is_checked_in_bounded_time() -> None:
    """The plan form re-checks on every keystroke: no field at its largest accepted value (a prime near it,
    the worst case for divisor lists) makes one evaluation slow. Before: heads near 2^24 looped to 2^24."""
    base = load_preset_dict("nemotron-3-ultra-550b-a55b")
    prime = 16777213  # the largest prime below 2^24 = MAX_SPEC_INT
    assert prime <= MAX_SPEC_INT
    fields = [
        f"{section}.{name}"
        for section, model in RunSpec.model_fields.items()
        if isinstance(model.annotation, type) and hasattr(model.annotation, "model_fields")
        for name, info in model.annotation.model_fields.items()
        if info.annotation in (int, int | None)
    ]
    assert "model.num_attention_heads" in fields and "train.pp" in fields
    slowest = (0.0, "")
    for key in fields:
        t0 = time.monotonic()
        result = evaluate(base, {key: str(prime)}, run_id="260101-000000-000", address="http://127.0.0.1:1")
        took = time.monotonic() - t0
        slowest = max(slowest, (took, key))
        assert result is not None
    assert slowest[0] < 1.0, slowest


@pytest.mark.parametrize("value", ["nan", "inf", "-inf", "1e999", "Infinity"])
def test_non_finite_numbers_are_refused_where_the_recipe_needs_finite_ones(value: str) -> None:
    """Before: `--set optimizer.lr=nan` planned a job with `--lr nan`."""
    proc, _ = cli("plan", "--set", f"optimizer.lr={value}")
    line = one_line(proc)
    assert proc.returncode == 1 and "optimizer.lr" in line and "finite" in line
    assert "--lr nan" not in proc.stdout and "--lr inf" not in proc.stdout
    proc, _ = cli("plan", "--set", f"cluster.gpu_memory_gb={value}")
    assert proc.returncode == 1 and "cluster.gpu_memory_gb" in one_line(proc)


def test_a_five_thousand_digit_value_is_one_short_line() -> None:
    """Before: ValueError (int string conversion limit) out of the --set parser: "internal error"."""
    proc, took = cli("plan", "--set", f"cluster.nodes={HUGE_INT}")
    line = one_line(proc)
    assert proc.returncode == 1 and took < BOUND_S and len(line) < 400 and "cluster.nodes" in line


# ---------------------------------------------------------------- 6: things that hang or pile up


def test_special_files_are_refused_by_type_by_every_reader(tmp_path: Path) -> None:
    """One helper: a FIFO or a device is never opened for reading (before: metrics said "no such log file" of
    a FIFO, and replay blocked on it or spun on /dev/zero)."""
    from backend.regular_files import NotRegularFileError, open_regular

    fifo = tmp_path / "run.log"
    os.mkfifo(fifo)
    for special, kind in ((fifo, "FIFO"), (Path("/dev/zero"), "character device")):
        with pytest.raises(NotRegularFileError, match=kind):
            open_regular(special)
        proc, took = cli("metrics", "--from-log", str(special))
        assert proc.returncode == 1 and kind in one_line(proc) and took < BOUND_S
        proc, took = cli("replay", str(special), real=special == fifo)
        assert proc.returncode == 1 and kind in one_line(proc) and took < BOUND_S
        with pytest.raises(ReplayError, match=kind):
            detect_source(special)
    proc, _ = cli("plan", "--preset", str(fifo))
    assert proc.returncode == 1 and "FIFO" in one_line(proc)


def _events(root: Path, lines: list[str]) -> Path:
    events = root / "events"
    events.mkdir(parents=True, exist_ok=True)
    (events / "actor_cell0_rank0.jsonl").write_text("".join(line + "\n" for line in lines))
    return root


def _event(step: int, metrics: dict[str, float]) -> str:
    stamp = (datetime(2026, 8, 21, 10, 0, tzinfo=UTC) + timedelta(seconds=step)).isoformat()
    return json.dumps(
        {
            "timestamp": stamp,
            "type": "metric",
            "source": {"component": "actor", "cell_index": 0, "rank_within_cell": 0},
            "metrics": {"train/step": step, **metrics},
        }
    )


def test_a_dump_dir_holding_a_fifo_neither_hangs_metrics_nor_the_reader(tmp_path: Path) -> None:
    """Before: `metrics --from-dump` blocked forever opening the FIFO (killed by the timeout here)."""
    dump = _events(tmp_path / "dump", [_event(0, {"train/loss": 0.5}), _event(1, {"train/loss": 0.4})])
    os.mkfifo(dump / "events" / "zz_fifo.jsonl")
    proc, took = cli("metrics", "--from-dump", str(dump))
    assert_clean(proc)
    assert proc.returncode == 0 and took < BOUND_S
    assert "FIFO" in proc.stderr  # the warning names the refused file
    reader = DumpReader(dump)
    assert len(reader.poll().records) == 2 and any("FIFO" in r for r in reader.refused)


async def test_replay_of_a_dump_dir_with_a_fifo_finishes_and_quits(tmp_path: Path) -> None:
    """Before: replay's loader thread blocked on the FIFO for
    good (the app's q left it, and the process, behind)."""
    from app_helpers import PilotApp
    from waiting import until

    from backend.settings import Settings

    dump = _events(tmp_path / "dump", [_event(s, {"train/loss": 0.5 - s / 10}) for s in range(3)])
    os.mkfifo(dump / "events" / "fifo.jsonl")
    session = ReplaySession(detect_source(dump), tmp_path / "spool")
    monitor = session.monitor
    assert monitor is not None
    app = PilotApp(Settings(state_dir=tmp_path / "state"), replay=session, watchdog=False)
    t0 = time.monotonic()
    async with app.run_test(size=(120, 40)) as pilot:
        await until(
            pilot,
            lambda: monitor.collector.records.get("step") == 3 and len(session.store) == 3,
            "the replay to read the dump past its FIFO",
            BOUND_S,
        )
        await pilot.press("q")
    assert not app.is_running and time.monotonic() - t0 < 2 * BOUND_S
    session.close()


def test_hostile_dump_lines_are_counted_and_sampled_never_a_crash(tmp_path: Path) -> None:
    """Before: RecursionError (deep nesting) / OverflowError (a 400-digit number) ended `metrics` half-way."""
    dump = _events(
        tmp_path / "dump",
        [
            _event(0, {"train/loss": 0.5}),
            '{"type": "metric", "x": ' + DEEP + "}",
            '{"type": "metric", "metrics": {"train/step": 1, "train/loss": ' + HUGE_INT + "}}",
            '{"type": "metric", "metrics": {' + ",".join(f'"k{i}": 1' for i in range(30000)) + "}}",
            "\x1b]52;c;aGk=\x07 not json",
            _event(1, {"train/loss": 0.4}),
        ],
    )
    proc, took = cli("metrics", "--from-dump", str(dump), "--json")
    assert_clean(proc)
    assert proc.returncode == 0 and took < BOUND_S
    out = json.loads(proc.stdout)
    assert out["series"]["train/loss"] == [[0, 0.5], [1, 0.4]]
    assert any("4 malformed lines skipped" in p for p in out["problems"]), out["problems"]
    assert "\x1b" not in proc.stderr and "\x1b" not in proc.stdout


def test_bounded_json_limits_count_structure_not_string_contents() -> None:
    from backend.signals.bounded_json import DUMP_LINE, JsonLimitError
    from backend.signals.bounded_json import loads as bounded_loads

    with pytest.raises(JsonLimitError, match="nested deeper"):
        bounded_loads(DEEP, DUMP_LINE)
    with pytest.raises(JsonLimitError, match="digits"):
        bounded_loads(HUGE_INT, DUMP_LINE)
    with pytest.raises(JsonLimitError, match="items"):
        bounded_loads("[" + ",".join("1" * 30000) + "]", DUMP_LINE)
    assert bounded_loads('{"s": "' + "[" * 100 + "9" * 100 + '"}', DUMP_LINE)["s"].startswith(
        "[["
    )  # inside a string
    assert bounded_loads("[" * 32 + "]" * 32, DUMP_LINE) is not None  # exactly the depth limit


def test_a_huge_integer_metric_in_a_log_reads_as_infinity_not_a_crash(tmp_path: Path) -> None:
    """Before: float() of a 350-digit int raised OverflowError out of `metrics --from-log`."""
    log = tmp_path / "run.log"
    log.write_text(step_line(1, 1, 0, "{'train/loss': 1" + "0" * 350 + ", 'train/step': 0}") + "\n")
    proc, _ = cli("metrics", "--from-log", str(log), "--json")
    assert_clean(proc)
    out = json.loads(proc.stdout)
    assert out["series"]["train/loss"] == [[0, None]] and "loss-nonfinite" in [a["id"] for a in out["alerts"]]


def test_nan_and_infinity_in_a_dump_give_strict_json_with_a_note(tmp_path: Path) -> None:
    """Before: an Infinity step reached `json.dump(..., allow_nan=False)`, which stopped half-way."""
    dump = _events(
        tmp_path / "dump",
        [
            '{"type": "metric", "timestamp": "2026-08-21T10:00:00Z", "source": {"component": "actor"}, '
            '"metrics": {"train/step": Infinity, "train/loss": NaN}}',
            '{"type": "metric", "timestamp": "2026-08-21T10:00:01Z", "source": {"component": "actor"}, '
            '"metrics": {"train/step": 1, "train/loss": NaN, "train/grad_norm": -Infinity}}',
            _event(2, {"train/loss": 0.3}),
        ],
    )
    proc, _ = cli("metrics", "--from-dump", str(dump), "--json")
    assert_clean(proc)

    def refuse(name: str) -> None:
        raise AssertionError(f"{name} in the JSON output")

    out = json.loads(proc.stdout, parse_constant=refuse)
    assert out["series"]["train/loss"] == [[1, None], [2, 0.3]]
    assert out["notes"] and "NaN or Infinity" in out["notes"][0]
    assert any("NaN/Infinity step" in p for p in out["problems"])


def test_a_log_inventing_keys_stays_bounded_and_says_so(tmp_path: Path) -> None:
    """500 new metric keys per line, 1000 lines: before, one series each (0.5M series, ~650 MB); now the
    series are capped and the `series-capped` blind spot names the dropped keys."""
    log = tmp_path / "keys.log"
    with log.open("w") as fh:
        for n in range(1000):
            keys = ", ".join(f"'train/k{n}_{j}': 1.0" for j in range(500))
            fh.write(step_line(1, 1, n, f"{{'train/step': {n}, {keys}}}") + "\n")
    before = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss
    proc, took = cli("metrics", "--from-log", str(log), "--json", timeout=60, real=True)
    peak_mb = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss / 1024
    assert_clean(proc)
    assert proc.returncode == 3 and took < 30  # 3: a blind spot, printed on stderr
    out = json.loads(proc.stdout)
    assert len(out["series"]) == MAX_SERIES
    capped = [a for a in out["alerts"] if a["id"] == "series-capped"]
    assert capped and "dropped" in capped[0]["message"] and "train/k" in capped[0]["message"]
    assert before > 1024 * 400 or peak_mb < 400, peak_mb  # only meaningful when no earlier child was bigger


def test_series_cap_in_the_monitor_counts_every_dropped_key() -> None:
    """Before: every key became a series; no `dropped_keys`, no alert."""
    monitor = RunMonitor()
    keys = ", ".join(f"'train/x{j}': 1.0" for j in range(MAX_SERIES + 50))
    monitor.feed_text(step_line(1, 1, 0, f"{{'train/step': 0, {keys}}}") + "\n")
    assert len(monitor.collector.series.by_key) == MAX_SERIES
    assert monitor.collector.series.dropped_keys == 50
    alert = next(a for a in monitor.alerts.alerts if a.id == "series-capped")
    assert alert.blind and alert.count == 50 and math.isfinite(alert.ts)


# ---------------------------------------------------------------- 4, live: the real Ray cluster


@pytest.mark.ray
@pytest.mark.timeout(300)
async def test_a_train_actor_without_the_shim_is_critical_live_in_metrics_and_replay(
    ray_cluster, tmp_path: Path
) -> None:
    """A console-launched simulated run on three nodes whose train actor 1 starts without the shim's setup
    hook (`--sim-shim-off-rank 1`): the live app, `metrics --job` and a replay of its saved log each raise the
    critical `shim-missing` naming that actor's process and
    no other. Before: nothing called on_shim_missing."""
    import re

    from app_helpers import MODELS, RUN_ID, PilotApp
    from runhelp import cli as console_cli
    from runhelp import launch_when_free, sim_spec, stop_quietly
    from waiting import until

    from backend.cluster.controller import RunController
    from backend.cluster.dashboard import RayClient
    from backend.sanitize import sanitize_text
    from backend.settings import Settings
    from console.views.events import EventsView

    nodes = 3  # head + 2 workers: one train actor per node
    spec = sim_spec(
        tmp_path, nodes=nodes, sim="--sim-forever --sim-shim-off-rank 1", more=["batch.global_batch_size=48"]
    )
    model = tmp_path / "models" / spec.model.name
    (model / "config.json").write_text(
        json.dumps(
            {
                "architectures": ["NemotronHForCausalLM"],
                "model_type": "nemotron_h",
                "hybrid_override_pattern": "ME*E",
                "n_routed_experts": 512,
                "num_experts_per_tok": 22,
                "moe_intermediate_size": 5120,
                "moe_shared_expert_intermediate_size": 10240,
                "moe_latent_size": 2048,
                "routed_scaling_factor": 5.0,
                "n_group": 1,
                "topk_group": 1,
                "num_nextn_predict_layers": 1,
                "mtp_hybrid_override_pattern": "*E",
            }
        )
    )
    prefix = re.compile(r"^\((?:\w*TrainRayActor\w* )?pid=(\d+)")  # a train actor's, or the hook's `(pid=N)`
    async with RayClient(ray_cluster.address, timeout=30.0) as client:
        ctl = RunController(client, state_dir=tmp_path / "state", poll_s=0.5)
        job = await launch_when_free(ctl, spec)
        try:
            lines: list[str] = []

            async def trained() -> bool:  # every actor's first lines and a few train steps are in the log
                lines[:] = [
                    sanitize_text(line) async for line in client.read_log(job.id)
                ]  # Ray's colours off
                train = {
                    m.group(1) for line in lines if "TrainRayActor" in line and (m := prefix.match(line))
                }
                steps = sum(1 for line in lines if re.search(r"\bstep \d+: \{", line))
                return len(train) == nodes and steps >= 6

            await until(
                None,
                trained,
                lambda: (
                    "three train actors and six train steps in the log; it ends:\n" + "\n".join(lines[-25:])
                ),
                150,
                interval=1.0,
            )
            train_pids = {
                m.group(1) for line in lines if "TrainRayActor" in line and (m := prefix.match(line))
            }
            shim_pids = {
                m.group(1) for line in lines if logline.parse(line) is not None and (m := prefix.match(line))
            }
            assert len(train_pids) == nodes and len(shim_pids & train_pids) == nodes - 1, (
                train_pids,
                shim_pids,
            )
            (off,) = train_pids - shim_pids

            def names_only_off(message: str) -> bool:
                return f"pid={off}" in message and not any(f"pid={p}" in message for p in shim_pids)

            # the live app, attached to the running job
            app = PilotApp(
                Settings(address=ray_cluster.address, state_dir=tmp_path / "app"),
                job=job.id,
                watchdog=False,
                preview_run_id=RUN_ID,
                model_dir=str(MODELS),
            )
            async with app.run_test(size=(160, 45)) as pilot:
                await pilot.press("4")
                events = app.query_one(EventsView)
                found = await until(
                    pilot,
                    lambda: [a for a in events.alerts if a.id == "shim-missing"],
                    lambda: f"shim-missing in Events (it holds {[a.id for a in events.alerts]})",
                    90,
                )
                assert found[0].severity == "critical" and names_only_off(found[0].message), found[0].message
                await pilot.press("q")

            # `metrics --job`: the runtime env says the job carries the shim
            proc = console_cli(ray_cluster.address, tmp_path / "cli", "metrics", "--job", job.id, "--json")
            assert_clean(proc)
            missing = [a for a in json.loads(proc.stdout)["alerts"] if a["id"] == "shim-missing"]
            assert len(missing) == 1 and names_only_off(missing[0]["message"]), proc.stdout[-2000:]

            # replay of the saved log
            saved = tmp_path / "job.log"
            saved.write_text("\n".join(lines) + "\n")
            replayed = [a for a in replayed_alerts(saved, tmp_path / "spool") if a.id == "shim-missing"]
            assert len(replayed) == 1 and names_only_off(replayed[0].message)
        finally:
            await stop_quietly(client, job.id)
