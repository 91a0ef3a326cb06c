"""`ultra-console doctor`: is this head ready for a run, every check one line with its verdict and its fix.

Why: on a real cluster the console otherwise finds out one error at a time (a dashboard that wants a token,
a node without miles, an output directory that is not shared, a clock that runs ahead). The checks are data
(configs/doctor.toml: id, scope, title, severity, fix, what each needs); each has one function here:
`HEAD_CHECKS` over what the head's dashboard says (`HeadFacts`), `NODE_CHECKS` over what every alive node's
pinned job found (backend/cluster/doctor_job.py's probes, `NodeFacts`). Gathering is I/O (`gather_head`,
`gather_nodes`); `evaluate` is pure, so every verdict is unit-tested on facts. Where preflight already checks
a thing (P1 nodes, P4/P5/P7 paths, P6 Ray version, P9 miles' commit) its finding is the line's detail.
"""

from __future__ import annotations

import asyncio
import json
import os
import secrets
import time
from collections.abc import Callable, Mapping
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Literal

from backend.cluster import ray_compat
from backend.cluster.dashboard import AuthFailed, AuthRequired, DashboardUnreachable, RayClient
from backend.cluster.doctor_job import DoctorRequest
from backend.cluster.node_job import NodeJobResult, run_node_job
from backend.cluster.preflight import node_capacity, path_findings, version_findings
from backend.cluster.prepare import human
from backend.cluster.telemetry import ClusterSnapshot, NodeSnapshot, snapshot
from backend.errors import ConsoleError, SpecError
from backend.json_fields import Fields
from backend.plan import sizing
from backend.plan.derived import layout_figures
from backend.plan.finding import Finding
from backend.plan.miles_flags import arguments_file, digest_differs
from backend.plan.spec import RunSpec
from backend.redaction import public_line
from backend.severity import Severity
from backend.toml_input import read_toml_file

TABLE = Path(__file__).resolve().parents[2] / "configs" / "doctor.toml"
JOB_SCRIPT = Path(__file__).with_name("doctor_job.py")
MARK = "ULTRA_CONSOLE_DOCTOR "
NODE_ENV = "ULTRA_CONSOLE_DOCTOR_NODE_ENV"  # tests: JSON {node id: {VAR: value}} put into that node's job
JOB_SLACK_S = 90.0  # a node job's time beyond its marker wait (Ray's start of the job, the probes)

Verdict = Literal["ok", "warn", "fail", "skip"]
WORDS: dict[str, str] = {"ok": "OK", "warn": "WARN", "fail": "FIX", "skip": "SKIP"}


@dataclass(frozen=True)
class CheckSpec:
    """One `[[check]]` of configs/doctor.toml."""

    id: str
    scope: Literal["head", "node"]
    title: str
    severity: Literal["fail", "warn"]
    fix: str
    needs: str = ""
    fixes: dict[str, str] = field(default_factory=dict)


@dataclass(frozen=True)
class Limits:
    clock_skew_s: float = 5.0
    marker_wait_s: float = 20.0
    saves_kept: int = 2
    py_spy_timeout_s: float = 10.0


def load_table(path: Path = TABLE) -> tuple[tuple[CheckSpec, ...], Limits]:
    raw = read_toml_file(path, "doctor table")
    checks = tuple(CheckSpec(**c) for c in raw["check"])
    return checks, Limits(**raw.get("limits", {}))


@dataclass(frozen=True)
class Said:
    """What a check function says: a verdict ("fail" means the check's severity), a detail, which fix."""

    verdict: Verdict
    detail: str
    reason: str = ""


@dataclass(frozen=True)
class CheckResult:
    check: str
    verdict: Verdict
    detail: str
    fix: str = ""
    node: str = ""  # the node's label; "" for a head check
    node_id: str = ""

    def line(self) -> str:
        where = f" [{self.node}]" if self.node else ""
        fix = f" — fix: {self.fix}" if self.fix and self.verdict in ("fail", "warn") else ""
        return f"  {WORDS[self.verdict]:<4} {self.check:<11}{where} {self.detail}{fix}"


