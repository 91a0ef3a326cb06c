"""Why it died: every failure catalog kind, in every shape a real log holds it, through the same path the CLI
reads a saved log (store -> sanitiser -> monitor), and the `metrics` command's answer for runs that died."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from failure_shapes import SCENARIOS, Scenario, cases, render

from backend.sanitize import sanitize_text
from backend.signals.failures import FailureScanner, diagnose
from backend.signals.failures.catalog import FailureCatalogError, default_catalog, load_catalog
from backend.signals.monitor import RunMonitor
from console.cli import main
from console.commands.metrics import read_log_file


def read(tmp_path: Path, text: str) -> RunMonitor:
    log = tmp_path / "job.log"
    log.write_text(text, encoding="utf-8")
    monitor = RunMonitor()
    read_log_file(monitor, log)
    monitor.input_ended()  # as `metrics --from-log` and replay do: the saved log is read whole
    return monitor


@pytest.mark.parametrize(("scenario", "shape"), cases(), ids=[f"{s.name}-{shape}" for s, shape in cases()])
def test_every_kind_in_every_shape(tmp_path: Path, scenario: Scenario, shape: str) -> None:
    monitor = read(tmp_path, render(scenario, shape))
    found = monitor.diagnosis()
    want = scenario.expect
    if want is None:
        assert found is None, found and found.to_json()
        return
    assert found is not None
    cause = found.cause
    assert (cause.id, cause.role, cause.node, cause.pid, cause.rank, cause.gpu) == (
        want.id,
        want.role,
        want.node,
        want.pid,
        want.rank,
        want.gpu,
    )
    folded = shape == "replayed" and want.message_if_folded is not None
    for needle in want.message_if_folded if folded and want.message_if_folded else want.message_has:
        assert needle in cause.message, cause.message
    assert tuple(c.id for c in found.consequences) == want.consequences
    if want.frame is not None:
        assert cause.frame == want.frame
    assert (found.doubt is not None) == want.doubt
    assert cause.line and "\x1b" not in cause.line and "^[[" not in cause.line
    assert cause.try_  # every kind says what to try
    # the alerts agree: the cause is marked 1, its consequences 2, and the header says the cause
    marked = {(a.id, a.cause) for a in monitor.alerts.alerts if a.cause is not None}
    assert (cause.id, 1) in marked
    monitor.on_job_status("FAILED", "Job entrypoint command failed with exit code 1")
    assert monitor.alerts.headline() == f"FAILED: {cause.message}"


def test_a_repeat_counts_once() -> None:
    """A replayed tail, Ray's `[repeated Nx]` and the same traceback printed twice are one failure each."""
    scenario = next(s for s in SCENARIOS if s.name == "train OOM")
    scanner = FailureScanner()
    text = sanitize_text(render(scenario, "replayed"))  # as the store hands it on
    scanner.feed(text)
    scanner.feed(text)  # the whole log printed a second time
    found = diagnose(scanner.events)
    assert found is not None
    assert [f.id for f in (found.cause, *found.consequences)] == [
        "cuda-oom",
        "memory-saver-oom",
        "ray-task-error",
        "job-failed",
    ]
    saver = found.consequences[0]
    assert saver.count == 2 * 3  # Ray's "[repeated 3x]", twice


def test_newest_first_paste_is_read_by_its_timestamps() -> None:
    """Pasted newest line first: with stamps on the failures, the earliest is still the cause."""
    lines = [
        "(RolloutManager pid=5100) [2026-10-02 10:00:09.000 rollout_manager] rollout.py:1 - "
        "ray.exceptions.ActorDiedError: The actor died "
        "unexpectedly before finishing this task. class_name: X",
        "(MegatronTrainRayActor pid=4101) [2026-10-02 10:00:03.000 actor_cell0_rank5] log_utils.py:1 - "
        "[torch_memory_saver.cpp] CUresult error: 2 (out of memory) file=a.cpp",
        "(SGLangEngine pid=5300) [2026-10-02 10:00:01.500 TP0] Capture cuda graph failed: RuntimeError: boom",
    ]
    scanner = FailureScanner()
    scanner.feed("\n".join(lines) + "\n")
    found = diagnose(scanner.events)
    assert (
        found is not None
        and found.cause.id == "cuda-graph-capture"
        and found.cause.time == "2026-10-02 10:00:01.500"
    )
    assert [c.id for c in found.consequences] == ["actor-died", "memory-saver-oom"]  # the rest, in log order


