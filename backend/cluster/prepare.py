"""Prepare: is every alive node ready to run the spec (the checkpoint complete, the dataset readable), and
fetch what a node lacks.

Why per node: miles' launcher downloads on the head only, but every train actor and SGLang engine reads the
checkpoint from its own node's disk; on 16 nodes one missing shard costs 128 GPUs waiting on it. So one job
pinned to each alive node (backend/cluster/prepare_job.py, through backend.cluster.node_job) checks the
checkpoint against its own index and the dataset's first row, and the verdicts come back as the dataclasses
below. `--fetch` runs the same jobs with the hub's repos: each node downloads only what it lacks, with
progress events; nodes that share a directory fetch it once (a lock file in the directory decides who).
"""

from __future__ import annotations

import asyncio
import json
import os
import secrets
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Literal, cast

from backend.cluster.dashboard import RayClient
from backend.cluster.node_job import NodeJobResult, run_node_job
from backend.cluster.prepare_job import PrepareRequest
from backend.cluster.telemetry import ClusterSnapshot, NodeSnapshot
from backend.errors import ConsoleError
from backend.json_fields import Fields
from backend.plan.finding import Finding
from backend.plan.spec import RunSpec
from backend.severity import Severity

JOB_SCRIPT = Path(__file__).with_name("prepare_job.py")
MARK = "ULTRA_CONSOLE_PREPARE "
CHECK_TIMEOUT_S = 120.0
FETCH_TIMEOUT_S = 24 * 3600.0
# Passed to the node jobs' environment (secrets travel there, never in argv).
HUB_ENV = (
    "HF_ENDPOINT",
    "HF_TOKEN",
    "HF_HUB_OFFLINE",
    "HF_HUB_DISABLE_XET",
    "HTTPS_PROXY",
    "HTTP_PROXY",
    "NO_PROXY",
)

ProblemKind = Literal["missing", "short", "size", "corrupt", "unreadable", "empty", "format", "keys", "error"]
PROBLEM_WORDS: dict[str, str] = {
    "missing": "missing",
    "short": "short",
    "size": "wrong size",
    "corrupt": "corrupt",
    "unreadable": "unreadable",
    "empty": "empty",
    "format": "bad format",
    "keys": "wrong keys",
    "error": "error",
}


@dataclass(frozen=True)
class FileProblem:
    """One thing wrong with one file (or directory) on one node."""

    kind: ProblemKind
    path: str
    detail: str = ""

    def text(self) -> str:
        return f"{PROBLEM_WORDS.get(self.kind, self.kind)}: {self.path}" + (
            f" ({self.detail})" if self.detail else ""
        )


@dataclass(frozen=True)
class PathVerdict:
    """The checkpoint directory or the dataset file as one node sees it."""

    path: str
    problems: tuple[FileProblem, ...] = ()
    files: int = 0
    bytes: int = 0

    @property
    def ok(self) -> bool:
        return not self.problems


@dataclass(frozen=True)
class NodeVerdict:
    node_id: str
    label: str
    checkpoint: PathVerdict | None = None
    dataset: PathVerdict | None = None
    error: str | None = None  # the node's job could not run or said nothing usable
    fetched: tuple[str, ...] = ()  # what this run fetched on the node ("checkpoint: 3 files, 1.2 GB")

    @property
    def ready(self) -> bool:
        return self.error is None and bool(
            self.checkpoint and self.checkpoint.ok and self.dataset and self.dataset.ok
        )

    @property
    def problems(self) -> list[FileProblem]:
        return [
            *(self.checkpoint.problems if self.checkpoint else ()),
            *(self.dataset.problems if self.dataset else ()),
        ]


@dataclass(frozen=True)
class FetchEvent:
    """Progress of a fetch on one node, for the CLI's lines and the app's panel."""

    node_id: str
    label: str
    what: str  # checkpoint, dataset
    kind: str  # progress, resume, file_done, shared, fetched, error
    file: str = ""
    done: int = 0
    total: int | None = None
    text: str = ""

    def line(self) -> str:
        if self.kind in ("progress", "resume"):
            pct = f" ({100 * self.done / self.total:.0f}%)" if self.total else ""
            verb = "resuming" if self.kind == "resume" else "fetching"
            return (
                f"[{self.label}] {self.what}: {verb} {self.file} "
                f"{human(self.done)} of {human(self.total)}{pct}"
            )
        if self.kind == "file_done":
            return f"[{self.label}] {self.what}: {self.file} complete ({human(self.total)})"
        return f"[{self.label}] {self.what}: {self.text}"


