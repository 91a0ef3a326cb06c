"""Every line shape of real miles logs (miles-log-formats.md §1-§3), each giving exact series and alerts.

The runs come from tests/support/miles_log_shapes.py, which also computes the series they must give; each is
read through the real ingest path (RunLog: store sanitiser -> listener -> RunMonitor).
"""

from __future__ import annotations

import json
import math

import pytest
from miles_log_shapes import (
    ACTOR_DIED,
    HEALTH_NOISE,
    NAN_RESULT,
    OLD_TORCH_OOM,
    OOM_TRACEBACK,
    Shape,
    expected_series,
    text,
)

from backend.signals.filters import FilteredLines, LineFilter
from backend.signals.grammar import parse_line
from backend.signals.ingest import RunLog
from backend.signals.monitor import RunMonitor
from console.cli import main


def read(log: str | bytes, monitor: RunMonitor | None = None) -> RunMonitor:
    monitor = monitor or RunMonitor()
    with RunLog.scratch(monitor) as run_log:
        run_log.add(log)
        run_log.store.flush()
    return monitor


def series_of(monitor: RunMonitor) -> dict[str, list[tuple[float, float]]]:
    snap = monitor.metrics_snapshot(now=math.nan).series
    return {
        key: list(snap.by_key[key].finite_points()) for key in snap.keys() if not key.startswith("derived/")
    }


SHAPES = [
    Shape("2026-04"),
    Shape("newest"),
    Shape("bare"),
    Shape("2026-04", colour="esc"),
    Shape("newest", colour="esc", ip="10.0.0.3"),
    Shape("2026-04", colour="caret"),
    Shape("newest", colour="caret"),
    Shape("2026-04", repeat_on_metrics=True),
    Shape("newest", repeat_on_metrics=True, colour="esc"),
    Shape("2026-04", crlf=True),
    Shape("bare", crlf=True),
    Shape("newest", crlf=True, colour="caret"),
    Shape("2026-04", steps_per_rollout=3),
    Shape("bare", steps_per_rollout=1),
]


@pytest.mark.usefixtures("scan_engine")  # every line shape on both scan engines
@pytest.mark.parametrize(
    "shape",
    SHAPES,
    ids=lambda s: "-".join(
        str(v)
        for v in (
            s.format,
            s.colour,
            "repeat" if s.repeat_on_metrics else "",
            "crlf" if s.crlf else "",
            s.ip or "",
            f"{s.steps_per_rollout}spr",
        )
        if v
    ),
)
def test_every_shape_gives_the_exact_series_and_no_alert(shape: Shape) -> None:
    monitor = read(text(shape))
    assert series_of(monitor) == expected_series(shape)
    c = monitor.collector
    steps = shape.rollouts * shape.steps_per_rollout
    # each step dict is printed twice; the second printing is dropped (not counted, not a point)
    assert (c.records["step"], c.duplicates) == (steps, steps)
    assert c.records["perf-rollout"] == c.records["perf-train"] == c.records["rollout"] == shape.rollouts
    assert c.steps_per_rollout() == shape.steps_per_rollout  # from the data, never assumed
    assert c.problem_count == 0
    assert [a.id for a in monitor.alerts.alerts] == []


def test_the_two_perf_dicts_are_told_apart_by_keys_alone() -> None:
    """No file, actor or bracket name: bare lines, and the train side's first."""
    monitor = read(
        "perf 0: {'perf/actor_train_time': 9.5, 'perf/step_time': 57.5}\n"
        "perf 0: {'perf/tokens_per_gpu_per_sec': 13.5, 'rollout/response_len/mean': 214.5, "
        "'perf/rollout_time': 30.0}\n"
    )
    assert monitor.collector.records == {"perf-train": 1, "perf-rollout": 1}
    assert series_of(monitor)["perf/tokens_per_gpu_per_sec"] == [(0.0, 13.5)]


def test_2026_04_and_newest_give_identical_series_through_metrics_from_log(tmp_path, capsys) -> None:
    outputs = []
    for fmt in ("2026-04", "newest"):
        path = tmp_path / f"{fmt}.log"
        path.write_text(text(Shape(fmt, rollouts=4, colour="esc")), encoding="utf-8")
        assert main(["metrics", "--from-log", str(path), "--json"]) == 0
        out, err = capsys.readouterr()
        assert err == ""
        outputs.append(json.loads(out))
    old, new = outputs
    assert old["series"] == new["series"] and old["latest"] == new["latest"]
    assert old["series"]["train/ppo_kl"][7] == [7, -3.1e-05 * 8] and len(old["series"]["train/loss"]) == 8


# ---------------------------------------------------------------- the grammar, layer by layer


