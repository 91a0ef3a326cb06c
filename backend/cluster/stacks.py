"""`stacks`: the Python stack of every process of a running job, on every node it runs on, grouped.

Why: a hung collective prints nothing; the operator's next step was `py-spy dump` on 128 processes across
16 nodes by hand. Here one node-pinned job per node (backend/cluster/node_job.py, the reaper's runner) runs
backend/cluster/stacks_job.py, which dumps exactly the processes the reaper would call the job's, each
bounded in time, the node bounded as a whole; a node that does not answer in its bound, or where py-spy
cannot run, is named with its reason. The answers are sanitised and grouped (backend/cluster/stack_groups.py),
and the whole dump is saved as text under the state dir, to paste into an issue.
"""

from __future__ import annotations

import asyncio
import dataclasses
import os
import time
from collections.abc import Iterable, Mapping
from pathlib import Path

from backend.cluster.dashboard import JobInfo, RayClient
from backend.cluster.leftovers import JobFootprint, record_footprint
from backend.cluster.node_job import run_node_job
from backend.cluster.stack_groups import (
    NodeFailure,
    ProcessStack,
    StacksReport,
    Unreadable,
    clean,
    parse_process,
)
from backend.cluster.telemetry import snapshot
from backend.errors import ConsoleError, RefusedError

STACKS_MARK = "ULTRA_CONSOLE_STACKS "
PER_PROCESS_S = 10.0  # one py-spy dump
NODE_BUDGET_S = 30.0  # every dump of one node, on that node
STARTUP_S = 30.0  # what the node job's own start (Ray schedules it, python starts) may add before it answers
STACKS_DIR = "stacks"
LIST_RETRIES = 3


async def _node_stacks(
    client: RayClient,
    node_id: str,
    label: str,
    fp: JobFootprint,
    *,
    native: bool,
    budget_s: float,
    timeout_s: float,
    ranks: Mapping[tuple[str, int], int],
    node_ip: str,
) -> tuple[list[ProcessStack | Unreadable], NodeFailure | None]:
    script = Path(__file__).with_name("stacks_job.py")
    args = [
        "--stacks",
        f"--node-id={node_id}",
        *fp.identity_args(node_id),
        "--budget-s",
        f"{budget_s:g}",
        "--per-process-s",
        f"{min(PER_PROCESS_S, budget_s):g}",
        *(["--native"] if native else []),
    ]
    try:
        result = await run_node_job(
            client, node_id, script, args, mark=STACKS_MARK, purpose="stacks", timeout_s=timeout_s
        )
    except ConsoleError as err:
        return [], NodeFailure(node_id, label, clean(str(err)))
    summary = next((e for e in result.events if e.value("pid") == -1), None)
    if summary is None:
        return [], NodeFailure(
            node_id,
            label,
            clean(
                f"its stacks job ended {result.status} without an answer: {result.message or 'no message'}"
            ),
        )
    by_pid = {pid: rank for (ip, pid), rank in ranks.items() if ip == node_ip}  # "" is the driver's node
    found = [parse_process(node_id, label, e.raw, by_pid) for e in result.events if e.value("pid") != -1]
    problem = summary.value("problem")
    return found, NodeFailure(node_id, label, clean(problem)) if problem else None