@dataclass(frozen=True)
class PrepareReport:
    spec_preset: str
    checkpoint: str
    dataset: str
    nodes: tuple[NodeVerdict, ...] = ()
    fetched: bool = False
    notes: tuple[str, ...] = field(default_factory=tuple)

    @property
    def ready(self) -> bool:
        return bool(self.nodes) and all(n.ready for n in self.nodes)

    def to_json(self) -> dict[str, object]:
        out = asdict(self)
        out["ready"] = self.ready
        for node, raw in zip(self.nodes, out["nodes"], strict=True):
            raw["ready"] = node.ready
        return out

    def findings(self) -> list[Finding]:
        """The verdict as preflight findings (rule P8), one per node that is not ready."""
        out: list[Finding] = []
        for node in self.nodes:
            if node.ready:
                continue
            what = node.error or "; ".join(p.text() for p in node.problems[:3])
            more = len(node.problems) - 3
            out.append(
                Finding(
                    rule="P8",
                    severity=Severity.ERROR,
                    fields=("paths.model_dir", "paths.data_dir"),
                    message=f"node {node.label} is not ready: {what}"
                    + (f" (+{more} more)" if more > 0 else ""),
                    fix="run `ultra-console prepare --fetch` (or press F in the prepare screen)",
                )
            )
        if not self.nodes:
            out.append(
                Finding(
                    rule="P8",
                    severity=Severity.ERROR,
                    fields=(),
                    message="no alive node to prepare",
                    fix="start the Ray cluster's nodes",
                )
            )
        return out


def human(n: int | None) -> str:
    if n is None:
        return "?"
    size = float(n)
    for unit in ("B", "KiB", "MiB", "GiB", "TiB"):
        if size < 1024 or unit == "TiB":
            return f"{size:.0f} {unit}" if unit == "B" else f"{size:.1f} {unit}"
        size /= 1024
    return f"{n} B"


def targets(spec: RunSpec) -> tuple[str, str]:
    """The checkpoint directory and the dataset file of `spec`, as the launcher passes them."""
    return (
        f"{spec.paths.model_dir.rstrip('/')}/{spec.model.name}",
        f"{spec.paths.data_dir.rstrip('/')}/{spec.data.prompt_data}",
    )


def repos(spec: RunSpec) -> tuple[str | None, str | None]:
    """The hub repos a fetch downloads: `<model.org>/<model.name>` and the dataset's repo."""
    model = f"{spec.model.org}/{spec.model.name}" if spec.model.org else None
    return model, spec.data.repo or None


def _path_verdict(raw: Fields) -> PathVerdict:
    problems = [
        FileProblem(_problem_kind(p.text("kind", "error")), p.text("path"), p.text("detail"))
        for p in raw.objs("problems")
    ]
    return PathVerdict(raw.text("path"), tuple(problems), raw.integer("shards"), raw.integer("bytes"))


def _problem_kind(text: str) -> ProblemKind:
    """The prepare job's problem word; one this console does not know is an error."""
    return cast(ProblemKind, text) if text in PROBLEM_WORDS else "error"


def verdict_of(
    node: NodeSnapshot, result: NodeJobResult | BaseException, fetched: tuple[str, ...] = ()
) -> NodeVerdict:
    """One node's verdict from its job's events (or the error that kept the job from running)."""
    if isinstance(result, BaseException):
        return NodeVerdict(
            node.node_id, node.label, error=" ".join(str(result).split())[:300] or type(result).__name__
        )
    events = {e.value("event"): e for e in result.events}
    if "checkpoint" not in events or "dataset" not in events:
        why = result.message or f"the prepare job ended {result.status} without a verdict"
        return NodeVerdict(node.node_id, node.label, error=" ".join(why.split())[:300], fetched=fetched)
    ckpt, data = _path_verdict(events["checkpoint"]), _path_verdict(events["dataset"])
    return NodeVerdict(
        node.node_id,
        node.label,
        _with_errors(ckpt, result, "checkpoint"),
        _with_errors(data, result, "dataset"),
        fetched=fetched,
    )


def _with_errors(verdict: PathVerdict | None, result: NodeJobResult, what: str) -> PathVerdict | None:
    """A failed fetch is a problem of what it fetched, even where the files it left pass the check."""
    errors = [
        str(e.value("message"))
        for e in result.events
        if e.value("event") == "error" and e.value("what") == what
    ]
    if not errors or verdict is None:
        return verdict
    extra = tuple(FileProblem("error", verdict.path, msg) for msg in errors)
    return PathVerdict(verdict.path, verdict.problems + extra, verdict.files, verdict.bytes)


def _fetch_event(node: NodeSnapshot, raw: Fields) -> FetchEvent | None:
    kind = raw.text("event")
    what = raw.text("what")
    total = raw.value("total")
    total_i = int(total) if isinstance(total, int) else None
    if kind in ("progress", "resume", "file_done"):
        return FetchEvent(
            node.node_id,
            node.label,
            what,
            kind,
            raw.text("file"),
            raw.integer("done"),
            total_i,
        )
    if kind == "shared":
        return FetchEvent(
            node.node_id,
            node.label,
            what,
            kind,
            text=f"shares {raw.value('path')} with node {str(raw.value('node'))[:8]}: fetched once, there",
        )
    if kind == "fetched":
        return FetchEvent(
            node.node_id,
            node.label,
            what,
            kind,
            text=f"fetched {raw.value('files')} file(s), {human(raw.integer('bytes'))}",
        )
    if kind == "error":
        return FetchEvent(node.node_id, node.label, what, kind, text=f"fetch failed: {raw.value('message')}")
    return None


