"""`cleanup`'s decisions without a cluster (its Ray path is tests/cluster/test_leftovers_cluster.py): what it
prints and its exit status for nothing left, a holder it cannot identify, kills that worked or failed."""

from __future__ import annotations

import argparse
import asyncio
import json

import pytest

from backend.cluster.leftovers import Leftover, LeftoverReport, NodeCheck, ReapAction, ReapResult
from console.commands import cleanup

NODE = NodeCheck("n1abcdef99", "node-1", answered=True)


class FakeController:
    """The three controller calls cleanup makes, answered from a report and the kill results."""

    def __init__(self, report: LeftoverReport, results: list[ReapResult]) -> None:
        self.report, self.results = report, results
        self.killed: list[Leftover] = []

    async def attach(self, job: str | None) -> None:
        return None

    async def leftover_nodes(self) -> list[str]:
        return ["n1abcdef99"]

    async def leftovers(self) -> LeftoverReport:
        return self.report

    async def cleanup(self, items: list[Leftover]) -> list[ReapResult]:
        self.killed = items
        return self.results


def _run(
    monkeypatch, report: LeftoverReport, results: list[ReapResult], *, as_json: bool
) -> tuple[int, list]:
    ctl = FakeController(report, results)
    monkeypatch.setattr(cleanup, "run_with", lambda args, body: asyncio.run(body(ctl, None)))
    args = argparse.Namespace(json=as_json, yes=True, job=None, address=None, token=None, readonly=False)
    return cleanup.run(args), ctl.killed


def test_nothing_left_exits_0_and_a_stranger_exits_1(monkeypatch, capsys) -> None:
    code, killed = _run(monkeypatch, LeftoverReport("job-1", (NODE,)), [], as_json=False)
    assert code == 0 and killed == []
    assert "no leftover GPU processes" in capsys.readouterr().out
    stranger = Leftover("n1abcdef99", "node-1", 0, 77, 900, identity="unidentified", reason="env: unreadable")
    code, killed = _run(monkeypatch, LeftoverReport("job-1", (NODE,), (stranger,)), [], as_json=True)
    doc = json.loads(capsys.readouterr().out)
    assert code == 1 and killed == []  # never signalled, and the exit status says a holder is unknown
    assert doc["unidentified"][0]["pid"] == 77 and doc["leftovers"] == [] and doc["results"] == []


@pytest.mark.parametrize(("action", "code"), [("killed", 0), ("failed", 1)])
def test_kills_are_reported_and_a_failed_one_exits_1(
    monkeypatch, capsys, action: ReapAction, code: int
) -> None:
    mine = Leftover("n1abcdef99", "node-1", 0, 4411, 60000)
    report = LeftoverReport("job-1", (NODE,), (mine,))
    result = ReapResult("n1abcdef99", 4411, action, signal="SIGTERM" if action == "killed" else "")
    got, killed = _run(monkeypatch, report, [result], as_json=False)
    assert got == code and killed == [mine]
    out = capsys.readouterr().out
    assert "these processes of the job still hold GPU memory:" in out
    assert f"pid 4411 on n1abcdef: {action}" in out
    assert ("(SIGTERM)" in out) == (action == "killed")
    got, _ = _run(monkeypatch, report, [result], as_json=True)
    assert got == code and json.loads(capsys.readouterr().out)["results"][0]["action"] == action