@pytest.mark.parametrize(
    ("line", "fields"),
    [
        (
            "(MegatronTrainRayActor pid=4101) [2026-03-02 10:00:05] log_utils.py:443 - step 6: {}",
            dict(
                actor="MegatronTrainRayActor",
                pid=4101,
                ip=None,
                ts="2026-03-02 10:00:05",
                proc=None,
                rank=None,
                file="log_utils.py",
                lineno=443,
                message="step 6: {}",
                shape="timestamp",
            ),
        ),
        (
            "\x1b[36m(MegatronTrainRayActorWithConcurrencyGroups pid=4101, ip=10.0.0.3)\x1b[0m [2026-10-02 "
            "10:00:05.120 actor_cell0_rank7] log_utils.py:544 - step 6: {}",
            dict(
                actor="MegatronTrainRayActorWithConcurrencyGroups",
                ip="10.0.0.3",
                ts="2026-10-02 10:00:05.120",
                proc="actor_cell0_rank7",
                rank=7,
                lineno=544,
                message="step 6: {}",
                shape="timestamp+process",
            ),
        ),
        (
            (
                "^[[36m(RolloutExecutor pid=9)^[[0m [2026-10-02 "
                "10:00:05.120 rollout_executor] metrics.py:90 - perf 1: {}"
            ),
            dict(actor="RolloutExecutor", pid=9, proc="rollout_executor", rank=None, message="perf 1: {}"),
        ),
        (
            "(SGLangEngine pid=51300) [2026-03-02 10:00:05 TP4 EP4] Decode batch. #running-req: 64",
            dict(
                actor="SGLangEngine",
                tags="TP4 EP4",
                proc=None,
                rank=None,
                message="Decode batch. #running-req: 64",
                shape="timestamp+rank tags",
            ),
        ),
        (
            "(MegatronTrainRayActor pid=1) [2026-03-02 10:00:05] INFO checkpointing.py:69: loading",
            dict(level="INFO", file="checkpointing.py", lineno=69, message="loading"),
        ),
        (
            "(pid=7001) ultra-console shim: hello",
            dict(actor=None, pid=7001, message="ultra-console shim: hello"),
        ),
        ("step 6: {'a': 1}\r", dict(actor=None, ts=None, message="step 6: {'a': 1}", repeat=1, shape="")),
        (
            (
                "(pid=7) GET /health 200 [repeated 12x across cluster] "
                "(Ray deduplicates logs by default. Set RAY_DEDUP_LOGS=0)"
            ),
            dict(pid=7, message="GET /health 200", repeat=12),
        ),
        (
            "  num_rollout ..................... 30",
            dict(actor=None, message="  num_rollout ..................... 30"),
        ),
        ("(autoscaler +1m2s) Adding 1 node(s)", dict(actor="autoscaler", message="Adding 1 node(s)")),
    ],
)
def test_line_layers(line: str, fields: dict[str, object]) -> None:
    parsed = parse_line(line)
    assert {k: getattr(parsed, k) for k in fields} == fields


def test_actor_rank_node_filters_work_on_every_shape(tmp_path) -> None:
    with RunLog.scratch(RunMonitor(rules=[])) as run_log:
        run_log.add(
            text(Shape("2026-04", rollouts=1, ip="10.0.0.3"))
            + text(Shape("newest", rollouts=1))
            + text(Shape("bare", rollouts=1))
        )
        store = run_log.store

        def count(flt: LineFilter) -> int:
            view = FilteredLines(store, flt)
            view.refresh()
            return len(view)

        trains = count(LineFilter(actor="train"))
        assert (
            trains == 2 * (1 + 2 * 2 + 1) + 2
        )  # both versions' train dicts, plus one Megatron INFO line each
        assert count(LineFilter(actor="rollout")) == 2
        # only the newest bracket names a rank: its train dicts and its Megatron INFO line
        assert count(LineFilter(rank=0)) == 1 + 2 * 2 + 1 + 1
        assert count(LineFilter(node="10.0.0.3")) == len(
            [
                ln
                for ln in text(Shape("2026-04", rollouts=1, ip="10.0.0.3")).splitlines()
                if "ip=10.0.0.3" in ln
            ]
        )


# ---------------------------------------------------------------- failures are signals (§3)