def hub_env(environ: dict[str, str] | os._Environ[str] | None = None) -> dict[str, str]:
    source = os.environ if environ is None else environ
    return {k: source[k] for k in HUB_ENV if source.get(k)}


async def prepare(
    spec: RunSpec,
    client: RayClient,
    snap: ClusterSnapshot,
    *,
    fetch: bool = False,
    on_event: Callable[[FetchEvent], None] | None = None,
    env: dict[str, str] | None = None,
    timeout_s: float | None = None,
) -> PrepareReport:
    """Check (and with `fetch`, complete) every alive node of `snap`; one pinned job per node, in parallel."""
    checkpoint, dataset = targets(spec)
    model_repo, dataset_repo = repos(spec)
    if fetch and not (model_repo or dataset_repo):
        raise ConsoleError("nothing to fetch from: the preset names no model.org and no data.repo")
    token = secrets.token_hex(8)
    nodes = list(snap.alive_nodes)
    fetched: dict[str, list[str]] = {n.node_id: [] for n in nodes}

    async def one(node: NodeSnapshot) -> NodeJobResult:
        request = PrepareRequest(
            node_id=node.node_id,
            node_ip=node.ip,
            checkpoint=checkpoint,
            dataset=dataset,
            input_key=spec.data.input_key,
            label_key=spec.data.label_key,
            fetch=fetch,
            token=token,
            model_repo=(model_repo or "") if fetch else "",
            dataset_repo=(dataset_repo or "") if fetch else "",
            revision="main",
            wait_s=FETCH_TIMEOUT_S,
        )

        def seen(raw: Fields) -> None:
            event = _fetch_event(node, raw)
            if event is None:
                return
            if event.kind in ("fetched", "shared"):
                fetched[node.node_id].append(f"{event.what}: {event.text}")
            if on_event is not None:
                on_event(event)

        return await run_node_job(
            client,
            node.node_id,
            JOB_SCRIPT,
            ["--prepare-job", json.dumps(asdict(request))],
            mark=MARK,
            purpose="prepare",
            env=hub_env() if env is None else env,
            timeout_s=timeout_s or (FETCH_TIMEOUT_S if fetch else CHECK_TIMEOUT_S),
            on_event=seen,
        )

    results = await asyncio.gather(*(one(n) for n in nodes), return_exceptions=True)
    verdicts = tuple(verdict_of(n, r, tuple(fetched[n.node_id])) for n, r in zip(nodes, results, strict=True))
    notes = tuple(f"node {n.label} is {n.state}: not checked" for n in snap.dead_nodes)
    return PrepareReport(spec.preset, checkpoint, dataset, verdicts, fetch, notes)


def _cell(verdict: PathVerdict | None, *, shards: bool = False) -> str:
    """One path's table cell: not asked, ok (with the checkpoint's shards and size), or its problem count."""
    if verdict is None:
        return "-"
    if not verdict.ok:
        return f"{len(verdict.problems)} problem(s)"
    return f"ok, {verdict.files} shard(s), {human(verdict.bytes)}" if shards else "ok"


def _row(n: NodeVerdict) -> tuple[str, str, str, str]:
    """One node's row of the table."""
    return n.label, _cell(n.checkpoint, shards=True), _cell(n.dataset), "READY" if n.ready else "NOT READY"


def _problem_lines(n: NodeVerdict) -> list[str]:
    """What is wrong on one node, each line naming it."""
    out = [f"  {n.label}: cannot check: {n.error}"] if n.error else []
    return out + [f"  {n.label}: {p.text()}" for p in n.problems]


def table(report: PrepareReport) -> list[str]:
    """The per-node table and the verdict, as the CLI prints them (each problem named with its node)."""
    rows = [("node", "checkpoint", "dataset", "verdict"), *map(_row, report.nodes)]
    out = [f"prepare {report.spec_preset}: checkpoint {report.checkpoint}, dataset {report.dataset}"]
    out += _aligned(rows)
    out += [line for n in report.nodes for line in _problem_lines(n)]
    out += [f"  note: {note}" for note in report.notes]
    ready = sum(1 for n in report.nodes if n.ready)
    out.append(
        f"verdict: {'READY' if report.ready else 'NOT READY'} ({ready} of {len(report.nodes)} node(s) ready)"
    )
    return out


def _aligned(rows: list[tuple[str, str, str, str]]) -> list[str]:
    """The rows as indented columns, each as wide as its widest cell."""
    widths = [max(len(r[i]) for r in rows) for i in range(4)]
    return ["  " + "  ".join(c.ljust(w) for c, w in zip(r, widths, strict=True)).rstrip() for r in rows]