async def collect_stacks(
    client: RayClient,
    footprint: JobFootprint,
    nodes: Iterable[tuple[str, str]],
    *,
    native: bool = False,
    budget_s: float = NODE_BUDGET_S,
    ranks: Mapping[tuple[str, int], int] | None = None,
    node_ips: Mapping[str, str] | None = None,
    gone: Iterable[str] = (),
) -> StacksReport:
    """Dump the job's processes on each of `nodes` ((id, label), alive), all nodes at once, each bounded by
    `budget_s` on the node plus its job's start-up; `gone` are nodes the job ran on that are dead (named).
    `ranks` maps (node IP, pid) to a training rank where the log said which process is which rank (the IP
    as `node_ips` gives it per node: "" for the driver's node, whose lines Ray prints without one)."""
    asked, gone = list(nodes), list(gone)
    started = time.monotonic()
    answers = await asyncio.gather(
        *(
            _node_stacks(
                client,
                n,
                label,
                footprint,
                native=native,
                budget_s=budget_s,
                timeout_s=budget_s + STARTUP_S,
                ranks=ranks or {},
                node_ip=(node_ips or {}).get(n, ""),
            )
            for n, label in asked
        )
    )
    failed = [NodeFailure(n, n[:8], "the node is no longer alive") for n in gone]
    processes: list[ProcessStack] = []
    unreadable: list[Unreadable] = []
    for found, failure in answers:
        if failure is not None:
            failed.append(failure)
        processes += [item for item in found if isinstance(item, ProcessStack)]
        unreadable += [item for item in found if isinstance(item, Unreadable)]
    return StacksReport.build(
        footprint.submission_id,
        time.time(),
        processes,
        unreadable=tuple(unreadable),
        failed_nodes=tuple(failed),
        nodes_asked=len(asked) + len(gone),
        seconds=time.monotonic() - started,
    )


def save_report(report: StacksReport, state_dir: Path | str) -> Path:
    """Write the whole dump (sanitised text) to `<state dir>/stacks/<job>-<time>.txt`; returns its path."""
    folder = Path(state_dir) / STACKS_DIR
    folder.mkdir(parents=True, exist_ok=True)
    job = "".join(c if c.isalnum() or c in "-_." else "_" for c in report.job)[:80] or "job"
    path = folder / f"{job}-{time.strftime('%Y%m%d-%H%M%S', time.localtime(report.taken_at))}.txt"
    tmp = path.with_suffix(".tmp")
    tmp.write_text(report.full_text() + "\n", encoding="utf-8")
    os.replace(tmp, path)
    return path


async def job_stacks(
    client: RayClient,
    job: JobInfo,
    state_dir: Path | str,
    *,
    native: bool = False,
    budget_s: float = NODE_BUDGET_S,
    ranks: Mapping[tuple[str, int], int] | None = None,
) -> StacksReport:
    """The stacks of a running job on every alive node, saved under `state_dir`; refused once the job ended.

    Every alive node, not only those Ray's actor list names: that list can lag just after actors start (their
    pid not yet filled in), and a node where the job has no process answers with nothing. Nodes the list
    names that are dead are named as such."""
    if job.is_terminal:
        raise RefusedError(f"stacks are read while the job runs: {job.id} is {job.status}")
    fp = await record_footprint(client, job)
    for _ in range(LIST_RETRIES):  # the state API can fail its first call on a busy head
        if fp.listed or not job.job_id:
            break
        await asyncio.sleep(1.0)
        fp = await record_footprint(client, job)
    snap = await snapshot(client)
    alive = {n.node_id: n for n in snap.alive_nodes}
    nodes = [(n.node_id, n.label) for n in alive.values()]
    gone = [n for n in fp.node_ids if n not in alive]
    # as Ray's prefixes say: `ip=` only for a node whose IP is not the driver's node's
    driver_ip = alive[job.driver_node_id].ip if job.driver_node_id in alive else ""
    ips = {n: "" if n == job.driver_node_id or node.ip == driver_ip else node.ip for n, node in alive.items()}
    report = await collect_stacks(
        client, fp, nodes, native=native, budget_s=budget_s, ranks=ranks, node_ips=ips, gone=gone
    )
    if not fp.listed and job.job_id:
        report = dataclasses.replace(
            report,
            notes=(
                "Ray's actor list did not answer: an actor in a worker Ray started before the job (its "
                "environment says RAY_JOB_ID=ffffffff) cannot be recognised as the job's and is missing",
            ),
        )
    return dataclasses.replace(report, saved_to=str(save_report(report, state_dir)))
