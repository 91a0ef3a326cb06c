"""Nodes in the order an operator counts them (`node-2` before `node-10`), through the one key every listing
uses: the cluster snapshot (fleet pane, `nodes`, `status`),
the stacks' groups and the phase timeline's lanes."""

from __future__ import annotations

import argparse
from typing import Any

import pytest
from counted_nodes import COUNTED, counted_nodes_summary

from backend.cluster.stack_groups import ProcessStack, group, parse_process
from backend.cluster.telemetry import TelemetryPoller, parse_nodes_summary
from backend.natural_order import natural_key
from backend.signals.dump_reader import PhaseEvent
from backend.signals.rank_phases import RankPhases
from console.commands import nodes


def test_numbers_compare_as_numbers() -> None:
    assert sorted(["node-10", "node-2", "node-1", "node-11"], key=natural_key) == [
        "node-1",
        "node-2",
        "node-10",
        "node-11",
    ]
    assert sorted(["10.0.0.12", "10.0.0.9", "10.0.1.1"], key=natural_key) == [
        "10.0.0.9",
        "10.0.0.12",
        "10.0.1.1",
    ]
    assert sorted(["Node-3", "node-2"], key=natural_key) == ["node-2", "Node-3"]  # case does not decide


def test_ties_keep_one_order_and_odd_text_sorts() -> None:
    assert sorted(["node-1", "node-01"], key=natural_key) == sorted(["node-01", "node-1"], key=natural_key)
    assert natural_key("node-01") != natural_key("node-1")
    assert sorted(["x²", "x1", "", "٣"], key=natural_key)  # a superscript, an Arabic-Indic digit: no error


def test_cluster_snapshot_lists_nodes_in_counting_order() -> None:
    snap = parse_nodes_summary(counted_nodes_summary(), taken_at=1796013861.0)
    assert [n.name for n in snap.nodes] == COUNTED


def test_stack_groups_list_their_processes_node_by_node_in_counting_order() -> None:
    stack = {
        "pid": 0,
        "cmd": "ray::MegatronTrainRayActor.train",
        "threads": [
            {
                "name": "MainThread",
                "tid": 1,
                "active": True,
                "frames": [{"name": "allreduce", "file": "train.py", "line": 1}],
            }
        ],
    }
    procs = [
        parse_process(f"id{n}", n, {**stack, "pid": 100 + i}, {}) for i, n in enumerate(reversed(COUNTED))
    ]
    read = [p for p in procs if isinstance(p, ProcessStack)]
    assert read == procs  # every stack parsed: none came back Unreadable
    (only,) = group(read)
    assert [p.node_label for p in only.processes] == COUNTED


def test_phase_timeline_lanes_go_node_by_node_in_counting_order() -> None:
    phases = RankPhases()
    for rank, node in enumerate(reversed(COUNTED)):
        phases.add_event(PhaseEvent("actor_train", node, rank, "train", 100.0, 109.0))
    assert [lane.node for lane in phases.view().lanes] == COUNTED


def test_nodes_command_prints_nodes_in_counting_order(monkeypatch: pytest.MonkeyPatch, capsys) -> None:
    """`ultra-console nodes`, its cluster replaced by the twelve-node summary (the command's own printing)."""

    async def poll_once(self: TelemetryPoller) -> Any:
        return parse_nodes_summary(counted_nodes_summary(), taken_at=1796013861.0)

    def run_with(args: argparse.Namespace, body: Any) -> int:
        import asyncio

        return asyncio.run(body(argparse.Namespace(client=None), None))

    monkeypatch.setattr(TelemetryPoller, "poll_once", poll_once)
    monkeypatch.setattr(nodes, "run_with", run_with)
    assert nodes.run(argparse.Namespace(json=False)) == 0
    listed = [line.split()[0] for line in capsys.readouterr().out.splitlines()[1:]]
    assert listed == COUNTED