@dataclass(frozen=True)
class DoctorReport:
    preset: str
    address: str
    results: tuple[CheckResult, ...]

    @property
    def exit_code(self) -> int:
        """0 all good, 3 something to fix (a warning too: each carries its fix)."""
        return 3 if any(r.verdict in ("fail", "warn") for r in self.results) else 0

    def counts(self) -> dict[str, int]:
        return {v: sum(1 for r in self.results if r.verdict == v) for v in WORDS}

    def summary(self) -> str:
        c = self.counts()
        if self.exit_code == 0:
            return f"verdict: all good ({c['ok']} checks passed)"
        return f"verdict: {c['fail']} to fix, {c['warn']} warning(s), {c['ok']} ok, {c['skip']} skipped"

    def lines(self) -> list[str]:
        return [
            f"doctor {self.preset} at {self.address}",
            *(r.line() for r in self.results),
            self.summary(),
        ]

    def to_json(self) -> dict[str, object]:
        return {
            "preset": self.preset,
            "address": self.address,
            "ok": self.exit_code == 0,
            "counts": self.counts(),
            "results": [asdict(r) for r in self.results],
        }


# ------------------------------------------------------------------------------------------------ facts


@dataclass(frozen=True)
class HeadFacts:
    """What the head says, read once (an error text where a read failed)."""

    config: str = ""  # the config file and what was read from it
    config_error: str = ""
    address: str = ""
    token_set: bool = False
    version: str | None = None
    version_error: str = ""
    jobs: int | None = None
    jobs_error: str = ""
    auth_error: str = ""
    snapshot: ClusterSnapshot | None = None
    snapshot_error: str = ""


@dataclass(frozen=True)
class NodeFacts:
    """What one node's doctor job found (`probes`: probe name -> its facts), and when the console saw it."""

    node_id: str
    label: str
    logical_gpus: float = 0.0
    probes: dict[str, Fields] = field(default_factory=dict)
    submitted_at: float = 0.0
    clock_seen_at: float | None = None
    error: str = ""


@dataclass(frozen=True)
class Inputs:
    spec: RunSpec
    head: HeadFacts
    nodes: tuple[NodeFacts, ...] = ()
    disk_need: int = 0
    disk_note: str = ""
    limits: Limits = field(default_factory=Limits)


def checkpoint_bytes(spec: RunSpec) -> int:
    """One save of the plan: bf16 weights, with the optimizer's fp32 state when `checkpoint.save_optim`."""
    if spec.checkpoint.skip_saving:
        return 0
    per_param = sizing.BF16 + (sizing.ADAM_BYTES if spec.checkpoint.save_optim else 0)
    return int(layout_figures(spec).model_params_b * 1e9 * per_param)


# ------------------------------------------------------------------------------------------ head checks


def _findings(found: list[Finding]) -> list[Said]:
    return [Said("fail" if f.severity == Severity.ERROR else "warn", f.message) for f in found]


def check_config(i: Inputs) -> list[Said]:
    if i.head.config_error:
        return [Said("fail", i.head.config_error)]
    token = "a token set" if i.head.token_set else "no token"
    return [Said("ok", f"{i.head.config}; dashboard {i.head.address}, {token}")]


def check_dashboard(i: Inputs) -> list[Said]:
    if i.head.version_error:
        return [Said("fail", i.head.version_error)]
    return [Said("ok", f"answers at {i.head.address}")]


def check_ray_version(i: Inputs) -> list[Said]:
    said = _findings(version_findings(i.head.version))
    said += [Said("warn", f.text()) for f in ray_compat.missing(i.head.version or "")]
    return said or [Said("ok", f"Ray {i.head.version}: every dashboard feature the console uses")]


def check_auth(i: Inputs) -> list[Said]:
    if i.head.auth_error:
        return [Said("fail", i.head.auth_error)]
    return [Said("ok", "the token is accepted" if i.head.token_set else "no token needed")]


def check_jobs_api(i: Inputs) -> list[Said]:
    if i.head.jobs_error:
        return [Said("fail", i.head.jobs_error)]
    return [Said("ok", f"GET /api/jobs/ answers ({i.head.jobs} job(s) listed)")]


