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
from collections.abc import Awaitable, Callable, Iterable, Mapping
from pathlib import Path

from backend.cluster.dashboard import JobInfo, RayClient
from backend.cluster.leftovers import JobFootprint, record_footprint
from backend.cluster.node_job import NodeJobResult, run_node_job
from backend.cluster.stack_groups import (
    NodeFailure,
    ProcessStack,
    StacksReport,
    Unreadable,
    clean,
    parse_process,
)
from backend.cluster.telemetry import NodeSnapshot, snapshot
from backend.errors import ConsoleError, RefusedError
from backend.json_fields import Fields
from backend.safe_paths import open_private, private_dir, safe_name
from backend.sanitize import sanitize_text

STACKS_MARK = "ULTRA_CONSOLE_STACKS "
PER_PROCESS_S = 10.0  # one py-spy dump
NODE_BUDGET_S = 30.0  # every dump of one node, on that node
STARTUP_S = 30.0  # what the node job's own start (Ray schedules it, python starts) may add before it answers
STACKS_DIR = "stacks"
LIST_RETRIES = 3

Progress = Callable[[str], None]  # one line as the dump goes: nodes asked, each node's answer as it comes
NodeAnswer = tuple[list[ProcessStack | Unreadable], NodeFailure | None]


def _quiet(_line: str) -> None:
    """No one listening to the progress."""


class _Answers:
    """Counts the nodes' answers as they come and says each one (`k/n nodes answered (t s): label: …`)."""

    def __init__(self, total: int, progress: Progress) -> None:
        self.total, self.done, self.progress = total, 0, progress
        self.started = time.monotonic()

    async def said(self, label: str, answer: Awaitable[NodeAnswer]) -> NodeAnswer:
        found, failure = await answer
        self.done += 1
        what = (
            f"not read: {failure.reason}"
            if failure is not None and not found
            else f"{sum(isinstance(f, ProcessStack) for f in found)} process(es)"
        )
        elapsed = time.monotonic() - self.started
        self.progress(f"{self.done}/{self.total} nodes answered ({elapsed:.0f} s): {label}: {what}")
        return found, failure


def _stacks_args(node_id: str, fp: JobFootprint, *, native: bool, budget_s: float) -> list[str]:
    """The node job's command line: which processes are the job's and how long each may take."""
    return [
        "--stacks",
        f"--node-id={node_id}",
        *fp.identity_args(node_id),
        "--budget-s",
        f"{budget_s:g}",
        "--per-process-s",
        f"{min(PER_PROCESS_S, budget_s):g}",
        *(["--native"] if native else []),
    ]


def _process_events(result: NodeJobResult) -> list[Fields]:
    """The job's per-process events (pid -1 is its summary)."""
    return [e for e in result.events if e.value("pid") != -1]


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
    args = _stacks_args(node_id, fp, native=native, budget_s=budget_s)
    try:
        result = await run_node_job(
            client, node_id, script, args, mark=STACKS_MARK, purpose="stacks", timeout_s=timeout_s
        )
    except ConsoleError as err:
        return [], NodeFailure(node_id, label, clean(str(err)))
    summary = next((e for e in result.events if e.value("pid") == -1), None)
    if summary is None:
        said = f"its stacks job ended {result.status} without an answer: {result.message or 'no message'}"
        return [], NodeFailure(node_id, label, clean(said))
    by_pid = {pid: rank for (ip, pid), rank in ranks.items() if ip == node_ip}  # "" is the driver's node
    found = [parse_process(node_id, label, e.raw, by_pid) for e in _process_events(result)]
    problem = summary.value("problem")
    return found, NodeFailure(node_id, label, clean(problem)) if problem else None


