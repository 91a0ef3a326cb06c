"""Preflight: a spec checked against the live cluster, as findings like the rule engine's.

The rule engine (backend.plan.checks) proves a spec is self-consistent; preflight proves the
cluster can run it now. Rules (ids P1..P7) are data in `RULES`; each check is small and pure over a
cluster snapshot, the job list, the dashboard's Ray version and the head's filesystem (the console
runs on the head, where miles' launcher reads checkpoint and dataset paths too).
"""

from __future__ import annotations

import os
from collections.abc import Callable
from dataclasses import dataclass

from backend.cluster.dashboard import JobInfo, RayClient
from backend.cluster.job_identity import active_runs, is_console_tool, job_kind, run_id_of
from backend.cluster.telemetry import ClusterSnapshot, GpuProcess, GpuSnapshot, NodeSnapshot, snapshot
from backend.json_fields import Fields
from backend.natural_order import natural_key
from backend.plan.checks import Finding
from backend.plan.miles_flags import arguments_differ
from backend.plan.spec import RunSpec
from backend.sanitize import shown_name
from backend.severity import Severity

EXPECTED_RAY = (2, 60)

RULES: dict[str, str] = {
    "P1": "enough alive nodes with cluster.gpus_per_node free logical GPUs each",
    "P2": "no leftover process holds GPU memory while no run is active",
    "P3": "no other training run is active",
    "P4": "the checkpoint directory exists on the head",
    "P5": "the dataset files exist on the head",
    "P6": "the dashboard runs Ray 2.60",
    "P7": "the train script exists on the head",
    "P8": "every alive node holds the whole checkpoint and the dataset (backend.cluster.prepare)",
    "P9": "the head's miles arguments.py is the one the argv and the rules were checked against",
}


@dataclass(frozen=True)
class ClusterFacts:
    """Everything preflight reads from the cluster, gathered once."""

    snapshot: ClusterSnapshot
    jobs: list[JobInfo]
    ray_version: str | None


def node_capacity(spec: RunSpec, snap: ClusterSnapshot) -> list[Finding]:
    need, per = spec.cluster.nodes, spec.cluster.gpus_per_node
    big = [n for n in snap.alive_nodes if n.logical_gpus_total >= per]
    free = [
        n for n in big if n.logical_gpus_used is None or n.logical_gpus_total - n.logical_gpus_used >= per
    ]
    out: list[Finding] = []
    if len(free) < need:
        busy = len(big) - len(free)
        detail = f" ({busy} of them with GPUs in use)" if busy else ""
        out.append(
            Finding(
                rule="P1",
                severity=Severity.ERROR,
                fields=("cluster.nodes", "cluster.gpus_per_node"),
                message=(
                    f"the spec needs {need} nodes with {per} free GPUs each; the cluster has {len(big)} "
                    f"alive node(s) with {per} GPUs{detail}"
                ),
                fix=(
                    f"start {need - len(free)} more node(s) with {per} GPUs, free the busy ones, "
                    f"or set cluster.nodes to {max(len(free), 1)}"
                ),
            )
        )
    for node in snap.dead_nodes:
        out.append(
            Finding(
                rule="P1",
                severity=Severity.INFO,
                fields=("cluster.nodes",),
                message=f"node {node.label} is {node.state}: {node.death_reason}",
                fix="restart Ray on that host if it should be part of the run",
            )
        )
    return out


def _leftovers(snap: ClusterSnapshot, jobs: list[JobInfo]) -> list[Finding]:
    if any(not j.is_terminal and not is_console_tool(j) for j in jobs):
        return []  # memory held now may be that job's; P3 speaks about it
    out = [_held_finding(snap, node_id, held) for node_id, held in snap.gpu_holders().items()]
    unlisted = snap.unlisted_memory()
    if unlisted:
        out.append(_unlisted_finding(unlisted))
    return out


def _held_finding(snap: ClusterSnapshot, node_id: str, held: list[tuple[int, GpuProcess]]) -> Finding:
    """GPU memory Ray's reporter lists on a node with no run active. The reporter is seconds old: a hint
    to check, never a list to kill from (cleanup reads the node now)."""
    node = snap.node(node_id)
    label = node.label if node else node_id[:8]
    age = snap.age_at(node, snap.taken_at) if node else None
    listed = ", ".join(f"pid {p.pid} on GPU {idx} ({p.mem_mb} MiB)" for idx, p in held)
    return Finding(
        rule="P2",
        severity=Severity.WARNING,
        fields=(),
        message=(
            f"Ray's reporter lists GPU memory in use on {label} with no run active"
            f"{f' (a reading {age:.0f} s old)' if age is not None else ''}: {listed}"
        ),
        fix="run `ultra-console cleanup`: it reads each node now and kills only a run's own "
        "leftover processes",
    )


