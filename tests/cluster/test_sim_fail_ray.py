"""Why it died, live: the simulated trainer dies in each of four real ways (`--sim-fail KIND`, printed in the
shapes real miles / Ray / torch / SGLang print) on the real Ray cluster, and the console names the root cause.

For each kind: the job ends FAILED; `ultra-console status --json` names the catalog's cause (its id, role and
where) with Ray's report of it among the consequences; the app, attached while the run is live, shows the
cause in the Run header within 2 s of the failure line reaching its log store, and lists the cause and its
consequences in Events.
"""

from __future__ import annotations

import asyncio
import json
import re
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
from capture_sim_fail import sim_fail_payload
from runhelp import cli, job_reaches, live_app
from textual.widgets import Static
from waiting import until

from backend.signals.failures import load_catalog
from console.app import UltraConsoleApp
from console.views.events import EventsView
from console.views.run import RunView

pytestmark = [pytest.mark.ray, pytest.mark.timeout(300)]

HEADER_LATENCY_S = 2.0
REPORTS = {"ray-task-error", "actor-died"}  # how Ray tells the driver that an actor failed
# and of an actor whose node is gone: the driver's call fails before Ray has decided the actor is dead
NODE_REPORTS = REPORTS | {"actor-unavailable"}


@dataclass(frozen=True)
class Case:
    kind: str  # --sim-fail KIND
    cause: str  # the catalog id the console must name
    role: str
    where: dict[str, str] = field(default_factory=dict)  # more fields of the cause


CASES = [
    Case("train-oom", "cuda-oom", "train", {"gpu": "3"}),
    Case("engine-start", "sglang-scheduler", "engine"),
    # the raylet's OOM-kill line is the root, named by the worker it killed wherever the chunks break
    # (tests/unit/test_cause_by_chunks.py): the header and status name it alike
    Case("host-oom", "host-oom", "train", {"node": "127.0.0.1"}),
    Case("nccl-timeout", "nccl-timeout", "train"),
    # §3b: the store's address is the answer, never the RayTaskError the driver prints after it
    Case("c10d-unreachable", "c10d-store-timeout", "train"),  # one node: Ray prints no ip= for it
]
WORLD = 8  # one node of 8 ranks: Ray folds identical lines of *different* processes ([repeated Nx]), so the
# ranks of one process are all in the log, and the culprit (the last rank) is the only one that is quiet


@dataclass
class Timeline:
    """What the app showed, poll by poll: when each log line reached its store, and the header's text."""

    t0: float = field(default_factory=time.monotonic)
    lines: list[tuple[float, int]] = field(default_factory=list)  # (time, store size) when the size changed
    headers: list[tuple[float, str]] = field(default_factory=list)  # (time, text) when the text changed
    panels: list[tuple[float, str]] = field(default_factory=list)  # the diagnosis panel's, while shown

    def look(self, app: UltraConsoleApp, run: RunView) -> None:
        now = time.monotonic()
        store = app.session.store if app.session is not None else None
        size = len(store) if store is not None else 0
        if not self.lines or self.lines[-1][1] != size:
            self.lines.append((now, size))
        text = str(run.query_one("#run-state", Static).content)
        if not self.headers or self.headers[-1][1] != text:
            self.headers.append((now, text))
        panel = run.query_one("#run-diagnosis", Static)
        shown = str(panel.content) if panel.display else ""
        if not self.panels or self.panels[-1][1] != shown:
            self.panels.append((now, shown))

    def arrived(self, index: int) -> float:
        return next(t for t, size in self.lines if size > index)

    def shown(self, *texts: str, panel: bool = False) -> float | None:
        """When the header (or the diagnosis panel) first held one of `texts`."""
        seen = self.panels if panel else self.headers
        return next((t for t, text in seen if any(x and x in text for x in texts)), None)

    def __str__(self) -> str:
        return "\n".join(f"{t - self.t0:7.2f} {text}" for t, text in self.headers[-8:])


def _flat(text: str) -> str:
    return " ".join(text.split())


def _failure_line(store: Any, cause: dict[str, Any], hints: tuple[str, ...]) -> int:
    """The store index of the line the cause was read from (its `line`), else of the first line holding one
    of its kind's hints."""
    wanted = _flat(cause["line"] or "")[:60]
    tests = ([lambda m: wanted in m] if wanted else []) + [lambda m: any(h in m for h in hints)]
    for test in tests:
        for i in range(len(store)):
            if test(_flat(store.line(i).message)):
                return i
    raise AssertionError(f"the failure line {wanted!r} is not in the app's log")


