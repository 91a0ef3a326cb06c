"""Stacks of a job's processes: normalised, grouped smallest first, sanitised before any terminal or file."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from backend.cluster.stack_groups import ProcessStack, StacksReport, Unreadable, parse_process
from backend.cluster.stacks import save_report


def _stack(parsed: ProcessStack | Unreadable) -> ProcessStack:
    assert isinstance(parsed, ProcessStack), parsed
    return parsed


def frames(*names: str, line: int = 10) -> list[dict[str, Any]]:
    return [
        {
            "name": n,
            "file": "train.py" if not n.startswith("Worker") else "ray/_private/worker.py",
            "line": line + i,
        }
        for i, n in enumerate(names)
    ]


def item(
    pid: int, inner: str, *, tid: int = 1, line: int = 10, title: str = "ray::MegatronTrainRayActor.train"
) -> dict[str, Any]:
    main = frames(inner, "train_step", "MegatronTrainRayActor.train", "Worker.main_loop", line=line)
    return {
        "pid": pid,
        "cmd": title,
        "threads": [
            {"name": "MainThread", "tid": tid, "active": False, "frames": main},
            {"name": "PythonGCThread", "tid": tid + 1, "active": False, "frames": frames("Event.wait")},
        ],
    }


def test_seven_in_one_function_and_the_odd_one_apart_smallest_first() -> None:
    procs = [
        _stack(
            parse_process(
                "n1" if pid < 4 else "n2",
                "node-1" if pid < 4 else "node-2",
                item(pid, "allreduce", tid=1000 + pid, line=pid),
                {3: 3},
            )
        )  # tids and lines differ
        for pid in range(7)
    ]
    odd = _stack(parse_process("n3", "node-3", item(4411, "recv", tid=9), {4411: 97}))
    report = StacksReport.build("job-1", 0.0, [*procs, odd], nodes_asked=3)
    assert [g.size for g in report.groups] == [1, 7]
    assert report.groups[0].processes[0].pid == 4411
    assert report.groups[0].line() == (
        "1 rank (node node-3, rank 97, MegatronTrainRayActor pid 4411): "
        "recv ← train_step ← MegatronTrainRayActor.train"
    )
    assert report.groups[1].line().startswith("7 processes: allreduce ← train_step")


def test_hostile_stack_text_is_sanitised_in_lines_json_and_the_saved_file(tmp_path: Path) -> None:
    evil = item(5, "recv\x1b]52;c;cGF3bmVk\x07\x1b[2J")
    evil["cmd"] = "ray::X\x1b[31m.train"
    report = StacksReport.build(
        "job/../../x", 0.0, [_stack(parse_process("n", "node\x9b1", evil, {}))], nodes_asked=1
    )
    text = "\n".join(report.lines()) + str(report.to_json()) + report.full_text()
    assert "\x1b" not in text and "\x07" not in text and "\x9b" not in text
    path = save_report(report, tmp_path)
    assert path.parent == tmp_path / "stacks" and "/" not in path.name.replace(".txt", "")
    saved = path.read_text()
    assert "\x1b" not in saved and "MegatronTrainRayActor.train (train.py:12)" in saved


def test_unreadable_processes_say_why_and_non_python_ones_are_one_line() -> None:
    report = StacksReport.build(
        "j",
        0.0,
        [],
        unreadable=tuple(
            parse_process("n", "node-1", x, {})
            for x in (
                {
                    "pid": 7,
                    "cmd": "ray::A",
                    "kind": "ptrace",
                    "error": "Operation not permitted (os error 1)",
                },
                {
                    "pid": 8,
                    "cmd": "/bin/sh -c python3 train.py",
                    "kind": "not_python",
                    "error": "Failed to find python",
                },
                {"pid": 9, "cmd": "/bin/sh -c x", "kind": "not_python", "error": "Failed to find python"},
            )
        ),
        nodes_asked=1,
    )
    assert report.lines() == [
        "unreadable: pid 7 on node node-1 (ray::A): Operation not permitted (os error 1)",
        "not Python (no Python stack): 2 process(es) of the job: sh",
    ]