def check_nodes(i: Inputs) -> list[Said]:
    snap = i.head.snapshot
    if snap is None:
        return [Said("fail", i.head.snapshot_error or "no node list")]
    said = _findings(node_capacity(i.spec, snap))
    alive = snap.alive_nodes
    gpus = sum(n.logical_gpus_total for n in alive)
    need = f"the plan needs {i.spec.cluster.nodes} x {i.spec.cluster.gpus_per_node}"
    return said or [Said("ok", f"{len(alive)} alive node(s), {gpus:.0f} GPU(s); {need}")]


HEAD_CHECKS: dict[str, Callable[[Inputs], list[Said]]] = {
    "config": check_config,
    "dashboard": check_dashboard,
    "ray-version": check_ray_version,
    "auth": check_auth,
    "jobs-api": check_jobs_api,
    "nodes": check_nodes,
}


# ------------------------------------------------------------------------------------------ node checks


def check_clock(n: NodeFacts, i: Inputs) -> Said:
    """The node's reading lies between the job's submission and the line's arrival on the head's clock: its
    offset is bracketed by both, and only an offset that is surely beyond the limit is a skew."""
    t = n.probes["clock"].number("t")
    if t is None or n.clock_seen_at is None:
        return Said("fail", "the node sent no clock reading")
    low, high = t - n.clock_seen_at, t - n.submitted_at
    lim = i.limits.clock_skew_s
    if low > lim:
        return Said("fail", f"its clock runs at least {low:.1f} s ahead of the head's (limit {lim:g} s)")
    if high < -lim:
        return Said("fail", f"its clock runs at least {-high:.1f} s behind the head's (limit {lim:g} s)")
    return Said("ok", f"within {lim:g} s of the head's (offset between {low:+.1f} and {high:+.1f} s)")


def _path_said(n: NodeFacts, i: Inputs, rules: tuple[str, ...], ok: str) -> Said:
    facts = n.probes["paths"]
    found, expanded = facts.obj("found").raw, facts.obj("expanded").raw
    missing = [
        f.message
        for f in path_findings(i.spec, lambda p: bool(found.get(p, False)), f"on {n.label}")
        if f.rule in rules
    ]
    for template, real in expanded.items():  # the node's own name for a path that names the node
        missing = [m.replace(template, str(real)) for m in missing]
    return Said("fail", "; ".join(missing)) if missing else Said("ok", ok)


def check_miles(n: NodeFacts, i: Inputs) -> Said:
    facts = n.probes["paths"]
    root = i.spec.paths.miles_root
    if not facts.obj("found").raw.get(root, False):
        return Said(
            "fail", f"miles_root {facts.obj('expanded').raw.get(root, root)} does not exist on {n.label}"
        )
    said = _path_said(n, i, ("P7",), f"{i.spec.paths.resolved_train_script}")
    digest = facts.optional_text("arguments_sha256")
    if said.verdict != "ok" or digest is None:
        note = "" if digest else " (no miles/utils/arguments.py there: its commit is not checked)"
        return Said(said.verdict, said.detail + (note if said.verdict == "ok" else ""))
    differs = digest_differs(facts.text("arguments"), digest)
    if differs:
        return Said("warn", differs, "commit")
    return Said("ok", f"{said.detail}; arguments.py is the commit the argv was checked against")


def check_model(n: NodeFacts, i: Inputs) -> Said:
    return _path_said(n, i, ("P4",), f"{i.spec.paths.model_dir.rstrip('/')}/{i.spec.model.name} is there")


def check_data(n: NodeFacts, i: Inputs) -> Said:
    return _path_said(n, i, ("P5",), "every dataset file is there")


def check_output(n: NodeFacts, i: Inputs) -> Said:
    facts = n.probes["output"]
    path = facts.text("path")
    if not facts.has("exists"):
        return Said("fail", f"{path} does not exist on {n.label}")
    if not facts.has("writable"):
        return Said("fail", f"cannot write in {path}: {facts.text('error')}")
    return Said("ok", f"{path} takes a file")