def _unlisted_finding(unlisted: list[tuple[NodeSnapshot, GpuSnapshot]]) -> Finding:
    """GPUs whose memory is in use while Ray lists no process for them."""
    nodes = sorted({n.label for n, _ in unlisted}, key=natural_key)
    return Finding(
        rule="P2",
        severity=Severity.INFO,
        fields=(),
        message=(
            f"{len(unlisted)} GPU(s) on {', '.join(nodes[:4])}{' ...' if len(nodes) > 4 else ''} "
            "show memory in use but Ray lists no process "
            "for them (its process list is unavailable here)"
        ),
        fix="check those hosts with nvidia-smi before launching",
    )


def _active(jobs: list[JobInfo]) -> list[Finding]:
    out = []
    for job in active_runs(jobs):
        run, shown = run_id_of(job), shown_name(job.id)
        out.append(
            Finding(
                rule="P3",
                severity=Severity.ERROR,
                fields=(),
                message=(
                    f"{job_kind(job)} run {shown}{f' (run {run})' if run else ''} is still {job.status}"
                ),
                fix=f"wait for it, abort it (`ultra-console abort --job {shown}`), or launch with --force",
            )
        )
    return out


def path_findings(spec: RunSpec, exists: Callable[[str], bool], where: str = "on the head") -> list[Finding]:
    """P4/P5/P7: the checkpoint, the datasets and the train script exist `where` (doctor asks every node)."""
    out = []
    ckpt = f"{spec.paths.model_dir.rstrip('/')}/{spec.model.name}"
    if not exists(ckpt):
        out.append(
            Finding(
                rule="P4",
                severity=Severity.ERROR,
                fields=("paths.model_dir", "model.name"),
                message=f"checkpoint directory {ckpt} does not exist {where}",
                fix="download the checkpoint there or set paths.model_dir",
            )
        )
    data = [("data.prompt_data", f"{spec.paths.data_dir.rstrip('/')}/{spec.data.prompt_data}")]
    if spec.eval.enabled:
        data.append(("eval.prompt_data", f"{spec.paths.data_dir.rstrip('/')}/{spec.eval.prompt_data}"))
    for field, path in data:
        if not exists(path):
            out.append(
                Finding(
                    rule="P5",
                    severity=Severity.ERROR,
                    fields=("paths.data_dir", field),
                    message=f"dataset {path} does not exist {where}",
                    fix=f"download it there or set paths.data_dir / {field}",
                )
            )
    script = spec.paths.resolved_train_script
    if not exists(script):
        out.append(
            Finding(
                rule="P7",
                severity=Severity.ERROR,
                fields=("paths.miles_root", "paths.train_script"),
                message=f"train script {script} does not exist {where}",
                fix="set paths.miles_root to the miles checkout (or paths.train_script)",
            )
        )
    return out


def version_findings(version: str | None) -> list[Finding]:
    if not version:
        return [
            Finding(
                rule="P6",
                severity=Severity.WARNING,
                fields=(),
                message="the dashboard did not report its Ray version",
                fix="check `ray --version` on the head (the console is tested against Ray 2.60)",
            )
        ]
    try:
        major, minor = (int(x) for x in version.split(".")[:2])
    except ValueError:
        major, minor = -1, -1
    if (major, minor) == EXPECTED_RAY:
        return []
    severity = Severity.WARNING if major == EXPECTED_RAY[0] else Severity.ERROR
    return [
        Finding(
            rule="P6",
            severity=severity,
            fields=(),
            message=f"the cluster runs Ray {version}; the console speaks the Ray 2.60 dashboard API",
            fix="use Ray 2.60.x on the cluster (job, log and node endpoints differ between versions)",
        )
    ]


def _miles_checkout(spec: RunSpec, differs: Callable[[str], str | None]) -> list[Finding]:
    why = differs(spec.paths.miles_root)
    if why is None:
        return []
    return [
        Finding(
            rule="P9",
            severity=Severity.WARNING,
            fields=("paths.miles_root",),
            message=why,
            fix="use the miles commit of configs/miles/args.toml, or regenerate it (scripts/miles_args.py)",
        )
    ]


def check_cluster(
    spec: RunSpec,
    facts: ClusterFacts,
    *,
    exists: Callable[[str], bool] = os.path.exists,
    differs: Callable[[str], str | None] = arguments_differ,
) -> list[Finding]:
    """All preflight findings, pure over `facts`, `exists` and `differs` (the head's filesystem)."""
    return [
        *node_capacity(spec, facts.snapshot),
        *_leftovers(facts.snapshot, facts.jobs),
        *_active(facts.jobs),
        *path_findings(spec, exists),
        *_miles_checkout(spec, differs),
        *version_findings(facts.ray_version),
    ]


async def gather(client: RayClient) -> ClusterFacts:
    """Read the cluster once: version, node snapshot, job list (4 requests)."""
    version = Fields(await client.version()).optional_text("ray_version")
    snap = await snapshot(client, ray_version=version)
    jobs = await client.list_jobs()
    return ClusterFacts(snapshot=snap, jobs=jobs, ray_version=version)


async def preflight(spec: RunSpec, client: RayClient, *, facts: ClusterFacts | None = None) -> list[Finding]:
    """Findings for `spec` against the cluster `client` talks to (raises DashboardUnreachable etc.)."""
    return check_cluster(spec, facts or await gather(client))