def _last_clause_line(store: Any, message: str, first: int) -> int:
    """The store index of the first line from `first` on holding the message's last clause (what follows its
    last ": ", e.g. a traceback's final exception text), else `first`."""
    clause = _flat(message.rsplit(": ", 1)[-1])[:40]
    for i in range(first, len(store)):
        if clause and clause in _flat(store.line(i).message):
            return i
    return first


@pytest.mark.parametrize("case", CASES, ids=lambda c: c.kind)
async def test_a_simulated_death_is_named_with_its_cause_live(
    ray_cluster, tmp_path: Path, case: Case
) -> None:
    kind = next(k for k in load_catalog().kinds if k.id == case.cause)
    payload = sim_fail_payload(case.kind, nodes=1)
    sid = str(payload["submission_id"])
    timeline = Timeline()
    async with live_app(ray_cluster.address, tmp_path / "state", payload) as (client, app, pilot):
        run = app.query_one(RunView)

        def ended() -> bool:
            timeline.look(app, run)
            return "FAILED" in timeline.headers[-1][1]

        await until(
            pilot,
            ended,
            lambda: f"the Run header to say FAILED; it said:\n{timeline}",
            timeout=150,
            interval=0.05,
        )
        job = await job_reaches(client, sid, timeout=60)
        assert job.status == "FAILED", job.message

        status = cli(ray_cluster.address, tmp_path / "cli", "--job", sid, "status", "--json")
        assert status.stdout, status.stderr
        info = json.loads(status.stdout)
        cause = info["cause"]
        assert info["status"] == "FAILED" and cause is not None, info

        def cause_shown() -> float | None:
            timeline.look(app, run)
            return timeline.shown(cause["title"], cause["message"])

        named = await until(
            pilot,
            cause_shown,
            lambda: f"the Run header to name the cause {cause['message']!r}; it said:\n{timeline}",
            timeout=10,
            interval=0.05,
        )
        assert app.session is not None and app.session.store is not None
        store = app.session.store
        # The console's own latency: from the last line the named cause needs (its traceback's end can reach
        # the log seconds after the line the cause was read from; the header says so meanwhile).
        arrived = max(
            timeline.arrived(_failure_line(store, cause, kind.hints)),
            timeline.arrived(
                _last_clause_line(store, cause["message"], _failure_line(store, cause, kind.hints))
            ),
        )
        assert named - arrived <= HEADER_LATENCY_S, (
            f"the header named the cause {named - arrived:.2f} s after its line reached the log\n{timeline}"
        )

        await pilot.press("4")
        events = app.query_one(EventsView)
        wanted = {cause["id"]} | {c["id"] for c in cause["consequences"]}

        def listed() -> bool:
            return wanted <= {a.id for a in events.alerts}

        await until(
            pilot,
            listed,
            lambda: f"Events to list {sorted(wanted)}; it lists {sorted({a.id for a in events.alerts})}",
            timeout=30,
        )
        assert any(
            a.id == cause["id"] and a.cause == 1 and a.message == cause["message"] for a in events.alerts
        ), events.alerts

        panel = str(run.query_one("#run-diagnosis", Static).content)
        assert run.query_one("#run-diagnosis", Static).display and cause["title"] in panel, panel
        assert (cause["id"], cause["role"]) == (case.cause, case.role), cause
        if case.kind == "c10d-unreachable":
            assert "10.255.255.1:29500" in cause["message"], cause["message"]
        if case.kind == "host-oom":  # the worker Ray killed, never the raylet that said so
            assert str(cause["actor"]).startswith("MegatronTrainRayActor") and str(cause["pid"]).isdigit(), (
                cause
            )
        assert {k: cause[k] for k in case.where} == case.where, cause
        consequences = cause["consequences"]
        assert all(isinstance(c, dict) and c.get("id") for c in consequences), consequences
        assert REPORTS & {c["id"] for c in consequences}, consequences
        if case.kind == "nccl-timeout":
            numbers = set(re.findall(r"\b\d+\b", cause["message"]))
            assert {str(r) for r in range(WORLD)} <= numbers, cause["message"]  # 0-6 timed out, 7 did not