def _shared_groups(i: Inputs) -> list[tuple[frozenset[str], list[str]]]:
    """Nodes grouped by the markers they saw, the largest group first (a tie: the one with the head's)."""
    groups: dict[frozenset[str], list[str]] = {}
    for node in i.nodes:
        if "shared" in node.probes and node.probes["shared"].has("tried"):
            seen = frozenset(str(s) for s in node.probes["shared"].items("seen"))
            groups.setdefault(seen, []).append(node.node_id)
    head = next(
        (n.node_id for n in (i.head.snapshot.alive_nodes if i.head.snapshot else []) if n.is_head), ""
    )
    return sorted(groups.items(), key=lambda g: (-len(g[1]), head not in g[1]))


def check_shared(n: NodeFacts, i: Inputs) -> Said:
    facts = n.probes["shared"]
    path = n.probes["output"].text("path") if "output" in n.probes else i.spec.paths.output_dir
    everyone = {x.node_id for x in i.nodes}
    seen = {str(s) for s in facts.items("seen")}
    if seen >= everyone:
        return Said("ok", f"{path} is the same directory on all {len(everyone)} node(s)")
    groups = _shared_groups(i)
    labels = {x.node_id: x.label for x in i.nodes}
    others = ", ".join(labels.get(x, x[:8]) for x in sorted(everyone - seen))
    if groups and n.node_id in groups[0][1] and len(groups[0][1]) > 1:
        return Said("ok", f"{path} is shared by {len(groups[0][1])} node(s); not by {others}")
    waited = facts.real("waited_s")
    return Said(
        "fail",
        f"{path} on {n.label} is not the directory the other nodes share: the markers of {others} did not "
        f"appear in it in {waited:.0f} s",
    )


def check_disk(n: NodeFacts, i: Inputs) -> Said:
    facts = n.probes["disk"]
    free, path = facts.integer("free"), facts.text("path")
    if i.disk_need <= 0:
        return Said("ok", f"{human(free)} free at {path}; the plan saves no checkpoint")
    text = f"{human(free)} free at {path}; {i.disk_note or 'the checkpoints need'} {human(i.disk_need)}"
    return Said("ok" if free >= i.disk_need else "fail", text)


def check_py_spy(n: NodeFacts, i: Inputs) -> Said:
    facts = n.probes["py_spy"]
    path = facts.optional_text("path")
    if path is None:
        return Said("fail", f"py-spy not found on {n.label} (looked: {facts.text('looked')})")
    return Said("ok", path)


def check_ptrace(n: NodeFacts, i: Inputs) -> Said:
    facts = n.probes["ptrace"]
    scope = f" (kernel.yama.ptrace_scope {facts.text('scope')})" if facts.text("scope") else ""
    if not facts.has("tried"):
        return Said("skip", "not tried: no py-spy")
    if facts.has("ok"):
        return Said("ok", f"py-spy read a Python process here{scope}")
    return Said(
        "fail", f"py-spy could not read a process ({facts.text('kind')}): {facts.text('error')}{scope}"
    )


def check_nvml(n: NodeFacts, i: Inputs) -> Said:
    facts = n.probes["nvml"]
    gpus, want = facts.integer("gpus"), round(n.logical_gpus)
    if gpus == 0 and want == 0:
        return Said("ok", "no GPU here, and Ray lists none")
    if gpus == 0:
        return Said("fail", f"NVML answers for no GPU; Ray lists {want}: {facts.text('why', 'no reading')}")
    if gpus < want:
        return Said("warn", f"NVML answers for {gpus} GPU(s); Ray lists {want}")
    return Said("ok", f"{gpus} GPU(s)")


# check id -> (the probe whose facts it reads, its verdict)
NODE_CHECKS: dict[str, tuple[str, Callable[[NodeFacts, Inputs], Said]]] = {
    "clock": ("clock", check_clock),
    "miles": ("paths", check_miles),
    "model": ("paths", check_model),
    "data": ("paths", check_data),
    "output": ("output", check_output),
    "shared": ("shared", check_shared),
    "disk": ("disk", check_disk),
    "py-spy": ("py_spy", check_py_spy),
    "ptrace": ("ptrace", check_ptrace),
    "nvml": ("nvml", check_nvml),
}


# ------------------------------------------------------------------------------------------- evaluation