def _sorted_out(found: list[ProcessStack | Unreadable]) -> tuple[list[ProcessStack], list[Unreadable]]:
    """The stacks read and the processes that could not be read, apart."""
    processes = [item for item in found if isinstance(item, ProcessStack)]
    return processes, [item for item in found if isinstance(item, Unreadable)]


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
    progress: Progress = _quiet,
) -> StacksReport:
    """Dump the job's processes on each of `nodes` ((id, label), alive), all nodes at once, each bounded by
    `budget_s` on the node plus its job's start-up; `gone` are nodes the job ran on that are dead (named).
    `ranks` maps (node IP, pid) to a training rank where the log said which process is which rank (the IP
    as `node_ips` gives it per node: "" for the driver's node, whose lines Ray prints without one).
    `progress` hears a line when the nodes are asked and one as each node answers."""
    asked, gone = list(nodes), list(gone)
    started = time.monotonic()
    progress(f"asking {len(asked)} node(s) for their stacks (each within {budget_s + STARTUP_S:.0f} s)…")
    tally = _Answers(len(asked), progress)
    answers = await asyncio.gather(
        *(
            tally.said(
                label,
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
                ),
            )
            for n, label in asked
        )
    )
    failed = [NodeFailure(n, n[:8], "the node is no longer alive") for n in gone]
    failed += [failure for _, failure in answers if failure is not None]
    processes, unreadable = _sorted_out([item for items, _ in answers for item in items])
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
    folder = Path(private_dir(Path(state_dir) / STACKS_DIR))
    stamp = time.strftime("%Y%m%d-%H%M%S", time.localtime(report.taken_at))
    name = safe_name(report.job or "job", f"-{stamp}.txt")  # any job id: bounded, hashed, ASCII
    tmp = f".{name}.{os.getpid()}.tmp"
    fd = open_private(folder, tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL)
    with os.fdopen(fd, "w", encoding="utf-8") as fh:
        fh.write(sanitize_text(report.full_text()) + "\n")
    os.replace(folder / tmp, folder / name)
    return folder / name


@dataclasses.dataclass(frozen=True)
class JobNodes:
    """Where a running job's processes are looked for: its footprint, every alive node ((id, label)), the
    nodes it ran on that are dead, and each alive node's IP as Ray's log prefixes write it."""

    footprint: JobFootprint
    nodes: list[tuple[str, str]]
    gone: list[str]
    ips: dict[str, str]


async def job_nodes(client: RayClient, job: JobInfo) -> JobNodes:
    """Every alive node, not only those Ray's actor list names: that list can lag just after actors start
    (their pid not yet filled in), and a node where the job has no process answers with nothing."""
    fp = await _listed_footprint(client, job)
    snap = await snapshot(client)
    alive = {n.node_id: n for n in snap.alive_nodes}
    return JobNodes(
        fp,
        [(n.node_id, n.label) for n in alive.values()],
        [n for n in fp.node_ids if n not in alive],
        _prefix_ips(alive, job.driver_node_id),
    )


async def _listed_footprint(client: RayClient, job: JobInfo) -> JobFootprint:
    """The job's footprint, asked again while the state API lists nothing (it can fail its first call on
    a busy head)."""
    fp = await record_footprint(client, job)
    for _ in range(LIST_RETRIES):
        if fp.listed or not job.job_id:
            break
        await asyncio.sleep(1.0)
        fp = await record_footprint(client, job)
    return fp


def _prefix_ips(alive: Mapping[str, NodeSnapshot], driver: str | None) -> dict[str, str]:
    """Each node's IP as Ray's prefixes say it: `ip=` only for a node whose IP is not the driver's node's."""
    at = alive.get(driver or "")
    driver_ip = at.ip if at else ""
    return {n: "" if n == driver or node.ip == driver_ip else node.ip for n, node in alive.items()}


async def job_stacks(
    client: RayClient,
    job: JobInfo,
    state_dir: Path | str,
    *,
    native: bool = False,
    budget_s: float = NODE_BUDGET_S,
    ranks: Mapping[tuple[str, int], int] | None = None,
    progress: Progress = _quiet,
) -> StacksReport:
    """The stacks of a running job on every alive node (job_nodes), saved under `state_dir`; refused once
    the job ended. Nodes the actor list names that are dead are named as such. `progress`: collect_stacks'."""
    if job.is_terminal:
        raise RefusedError(f"stacks are read while the job runs: {job.id} is {job.status}")
    progress("listing the job's processes (Ray's actor list) and the alive nodes…")
    where = await job_nodes(client, job)
    fp = where.footprint
    report = await collect_stacks(
        client,
        fp,
        where.nodes,
        native=native,
        budget_s=budget_s,
        ranks=ranks,
        node_ips=where.ips,
        gone=where.gone,
        progress=progress,
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