def test_chunks_never_change_the_answer() -> None:
    """A live tail delivers a few lines at a time: the diagnosis is the one of the whole log."""
    for scenario in SCENARIOS:
        if scenario.expect is None:
            continue
        text = sanitize_text(render(scenario, "ray"))
        whole = FailureScanner()
        whole.feed(text)
        lines = text.splitlines(keepends=True)
        pieces = FailureScanner()
        for i in range(0, len(lines), 2):
            pieces.feed("".join(lines[i : i + 2]))
        whole.stall_at_end(), pieces.stall_at_end()  # the log is in: a phase it ends in is asked of
        a, b = diagnose(whole.events), diagnose(pieces.events)
        assert a is not None and b is not None
        assert a.to_json() == b.to_json(), scenario.name


def test_a_metric_before_the_error_means_not_at_start() -> None:
    scanner = FailureScanner()
    scanner.feed("step 0: {'train/loss': 0.5}\n")
    scanner.feed(
        "Traceback (most recent call last):\n  File \"x.py\", line 1, in f\n    g()\nKeyError: 'k'\n"
    )
    found = diagnose(scanner.events)
    assert found is not None and found.cause.message == "KeyError: 'k' in the driver"


def test_not_failures() -> None:
    """Stack dumps at a clean exit, a retried error, `succeeded`, prose that mentions errors: nothing."""
    scanner = FailureScanner()
    scanner.feed(
        'Thread 0x00007f (most recent call first):\n  File "a.py", line 3 in run\n'
        "WARNING: ConnectionError: peer reset, will retry in 1 s\n"
        "(RolloutManager pid=1) the ErrorRate metric is 0.0; no Exception raised\n"
        "Job 'raysubmit_1' succeeded\n"
    )
    assert scanner.events == [] and diagnose(scanner.events) is None and scanner.succeeded


def test_every_catalog_example_is_recognised() -> None:
    """The catalog's own examples (also what a prefilter must let through) each raise their kind."""
    catalog = default_catalog()
    for kind in (k for k in catalog.kinds if not k.derived):  # a stall: its scenarios in failure_shapes
        assert kind.examples, f"{kind.id} has no example"
        for example in kind.examples:
            scanner = FailureScanner(catalog)
            context = (
                'Traceback (most recent call last):\n  File "a.py", line 1, in f\n' if kind.generic else ""
            )
            scanner.feed(context + example + "\n")
            assert kind.id in {e.kind for e in scanner.events}, (kind.id, example)


def test_the_catalog_is_checked(tmp_path: Path) -> None:
    bad = tmp_path / "failures.toml"
    bad.write_text(
        '[[kind]]\nid = "x"\ntitle = "x"\ncascade = "root"\nmessage = "m"\nhints = ["a"]\n'
        'patterns = ["(unclosed"]\n',
        encoding="utf-8",
    )
    with pytest.raises(FailureCatalogError, match=r"bad pattern"):
        load_catalog(bad)
    bad.write_text('[[kind]]\nid = "x"\ntitle = "x"\ncascade = "sideways"\nmessage = "m"\n', encoding="utf-8")
    with pytest.raises(FailureCatalogError, match=r"cascade must be one of"):
        load_catalog(bad)


# ---------------------------------------------------------------- the metrics command