def _result(spec: CheckSpec, said: Said, node: NodeFacts | None = None) -> CheckResult:
    verdict: Verdict = spec.severity if said.verdict == "fail" else said.verdict
    fix = spec.fixes.get(said.reason, spec.fix)
    label, node_id = (node.label, node.node_id) if node else ("", "")
    return CheckResult(spec.id, verdict, public_line(said.detail), fix, label, node_id)


def _node_said(spec: CheckSpec, node: NodeFacts, i: Inputs) -> Said:
    probe, judge = NODE_CHECKS[spec.id]
    if node.error:
        return Said("fail", f"the doctor job could not run on {node.label}: {node.error}")
    facts = node.probes.get(probe)
    if facts is None:
        return Said("fail", f"the doctor job on {node.label} ended without its {probe} answer")
    if facts.has("error"):
        return Said("fail", f"its {probe} probe failed: {facts.text('error')}")
    return judge(node, i)


def evaluate(table: tuple[CheckSpec, ...], i: Inputs) -> list[CheckResult]:
    """Every check's lines, in the table's order: a check whose `needs` did not pass is skipped, said so."""
    out: list[CheckResult] = []
    passed: dict[tuple[str, str], bool] = {}  # (check, node id or "") -> passed
    for spec in table:
        out += _head_results(spec, i, passed) if spec.scope == "head" else _node_results(spec, i, passed)
    return out


def _unmet(spec: CheckSpec, passed: Mapping[tuple[str, str], bool], where: str) -> Said | None:
    """The skip line of a check whose `needs` did not pass there (node id, or "" for the head)."""
    if spec.needs and not passed.get((spec.needs, where), False):
        return Said("skip", f"not checked: {spec.needs} did not pass")
    return None


def _head_results(spec: CheckSpec, i: Inputs, passed: dict[tuple[str, str], bool]) -> list[CheckResult]:
    """A head check's lines (noting in `passed` whether all were ok)."""
    unmet = _unmet(spec, passed, "")
    said = [unmet] if unmet is not None else HEAD_CHECKS[spec.id](i)
    passed[(spec.id, "")] = all(s.verdict == "ok" for s in said)
    return [_result(spec, s) for s in said]


def _node_results(spec: CheckSpec, i: Inputs, passed: dict[tuple[str, str], bool]) -> list[CheckResult]:
    """A node check's line per node (noting each node's verdict in `passed`); one skip line for no node."""
    if not i.nodes:
        return [_result(spec, Said("skip", "not checked: no node job could run"))]
    out = []
    for node in i.nodes:
        said = _unmet(spec, passed, node.node_id) or _node_said(spec, node, i)
        out.append(_result(spec, said, node))
        passed[(spec.id, node.node_id)] = said.verdict == "ok"
    return out


# --------------------------------------------------------------------------------------------- gathering


async def gather_head(client: RayClient, base: HeadFacts) -> HeadFacts:
    """The dashboard, its version, the job list (auth and the Jobs API) and the nodes, each read once."""
    try:
        version = Fields(await client.version()).optional_text("ray_version")
    except DashboardUnreachable as err:
        return HeadFacts(**{**asdict(base), "version_error": str(err)})
    except (AuthRequired, AuthFailed) as err:  # a dashboard that guards even its version
        return HeadFacts(**{**asdict(base), "version": None, "auth_error": str(err)})
    except ConsoleError as err:
        return HeadFacts(**{**asdict(base), "version_error": str(err)})
    facts: dict[str, object] = {**asdict(base), "version": version}
    try:
        facts["jobs"] = len(await client.list_jobs())
    except (AuthRequired, AuthFailed) as err:
        return HeadFacts(**{**facts, "auth_error": str(err)})  # type: ignore[arg-type]
    except ConsoleError as err:
        return HeadFacts(**{**facts, "jobs_error": str(err)})  # type: ignore[arg-type]
    try:
        facts["snapshot"] = await snapshot(client, ray_version=version)
    except ConsoleError as err:
        facts["snapshot_error"] = str(err)
    return HeadFacts(**facts)  # type: ignore[arg-type]