async def test_an_incident_the_run_outlives_is_no_cause_live(ray_cluster, tmp_path: Path) -> None:
    """A caught traceback in rollout 1, then the run goes on and succeeds: no cause, no panel, the incident
    listed with the progress after it; `metrics` exits 0 or 3, never 4."""
    payload = sim_fail_payload("incident", nodes=1)
    sid = str(payload["submission_id"])
    async with live_app(ray_cluster.address, tmp_path / "state", payload) as (client, app, pilot):
        run = app.query_one(RunView)
        job = await job_reaches(client, sid, timeout=150)
        assert job.status == "SUCCEEDED", job.message
        await pilot.pause(1.0)
        header = str(run.query_one("#run-state", Static).content)
        assert "FAILED" not in header and "TimeoutError" not in header, header
        assert not run.query_one("#run-diagnosis", Static).display
    info = json.loads(cli(ray_cluster.address, tmp_path / "cli", "--job", sid, "status", "--json").stdout)
    assert info["status"] == "SUCCEEDED" and info["cause"] is None, info
    got = cli(ray_cluster.address, tmp_path / "cli", "metrics", "--job", sid, "--json")
    assert got.returncode in (0, 3), got.stderr
    (incident,) = [i for i in json.loads(got.stdout)["incidents"] if i["id"] == "python-error"]
    assert "TimeoutError" in incident["message"] and re.match(
        r"(step|rollout|eval) \d+", incident["progress"]
    )


def _store_lines(app: UltraConsoleApp) -> list[str]:
    store = app.session.store if app.session is not None else None
    return [] if store is None else [_flat(store.line(i).message) for i in range(len(store))]


async def test_a_killed_node_is_the_cause_live(ray_cluster, tmp_path: Path) -> None:
    """A run whose train actors fill four nodes, one of them a throwaway node whose raylet is killed: the Run
    header and the diagnosis panel name the node's death (its id) within 2 s of the line it is read from
    reaching the log store (Ray tells every driver "The node with node id: … has been marked dead", so it is
    measured from that line, not from the state API), and what the driver's call gets after it (here Ray's
    ActorUnavailableError, elsewhere ActorDiedError or RayTaskError) is a consequence, never the cause."""
    idx = ray_cluster.add_node()
    dead_id = ray_cluster.node_ids[idx]
    payload = sim_fail_payload(None, nodes=4, rollouts=1000)  # 4 x 8 GPUs, SPREAD: an actor on each node
    timeline = Timeline()
    async with live_app(ray_cluster.address, tmp_path / "state", payload) as (_client, app, pilot):
        run = app.query_one(RunView)

        def training() -> bool:
            timeline.look(app, run)
            return any(re.search(r"\bstep \d+: \{", m) for m in _store_lines(app))

        await until(pilot, training, lambda: f"a metric line in the log; header:\n{timeline}", timeout=150)
        killing = asyncio.ensure_future(asyncio.to_thread(ray_cluster.kill_node, idx))

        def named() -> tuple[float, float] | None:
            timeline.look(app, run)
            name = f"sim-node-{idx} ("  # the one node name (backend/node_names.py) the log's id becomes
            header = timeline.shown(dead_id, dead_id[:8], name)
            panel = timeline.shown(dead_id, name, panel=True)
            return (header, panel) if header is not None and panel is not None else None

        shown = await until(
            pilot,
            named,
            lambda: f"the header and the panel to name node {dead_id}; the header said:\n{timeline}",
            90,
            0.05,
        )
        await killing
        assert run.diagnosis is not None, timeline
        cause = run.diagnosis.cause
        assert cause.id == "node-dead" and dead_id in cause.message, (
            f"{cause}\nincidents: {run.diagnosis.incidents}\nlog tail:\n" + "\n".join(_store_lines(app)[-40:])
        )
        # from the line the cause was read from (Ray's "marked dead" line), not the raylet's earlier lines
        # that name the node alive (it repeats them in its own death notice)
        lines = _store_lines(app)
        said = next(i for i, m in enumerate(lines) if _flat(cause.line or "")[:80] in m)
        assert dead_id in lines[said] and "dead" in lines[said], lines[said]
        header_s, panel_s = (t - timeline.arrived(said) for t in shown)
        assert max(header_s, panel_s) <= HEADER_LATENCY_S, (
            f"named {header_s:.2f} s (header), {panel_s:.2f} s (panel) after its line came\n{timeline}"
        )

        def failed() -> set[str] | None:  # the driver's failed call comes after the node's line
            timeline.look(app, run)
            found = run.diagnosis
            ids = {c.id for c in found.consequences} if found is not None else set()
            return ids if "FAILED" in timeline.headers[-1][1] and NODE_REPORTS & ids else None

        consequences = await until(
            pilot,
            failed,
            lambda: f"FAILED, Ray's reports consequences:\n{timeline}\n{run.diagnosis}",
            60,
            0.2,
        )
        assert run.diagnosis is not None and run.diagnosis.cause.id == "node-dead", run.diagnosis
        assert "node-dead" not in consequences, consequences
        assert dead_id in str(run.query_one("#run-diagnosis", Static).content)
        print(
            f"\n[node death] {header_s:.2f} s (header), {panel_s:.2f} s (panel) after its line;",
            f"then {sorted(consequences)}",
        )