def run(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    code = main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


def test_a_run_that_died_before_its_first_metric(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    scenario = next(s for s in SCENARIOS if s.name == "SGLang engine failed at start")
    log = tmp_path / "job.log"
    log.write_text(render(scenario, "pasted"), encoding="utf-8")
    code, out, err = run(capsys, "metrics", "--from-log", str(log), "--json")
    snap = json.loads(out)
    assert code == 4 and snap["series"] == {}
    assert snap["cause"]["id"] == "sglang-scheduler" and snap["cause"]["role"] == "engine"
    assert [c["id"] for c in snap["cause"]["consequences"]] == [
        "engine-exit",
        "ray-task-error",
        "python-error",
    ]
    assert "no-metrics-in-log" in {a["id"] for a in snap["alerts"]}  # no metric: one alert among the others
    assert err.count("\n") == 1 and err.startswith(
        "ultra-console: the run failed: SGLang scheduler exception: "
    )
    code, out, err = run(capsys, "metrics", "--from-log", str(log))
    assert code == 4 and "cause    SGLang scheduler TP3 in SGLangEngine pid=5300 on 10.0.0.4" in out
    assert "  try    " in out and "rollout.mem_fraction" in out and "then   SGLang engine exited" in out


def test_a_log_with_no_metric_and_no_failure_is_a_blind_spot(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    log = tmp_path / "job.log"
    log.write_text(
        "[2026-03-02 10:00:00] train.py:24 - Creating placement group with 8 GPUs...\n", encoding="utf-8"
    )
    code, out, err = run(capsys, "metrics", "--from-log", str(log), "--json")
    assert code == 3 and json.loads(out)["cause"] is None
    assert err.startswith(f"ultra-console: error: the log {log} holds 1 lines and no miles metric")


@pytest.mark.parametrize(
    ("content", "needle"),
    [(b"", "is empty"), (b"  \n\n", "is empty"), (b"\x00\x01\x02ELF" * 100, "is binary")],
)
def test_empty_or_binary_is_bad_input(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], content: bytes, needle: str
) -> None:
    log = tmp_path / "job.log"
    log.write_bytes(content)
    code, out, err = run(capsys, "metrics", "--from-log", str(log))
    assert code == 1 and out == "" and needle in err and err.count("\n") == 1 and "Traceback" not in err


CLEAN = next(s for s in SCENARIOS if s.name == "a clean run with faulthandler dumps and a retried error")


def test_a_clean_log_with_faulthandler_dumps_is_healthy(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from miles_log_shapes import Shape, text

    log = tmp_path / "job.log"
    log.write_text(text(Shape("newest", rollouts=2)) + render(CLEAN, "ray"), encoding="utf-8")
    code, out, err = run(capsys, "metrics", "--from-log", str(log), "--json")
    assert json.loads(out)["cause"] is None and code == 0, err


# ---------------------------------------------------------------- logs a real Ray cluster printed

SIM_FAIL = Path(__file__).resolve().parents[1] / "data" / "sim_fail"


@pytest.mark.parametrize(
    ("log", "want"),
    [
        (
            "train-oom.log",
            ("cuda-oom", "train", "5745", ("memory-saver-oom", "memory-saver-oom", "ray-task-error")),
        ),
        (
            "engine-start.log",
            (
                "sglang-scheduler",
                "engine",
                "6847",
                ("ray-task-error", "python-error", "engine-exit", "actor-died"),
            ),
        ),
        ("host-oom.log", ("host-oom", "train", "7374", ("actor-died", "actor-died"))),
        (  # each rank's teardown ends in faulthandler's `Fatal Python error: Aborted`: a consequence
            "nccl-timeout.log",
            (
                "nccl-timeout",
                "train",
                "7981",
                ("actor-died", "fatal-signal", "actor-died", "fatal-signal", "actor-died"),
            ),
        ),
    ],
)
def test_the_simulated_deaths_as_ray_logged_them(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], log: str, want: tuple[str, str, str, tuple[str, ...]]
) -> None:
    """Two-node job logs of `--sim-fail KIND` captured from a real Ray 2.60 cluster: Ray's own prefixes, its
    colour codes inside `RayTaskError` lines, its dedup folding one node's ranks, the raylet's lines."""
    code, out, err = run(capsys, "metrics", "--from-log", str(SIM_FAIL / log), "--json")
    cause = json.loads(out)["cause"]
    assert code == 4 and err.startswith("ultra-console: the run failed: ")
    assert (cause["id"], cause["role"], cause["pid"]) == want[:3]
    assert tuple(c["id"] for c in cause["consequences"]) == want[3]
    if (
        log == "nccl-timeout.log"
    ):  # ranks 8-13 are folded into rank 14's "[repeated 7x]": which did not is unknown
        assert (
            "Ray folded 6 more watchdog line(s)" in cause["message"] and "rank(s) 0, 1, 2" in cause["message"]
        )
    if log == "host-oom.log":
        assert cause["actor"] == "MegatronTrainRayActorWithConcurrencyGroups" and cause["node"] == "127.0.0.1"
        # the node named once: "… pid=7374 for host memory on node 127.0.0.1", never "… on 127.0.0.1 for …"
        assert cause["message"].count("127.0.0.1") == 1 and "on node 127.0.0.1" in cause["message"], cause


@pytest.mark.parametrize("status", ["FAILED", "STOPPED", "RUNNING", "SUCCEEDED"])
def test_a_stall_the_log_ends_in_is_the_cause_only_once_the_run_is_over(status: str) -> None:
    """Live: while the run goes on (or after it succeeded) an open phase at the log's end is no cause; once
    Ray says FAILED or STOPPED it is, with its phase and how long it stood still."""
    scenario = next(s for s in SCENARIOS if s.name == "a weight sync stood still and the log ends there")
    monitor = RunMonitor()
    monitor.feed_text(sanitize_text(render(scenario, "ray")))
    assert monitor.diagnosis() is None
    monitor.on_job_status(status)
    found = monitor.diagnosis()
    if status in ("RUNNING", "SUCCEEDED"):
        assert found is None, found and found.to_json()
        return
    assert found is not None and (found.cause.id, found.cause.role, found.cause.pid) == (
        "stall",
        "train",
        "4101",
    )
    assert "update_weights stood still for 19m01s" in found.cause.message and not found.consequences


def test_a_consequence_whose_message_starts_with_its_title_says_it_once(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    log = tmp_path / "job.log"
    log.write_text(
        "(raylet, ip=10.0.0.3) [2026-12-01 10:00:05,123 E 812 812] (raylet) node_manager.cc:3069: 1 Workers "
        "(tasks / actors) killed due to memory pressure (OOM), 0 Workers crashed due to other reasons at "
        "node (ID: 4f2a, IP: 10.0.0.3) over the last time period.\n"
        "ray.exceptions.ActorDiedError: The actor died unexpectedly before finishing this task.\n"
        "\tclass_name: MegatronTrainRayActor\n\tpid: 4101\n\tip: 10.0.0.3\n"
        "The actor is dead because its worker process has died. Worker exit type: NODE_OUT_OF_MEMORY\n",
        encoding="utf-8",
    )
    code, out, _ = run(capsys, "metrics", "--from-log", str(log))
    then = [line for line in out.splitlines() if line.strip().startswith("then")]
    assert code == 4 and then, out
    assert not any("a Ray actor died: a Ray actor died" in line for line in then), then
    assert any(line.strip().startswith("then   a Ray actor died: MegatronTrainRayActor") for line in then), (
        then
    )


def test_an_actor_block_killed_for_host_memory_reads_as_one_sentence(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """The block's reason sentence ("its worker process has died…") is the actor-died kind's, never glued
    after the host-OOM message's own words (it read "for host memoryits worker process has died")."""
    log = tmp_path / "job.log"
    log.write_text(
        "ray.exceptions.ActorDiedError: The actor died unexpectedly before finishing this task.\n"
        "\tclass_name: create_colocated_worker_cls.<locals>.WorkerDict\n\tpid: 77410\n\tip: 10.128.4.17\n"
        "The actor is dead because its worker process has died. Worker exit type: NODE_OUT_OF_MEMORY Worker "
        "exit detail: Task was killed due to the node running low on memory.\n",
        encoding="utf-8",
    )
    code, out, _ = run(capsys, "metrics", "--from-log", str(log), "--json")
    cause = json.loads(out)["cause"]
    assert code == 4 and cause["id"] == "host-oom", cause
    assert cause["message"].startswith("Ray killed create_colocated_worker_cls.<locals>.WorkerDict pid=77410")
    assert "memoryits" not in cause["message"] and "for host memory" in cause["message"], cause["message"]