def node_env(environ: dict[str, str] | os._Environ[str] | None = None) -> dict[str, dict[str, str]]:
    """The tests' per-node environment (NODE_ENV): node id -> extra variables for that node's job."""
    text = (os.environ if environ is None else environ).get(NODE_ENV, "")
    if not text:
        return {}
    try:
        raw = json.loads(text)
    except (ValueError, RecursionError):
        raise SpecError(f"{NODE_ENV} is not JSON") from None
    return {
        str(k): {str(a): str(b) for a, b in v.items()}
        for k, v in Fields.of(raw).raw.items()
        if isinstance(v, dict)
    }


def asked_paths(spec: RunSpec) -> list[str]:
    """Every path preflight's P4/P5/P7 would look for, and miles' checkout."""
    asked: list[str] = [spec.paths.miles_root]

    def ask(path: str) -> bool:
        asked.append(path)
        return True

    path_findings(spec, ask)
    return asked


async def gather_nodes(
    client: RayClient,
    spec: RunSpec,
    nodes: list[NodeSnapshot],
    limits: Limits,
    *,
    env: dict[str, dict[str, str]] | None = None,
    on_node: Callable[[str], None] | None = None,
) -> tuple[NodeFacts, ...]:
    """One doctor job pinned to each of `nodes`, in parallel; their probes' facts."""
    token = secrets.token_hex(8)
    ids = tuple(n.node_id for n in nodes)

    async def one(node: NodeSnapshot) -> NodeFacts:
        request = DoctorRequest(
            node_id=node.node_id,
            node_ip=node.ip,
            token=token,
            nodes=ids,
            paths=tuple(asked_paths(spec)),
            arguments_file=f"{spec.paths.miles_root.rstrip('/')}/{arguments_file()}",
            output_dir=spec.paths.output_dir,
            marker_wait_s=limits.marker_wait_s,
            py_spy_timeout_s=limits.py_spy_timeout_s,
        )
        seen: dict[str, float] = {}

        def heard(raw: Fields) -> None:
            seen.setdefault(raw.text("probe"), time.time())

        submitted = time.time()
        try:
            result: NodeJobResult = await run_node_job(
                client,
                node.node_id,
                JOB_SCRIPT,
                ["--doctor-job", json.dumps(asdict(request))],
                mark=MARK,
                purpose="doctor",
                timeout_s=limits.marker_wait_s + JOB_SLACK_S,
                env=(env or {}).get(node.node_id),
                on_event=heard,
            )
        except ConsoleError as err:
            return NodeFacts(node.node_id, node.label, node.logical_gpus_total, error=str(err))
        finally:
            if on_node is not None:
                on_node(node.label)
        probes = {e.text("probe"): e for e in result.events}
        error = "" if probes else (result.message or f"its job ended {result.status} without an answer")
        return NodeFacts(
            node.node_id, node.label, node.logical_gpus_total, probes, submitted, seen.get("clock"), error
        )

    return tuple(await asyncio.gather(*(one(n) for n in nodes)))


async def run_doctor(
    spec: RunSpec,
    client: RayClient | None,
    base: HeadFacts,
    *,
    disk_need: int | None = None,
    table: tuple[tuple[CheckSpec, ...], Limits] | None = None,
    on_node: Callable[[str], None] | None = None,
) -> DoctorReport:
    """Every check of `table` (configs/doctor.toml): the head's through `client` (None: the config failed),
    then every alive node's, when the head's passed far enough to run node jobs."""
    checks, limits = table or load_table()
    head = base if client is None else await gather_head(client, base)
    nodes: tuple[NodeFacts, ...] = ()
    if client is not None and head.snapshot is not None and head.snapshot.alive_nodes:
        nodes = await gather_nodes(
            client, spec, list(head.snapshot.alive_nodes), limits, env=node_env(), on_node=on_node
        )
    one = checkpoint_bytes(spec)
    need = one * limits.saves_kept if disk_need is None else disk_need
    note = (
        f"the plan's checkpoints need ({limits.saves_kept} saves of {human(one)})"
        if disk_need is None
        else "--disk-gb asks for"
    )
    inputs = Inputs(spec, head, nodes, need, note, limits)
    return DoctorReport(spec.preset, base.address, tuple(evaluate(checks, inputs)))