def test_cuda_oom_names_gpu_actor_and_memory_and_is_the_failed_runs_cause() -> None:
    monitor = read("\n".join(OOM_TRACEBACK) + "\n")
    by_id = {a.id: a for a in monitor.alerts.alerts}
    assert list(by_id) == ["memory-saver-oom", "cuda-oom", "ray-task-error"]
    oom = by_id["cuda-oom"]
    # the OOM is the cause; the memory saver's warning before it and Ray's report after it are consequences
    assert [(a.id, a.cause) for a in monitor.alerts.alerts] == [
        ("memory-saver-oom", 2),
        ("cuda-oom", 1),
        ("ray-task-error", 2),
    ]
    # the OOM line is a traceback's continuation (no prefix): the traceback's first line names the actor
    assert oom.message == (
        "CUDA out of memory on GPU 3 in MegatronTrainRayActor pid=4101 on 10.0.0.3: asked for "
        "2.10 GiB, 1.02 GiB free of 139.80 GiB"
    )
    assert oom.sample.startswith(
        "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.10 GiB. GPU 3"
    )
    assert by_id["ray-task-error"].message == (
        "OutOfMemoryError raised in MegatronTrainRayActor.train() (pid 4101 on 10.0.0.3)"
    )
    assert by_id["memory-saver-oom"].message.startswith(
        "torch_memory_saver could not allocate GPU memory in MegatronTrainRayActor pid=4101 on 10.0.0.3"
    )
    failed = monitor.on_job_status("FAILED", "Job entrypoint command failed with exit code 1")
    assert failed is not None and failed.message == (
        f"the Ray job failed: {oom.message} (Ray: Job entrypoint command failed with exit code 1)"
    )
    assert monitor.alerts.headline() == f"FAILED: {oom.message}"


def test_cuda_oom_in_the_drivers_traceback_names_the_remote_actor() -> None:
    # the driver re-raises the actor's error: its own traceback inlines the remote one after Ray's line
    driver = [
        "Traceback (most recent call last):",
        '  File "/root/miles/train.py", line 92, in <module>',
        "    ray.get(handles)",
        "ray.exceptions.RayTaskError(OutOfMemoryError): ray::MegatronTrainRayActor.train() (pid=4101, "
        "ip=10.0.0.3, actor_id=abc, repr=<MegatronTrainRayActor object>)",
        '  File "/root/miles/miles/backends/megatron_utils/actor.py", line 571, in train',
        "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.10 GiB. GPU 5 has a total capacity "
        "of 139.80 GiB of which 1.02 GiB is free. Process 4101 has 138.77 GiB memory in use.",
    ]
    oom = next(a for a in read("\n".join(driver) + "\n").alerts.alerts if a.id == "cuda-oom")
    assert oom.message == (
        "CUDA out of memory on GPU 5 in MegatronTrainRayActor pid=4101 on 10.0.0.3: asked for "
        "2.10 GiB, 1.02 GiB free of 139.80 GiB"
    )
    # without Ray's line the same traceback is the driver's own
    own = next(a for a in read("\n".join(driver[:3] + driver[5:]) + "\n").alerts.alerts if a.id == "cuda-oom")
    assert " in the driver: " in own.message


def test_old_torch_oom_and_an_actor_that_died() -> None:
    monitor = read(OLD_TORCH_OOM + "\n" + ACTOR_DIED + "\n")
    messages = {a.id: a.message for a in monitor.alerts.alerts}
    assert (
        messages["cuda-oom"]
        == "CUDA out of memory on GPU 0 in MegatronTrainRayActor pid=4102: asked for 20.00 MiB, "
        "10.12 MiB free of 79.15 GiB"
    )
    assert messages["actor-died"] == (
        "a Ray actor died: RolloutExecutor: The actor died unexpectedly before finishing this task."
    )


def test_nan_result_line_and_nan_values() -> None:
    monitor = read(NAN_RESULT + "\nstep 0: {'train/loss': nan, 'train/ppo_kl': 0.0}\n")
    alerts = [(a.id, a.key) for a in monitor.alerts.alerts]
    assert alerts == [("loss-nonfinite", "train/loss"), ("nan", "RolloutRayActor pid=77")]
    assert monitor.alerts.alerts[1].message == (
        "NaN in RolloutRayActor pid=77: Unexpected result nan for sample 3: training diverged"
    )
    assert monitor.alerts.alerts[1].count == 2  # the step dict's nan is the same divergence


class FakeClock:
    def __init__(self) -> None:
        self.now = 1_000_000.0

    def __call__(self) -> float:
        return self.now


def test_a_hang_is_only_health_checks_for_minutes_while_running() -> None:
    clock = FakeClock()
    monitor = RunMonitor(clock=clock)
    monitor.on_job_status("RUNNING")
    monitor.feed_text(text(Shape("newest", rollouts=1)))
    for _ in range(30):
        monitor.feed_text("\n".join(HEALTH_NOISE) + "\n")
        clock.now += 30
    fired = [a for a in monitor.tick(now=math.nan) if a.id == "run-hang"]
    assert len(fired) == 1 and fired[0].count == 60
    assert fired[0].message == (
        "for 15 min the run has printed only health checks (60 lines) while RUNNING: it looks hung"
    )
    assert "GET /metrics" in fired[0].sample
    monitor.feed_text("(MegatronTrainRayActor pid=1) Timer train start\n")  # the run moves again
    assert [a for a in monitor.tick(now=math.nan) if a.id == "run-hang"] == []


def test_a_running_run_with_no_metric_for_longer_than_a_first_rollout() -> None:
    monitor = RunMonitor(clock=FakeClock())
    monitor.on_job_status("RUNNING")
    monitor.feed_text(
        "[2026-03-02 10:00:00] train.py:24 - Creating placement group with 8 GPUs...\n"
        "(MegatronTrainRayActor pid=1) [2026-03-02 10:31:00] model.py:1 - still loading\n"
    )
    fired = [a for a in monitor.tick(now=monitor.end_of_log()) if a.id == "no-metrics"]
    assert len(fired) == 1 and fired[0].count == 2
    assert fired[0].message.startswith("the run has logged 2 lines over 31 min and no miles metric yet")
    assert fired[0].sample.endswith("still loading")
    assert monitor.alerts.headline() == fired[0].message


@pytest.mark.usefixtures("scan_engine")  # the blind spot on both scan engines
def test_unreadable_metric_lines_are_an_alert_with_a_count_and_a_sample(tmp_path, capsys) -> None:
    log = (
        text(Shape("2026-04", rollouts=1))
        + (
            "(MegatronTrainRayActor pid=5201) [2026-03-02 10:09:00] "
            "log_utils.py:443 - step 2: {'train/lo\n"  # cut before one whole pair: unreadable
        )
        + (
            "(MegatronTrainRayActor pid=5201) <<2026-03-02 10:09:01>> "
            "step 3: {'train/loss': 0.3}\x1b]52;c;AAAA\x07\n"
        )
    )
    prose = "(RolloutManager pid=5100) [2026-03-02 10:09:02] rollout.py:156 - Finish rollout 0: {'n': 1}\n"
    monitor = read(log + prose)  # prose that mentions a rollout is not a metric line, read or unread
    (alert,) = [a for a in monitor.alerts.alerts if a.id == "metrics-unreadable"]
    # the odd `<<ts>> step 3: {...}` label is read past (a whole dict after a separator), the cut one is not
    assert alert.count == 1 and alert.message.startswith("1 metric line(s) in the log could not be read")
    loss = monitor.collector.series.get("train/loss")
    assert loss is not None and loss.values[-1] == 0.3
    assert alert.sample == (
        "(MegatronTrainRayActor pid=5201) [2026-03-02 10:09:00] log_utils.py:443 - step 2: {'train/lo"
    )
    assert monitor.alerts.headline() == alert.message
    path = tmp_path / "bad.log"
    path.write_text(log, encoding="utf-8")
    assert main(["metrics", "--from-log", str(path)]) == 3
    out, err = capsys.readouterr()
    assert err == f"ultra-console: error: {alert.message}; e.g. {alert.sample}\n"
    assert "\x1b" not in out + err and "\x07" not in out + err


def test_a_chart_key_that_never_arrives() -> None:
    """An SFT-like run: step dicts with loss, grad norm and lr only; no train/ppo_kl for the KL chart."""
    monitor = read(
        "".join(
            f"step {i}: {{'train/loss': 0.{i}, 'train/grad_norm': 1.0, 'train/lr-pg_0': 1e-06}}\n"
            for i in range(4)
        )
    )
    (alert,) = [a for a in monitor.alerts.alerts if a.id == "chart-key-missing"]
    assert alert.key == "train/ppo_kl" and alert.count == 4
    assert alert.message == (
        "train/ppo_kl never arrived in 4 metric dicts with its prefix (they hold train/grad_norm, "
        "train/loss, train/lr-pg_0): its chart stays empty"
    )


def test_a_failed_state_before_its_log_lines_is_restated_and_rays_message_is_sanitised() -> None:
    monitor = RunMonitor()
    failed = monitor.on_job_status(
        "FAILED", "Job entrypoint command failed, last logs: \x1b[2m\x1b[36m(Megatron\x1b]52;c;QQ\x07"
    )
    assert failed is not None and "\x1b" not in failed.message and "\x07" not in failed.message
    assert failed.message == "the Ray job failed: Job entrypoint command failed, last logs: (Megatron"
    monitor.feed_text("\n".join(OOM_TRACEBACK) + "\n")  # the log's tail arrives after the state
    (restated,) = [a for a in monitor.alerts.alerts if a.id == "job-failed"]
    assert restated.message.startswith(
        "the Ray job failed: CUDA out of memory on GPU 3 in MegatronTrainRayActor"
    )
    assert restated.message.endswith("(Ray: Job entrypoint command failed, last logs: (Megatron)")
    assert restated.sample.startswith("torch.OutOfMemoryError: CUDA out of memory.")
