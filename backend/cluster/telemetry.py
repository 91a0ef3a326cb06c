"""Cluster snapshots: every node (alive or dead, with Ray's reason), its GPUs and logical GPU use.

One snapshot is built from Ray's node summary (`/nodes?view=summary`: alive nodes, per-GPU
utilisation and memory, logical resources) merged with the state API's node list
(`/api/v0/nodes`: keeps DEAD nodes and says why they died). The summary drops a dead node after a
few seconds and can still call a dying one ALIVE, so the state list wins on liveness.

Why the poller fetches the state list rarely: the summary alone is enough while the set of alive
nodes is unchanged, and Ray refreshes telemetry only every ~5 s (summary cached 2 s), so polling
faster than every 2 s buys nothing. `TelemetryPoller` re-reads the state list when the set of
alive nodes changes and otherwise every `dead_refresh_s`, which keeps the average well under one
dashboard request per second.

A node whose agent reports no GPUs gets `gpus=None` ("no GPU telemetry"), never 0 %: on this
project's test machines the logical GPUs exist without any NVML behind them. Readings carry their
age (`telemetry_age_s`, `stale`, and `age_at(now)` as time passes): on a real H200 the summary lags
5-8 s behind NVML and can freeze, so a reading older than two reporter periods (10 s) is stale.

A node's GPUs come from the freshest source it has, in this order, and the node says which (`gpu_source`):
the console's own GPU probe (NVML once a second, followed through its job log; backend.cluster.gpu_probe),
miles' own per-GPU samples where a run writes them (`--use-miles-dashboard`;
backend.cluster.miles_gpu_streams), Ray's reporter. Each source is stale past its own normal cadence
(`STALE_LIMITS_S`): miles' sampler hands samples over every 5 s and its
store flushes every 5 s, so a 10 s old sample is normal there, not stale.
"""

from __future__ import annotations

import asyncio
import contextlib
import re
import time
from collections import Counter
from collections.abc import AsyncIterator, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Literal, NamedTuple

from pydantic import BaseModel, ConfigDict, Field

from backend.cluster.miles_gpu_streams import MilesGpuStreams, dump_details_dir
from backend.errors import ConsoleError
from backend.json_fields import Fields
from backend.natural_order import natural_key
from backend.node_names import NodeNames, display_name
from backend.node_names import label as node_label

if TYPE_CHECKING:
    from backend.cluster.dashboard import JobInfo, RayClient
    from backend.cluster.gpu_probe import GpuProbe, ProbeGpu, ProbeReading
    from backend.cluster.miles_gpu_streams import MilesGpuSample, MilesGpuStreams

REPORTER_PERIOD_S = 5.0  # Ray's reporter agent reads NVML this often
STALE_AFTER_S = 2 * REPORTER_PERIOD_S
# Where the GPU numbers come from, shown with them: NVML's memory info counts reserved memory, so
# it reads higher than nvidia-smi's per-process figures (ray.md §8: 1625 vs 1011 MiB).
GPU_SOURCE = "Ray reporter (NVML, every 5 s; memory incl. reserved, MiB)"
GpuSource = Literal["ray", "miles", "probe"]
SOURCE_LABELS: dict[str, str] = {"ray": "Ray reporter", "miles": "miles dashboard", "probe": "GPU probe"}
# Past these ages a reading is stale: two periods of each source's normal cadence (the probe samples every 1
# s; miles' newest sample on disk is normally up to 5 s push + 5 s flush old; Ray's reporter reads every 5 s).
STALE_LIMITS_S: dict[str, float] = {"probe": 5.0, "miles": 20.0, "ray": STALE_AFTER_S}
PROBE_COALESCE_S = 0.05  # one probe print carries every node within a few ms: one snapshot for the burst
DEFAULT_INTERVAL_S = 2.5
# Ray's reporter refreshes every 5 s and the summary is cached 2 s: asking more often than this
# returns the last snapshot without a request, whatever interval a caller polls at.
MIN_REQUEST_INTERVAL_S = 2.5
DEAD_REFRESH_S = 30.0
UNLISTED_MEMORY_SHARE = 0.10  # idle H200 under Ray: 615 of 143771 MiB
_LOGICAL_GPU = re.compile(r"([\d.]+)/([\d.]+)\s+GPU\b")


class GpuProcess(NamedTuple):
    """A process holding memory on one GPU, as NVML (through Ray's reporter) lists it."""

    pid: int
    mem_mb: int


class GpuSnapshot(BaseModel):
    """One physical GPU. `utilization_pct` is None when the device does not report it."""

    model_config = ConfigDict(frozen=True)

    index: int
    name: str = ""
    uuid: str = ""
    utilization_pct: float | None = None
    mem_used_mb: int = 0
    mem_total_mb: int = 0
    processes: list[GpuProcess] = Field(default_factory=list)
    power_w: int | None = None
    temp_c: int | None = None


class NodeSnapshot(BaseModel):
    """One Ray node. `gpus is None` means the node sends no GPU telemetry (not "idle GPUs")."""

    model_config = ConfigDict(frozen=True)

    node_id: str
    name: str = ""
    ip: str = ""
    hostname: str = ""
    # another node has this hostname too (one machine, a test cluster): the hostname alone names neither
    shares_host: bool = False
    alive: bool = True
    state: str = "ALIVE"
    death_reason: str | None = None
    is_head: bool = False
    gpus: list[GpuSnapshot] | None = None
    logical_gpus_total: float = 0.0
    logical_gpus_used: float | None = None  # None: Ray has not reported logical usage yet
    telemetry_age_s: float | None = None  # seconds since the reading was taken, as of the snapshot
    stale: bool = False
    gpu_source: GpuSource = "ray"
    gpu_note: str = ""  # why there are no GPU readings (e.g. the probe found no NVML there)

    @property
    def display_name(self) -> str:
        """The node's name in every view (backend/node_names.py)."""
        return display_name(self)

    @property
    def label(self) -> str:
        """How the console names a node to an operator where there is room: its name and its IP (its short
        id where the name is the IP: nodes on one host share it)."""
        return node_label(self)


class ClusterSnapshot(BaseModel):
    """Everything the GPU-fleet view and preflight need, from one poll. JSON-able and stable."""

    model_config = ConfigDict(frozen=True)

    nodes: list[NodeSnapshot] = Field(default_factory=list)
    taken_at: float = 0.0  # epoch seconds (console clock)
    ray_version: str | None = None
    gpu_source: str = GPU_SOURCE
    roles: dict[str, str] = Field(default_factory=dict)  # "<node id>:<pid>" -> the attached job's role for it

    @property
    def names(self) -> NodeNames:
        """IP and node id -> the node's name, for the messages that name a node by what the log said."""
        return NodeNames.of(self.nodes)

    def role_of(self, node_id: str, pid: int) -> str:
        return self.roles.get(f"{node_id}:{pid}", "")

    @property
    def alive_nodes(self) -> list[NodeSnapshot]:
        return [n for n in self.nodes if n.alive]

    @property
    def dead_nodes(self) -> list[NodeSnapshot]:
        return [n for n in self.nodes if not n.alive]

    def node(self, node_id: str) -> NodeSnapshot | None:
        return next((n for n in self.nodes if n.node_id == node_id), None)

    def age_at(self, node: NodeSnapshot, now: float) -> float | None:
        """How old `node`'s reading is at `now` (it keeps ageing after the snapshot was taken)."""
        if node.telemetry_age_s is None:
            return None
        return node.telemetry_age_s + max(0.0, now - self.taken_at)

    def stale_at(self, node: NodeSnapshot, now: float) -> bool:
        age = self.age_at(node, now)
        return node.stale or (age is not None and age > STALE_LIMITS_S[node.gpu_source])

    def oldest_age(self, now: float) -> float | None:
        """The age of the oldest GPU reading of an alive node at `now` (None: no reading carries an age)."""
        ages = [a for n in self.alive_nodes if n.gpus is not None and (a := self.age_at(n, now)) is not None]
        return max(ages) if ages else None

    @property
    def sources(self) -> tuple[str, ...]:
        """The GPU sources in use, for the pane's header."""
        return tuple(
            dict.fromkeys(SOURCE_LABELS[n.gpu_source] for n in self.alive_nodes if n.gpus is not None)
        )

    def gpu_holders(self) -> dict[str, list[tuple[int, GpuProcess]]]:
        """Alive node id -> [(gpu index, process)] for every process Ray lists as holding GPU memory."""
        out: dict[str, list[tuple[int, GpuProcess]]] = {}
        for node in self.alive_nodes:
            held = [(gpu.index, p) for gpu in node.gpus or [] for p in gpu.processes if p.mem_mb > 0]
            if held:
                out[node.node_id] = held
        return out

    def unlisted_memory(self, share: float = UNLISTED_MEMORY_SHARE) -> list[tuple[NodeSnapshot, GpuSnapshot]]:
        """GPUs showing more than `share` of their memory in use with no process listed: where Ray
        cannot list PIDs (ray.md §8), memory held is the only sign of a leftover."""
        return [
            (node, gpu)
            for node in self.alive_nodes
            for gpu in node.gpus or []
            if not gpu.processes and gpu.mem_total_mb and gpu.mem_used_mb > share * gpu.mem_total_mb
        ]

    def to_json(self) -> str:
        return self.model_dump_json()

    @classmethod
    def from_json(cls, text: str) -> ClusterSnapshot:
        return cls.model_validate_json(text)


# --------------------------------------------------------------------------- pure parsing


def _parse_gpu(raw: Fields) -> GpuSnapshot:
    util = raw.number("utilizationGpu")
    # Ray sends -1 when NVML failed and null when the device does not report utilisation.
    procs = [
        GpuProcess(item.integer("pid"), item.integer("gpuMemoryUsage"))
        for item in raw.objs("processesPids")
        if item.value("pid") is not None
    ]
    return GpuSnapshot(
        index=raw.integer("index"),
        name=raw.text("name"),
        uuid=raw.text("uuid"),
        utilization_pct=util if util is not None and util >= 0 else None,
        mem_used_mb=raw.integer("memoryUsed"),
        mem_total_mb=raw.integer("memoryTotal"),
        processes=procs,
    )


def _logical_used(text: object) -> float | None:
    if not isinstance(text, str):
        return None
    match = _LOGICAL_GPU.search(text)
    return float(match.group(1)) if match else None


def _summary_node(raw: Fields, logical: Fields, taken_at: float) -> NodeSnapshot | None:
    raylet = raw.obj("raylet")
    node_id = raylet.text("nodeId")
    if not node_id:
        return None
    gpus = [_parse_gpu(g) for g in raw.objs("gpus")]
    now = raw.number("now")
    age = max(0.0, taken_at - now) if now is not None and taken_at else None
    state = raylet.text("state", "ALIVE")
    return NodeSnapshot(
        node_id=node_id,
        name=raylet.text("nodeName"),
        ip=raw.text("ip"),
        hostname=raw.text("hostname"),
        alive=state == "ALIVE",
        state=state,
        death_reason=raylet.optional_text("stateMessage") if state != "ALIVE" else None,
        is_head=raylet.has("isHeadNode"),
        gpus=gpus or None,
        logical_gpus_total=raylet.obj("resourcesTotal").real("GPU"),
        logical_gpus_used=_logical_used(logical.value(node_id)),
        telemetry_age_s=age,
        stale=age is not None and age > STALE_AFTER_S,
    )


def _state_node(raw: Fields) -> NodeSnapshot:
    state = raw.text("state", "DEAD")
    return NodeSnapshot(
        node_id=raw.text("node_id"),
        name=raw.text("node_name"),
        ip=raw.text("node_ip"),
        alive=state == "ALIVE",
        state=state,
        death_reason=raw.text("state_message", "no reason given") if state != "ALIVE" else None,
        is_head=raw.has("is_head_node"),
        logical_gpus_total=raw.obj("resources_total").real("GPU"),
        logical_gpus_used=None if state == "ALIVE" else 0.0,
    )


def summary_node_ids(raw: object) -> frozenset[str]:
    """The node ids a summary payload (the full response or its `data`) lists: the alive nodes."""
    return frozenset(item.obj("raylet").text("nodeId", "None") for item in _summary_data(raw).objs("summary"))


def _summary_data(raw: object) -> Fields:
    payload = Fields.of(raw)
    return Fields.of(payload.raw["data"]) if "data" in payload.raw else payload


def _merge_listed(by_id: dict[str, NodeSnapshot], listed: NodeSnapshot) -> None:
    """Fold one node of the state API's list into the summary's nodes: it adds the nodes whose agent has
    not reported yet and says which are dead."""
    known = by_id.get(listed.node_id)
    if known is None:
        by_id[listed.node_id] = listed
    elif not listed.alive:
        by_id[listed.node_id] = known.model_copy(
            update={
                "alive": False,
                "state": listed.state,
                "death_reason": listed.death_reason,
                "logical_gpus_used": 0.0,
                # the summary's entry of a dead node lost its node name (Ray's death notice carries none)
                "name": known.name or listed.name,
                "ip": known.ip or listed.ip,
            }
        )


def _host_sharing(nodes: list[NodeSnapshot]) -> list[NodeSnapshot]:
    """The nodes, each knowing whether another one has its hostname: then the hostname alone names none of
    them (backend/node_names.py adds the node's short id)."""
    counts = Counter(n.hostname for n in nodes if n.hostname)
    return [n.model_copy(update={"shares_host": True}) if counts[n.hostname] > 1 else n for n in nodes]


def parse_nodes_summary(
    raw: object,
    state_nodes: Sequence[object] | None = None,
    *,
    taken_at: float | None = None,
    ray_version: str | None = None,
) -> ClusterSnapshot:
    """Build a snapshot from the summary payload (the full response or its `data`) and, when given,
    the state API's node list (which adds dead nodes and corrects liveness). Pure."""
    data = _summary_data(raw)
    taken = time.time() if taken_at is None else taken_at
    logical = data.obj("nodeLogicalResources")
    by_id: dict[str, NodeSnapshot] = {}
    for item in data.objs("summary"):
        node = _summary_node(item, logical, taken)
        if node is not None:
            by_id[node.node_id] = node
    for item in map(Fields.of, state_nodes or []):
        if item.has("node_id"):
            _merge_listed(by_id, _state_node(item))
    nodes = sorted(
        _host_sharing(list(by_id.values())),
        key=lambda n: (not n.alive, not n.is_head, natural_key(n.display_name), n.node_id),
    )
    return ClusterSnapshot(nodes=nodes, taken_at=taken, ray_version=ray_version)


def with_probe_readings(
    snap: ClusterSnapshot, readings: dict[str, ProbeReading], now: float
) -> ClusterSnapshot:
    """`snap` with each alive node's GPUs from the console's probe (by node id) wherever its reading is fresh:
    utilisation, memory, power, temperature and the processes holding each GPU as NVML read them a moment ago.
    A node where the probe found no NVML says so. Pure."""
    nodes = [
        _with_probe(node, readings.get(node.node_id) if node.alive else None, now) for node in snap.nodes
    ]
    return snap.model_copy(update={"nodes": nodes, "taken_at": now})


def _with_probe(node: NodeSnapshot, mine: ProbeReading | None, now: float) -> NodeSnapshot:
    """One node with the probe's GPUs when its reading is fresh; as it was otherwise."""
    if mine is None:
        return node
    age = max(0.0, now - mine.ts)
    if age > STALE_LIMITS_S["probe"]:
        return node
    gpus = None if mine.gpus is None else [_probe_gpu(node, g) for g in mine.gpus]
    return node.model_copy(
        update={
            "gpus": gpus or None,
            "telemetry_age_s": age,
            "stale": False,
            "gpu_source": "probe",
            "gpu_note": f"no NVML: {mine.nvml}" if mine.gpus is None else "",
        }
    )


def _probe_gpu(node: NodeSnapshot, g: ProbeGpu) -> GpuSnapshot:
    """One GPU as NVML read it, named as Ray's reporter knows it."""
    known = _gpu(node, g.index)
    return GpuSnapshot(
        index=g.index,
        name=known.name if known else "",
        uuid=known.uuid if known else "",
        utilization_pct=g.util,
        mem_used_mb=g.mem_used_mb,
        mem_total_mb=g.mem_total_mb,
        processes=[GpuProcess(p.pid, p.mem_mb) for p in g.processes],
        power_w=g.power_w,
        temp_c=g.temp_c,
    )


def _gpu(node: NodeSnapshot, index: int) -> GpuSnapshot | None:
    return next((g for g in node.gpus or () if g.index == index), None)


def with_miles_samples(
    snap: ClusterSnapshot, samples: dict[str, dict[int, MilesGpuSample]], now: float
) -> ClusterSnapshot:
    """`snap` with each alive node's GPUs from miles' samples (matched by IP) wherever those are fresh and no
    fresher source (the probe) has the node (one source per node, so the pane never flips between them); Ray's
    memory totals and process lists are kept. Pure."""
    nodes = [_with_miles(node, _miles_of(node, samples), now) for node in snap.nodes]
    return snap.model_copy(update={"nodes": nodes, "taken_at": now})


def _miles_of(node: NodeSnapshot, samples: dict[str, dict[int, MilesGpuSample]]) -> dict[int, MilesGpuSample]:
    """miles' samples for an alive node no fresher source has ({} otherwise)."""
    if not (node.alive and node.ip and node.gpu_source == "ray"):
        return {}
    return samples.get(node.ip) or {}


def _with_miles(node: NodeSnapshot, mine: dict[int, MilesGpuSample], now: float) -> NodeSnapshot:
    """One node with miles' utilisation and memory when its samples are fresh; as it was otherwise
    (samples that stopped leave Ray's reporter, with its own age)."""
    if not mine:
        return node
    age = max(0.0, now - min(s.ts for s in mine.values()))
    if age > STALE_LIMITS_S["miles"]:
        return node
    known = {g.index: g for g in node.gpus or []}
    gpus = [
        known[i].model_copy(update={"utilization_pct": s.util, "mem_used_mb": s.mem_mb})
        if i in known
        else GpuSnapshot(index=i, utilization_pct=s.util, mem_used_mb=s.mem_mb)
        for i, s in sorted(mine.items())
    ]
    gpus += [g for i, g in sorted(known.items()) if i not in mine]
    return node.model_copy(
        update={"gpus": gpus, "telemetry_age_s": age, "stale": False, "gpu_source": "miles"}
    )


# --------------------------------------------------------------------------- I/O


async def snapshot(
    client: RayClient, *, include_dead: bool = True, ray_version: str | None = None
) -> ClusterSnapshot:
    """One snapshot now: the summary, plus the state node list when `include_dead` (2 requests)."""
    summary = await client.nodes_summary()
    state_nodes = await client.nodes() if include_dead else None
    return parse_nodes_summary(summary, state_nodes, ray_version=ray_version)


class TelemetryPoller:
    """Polls snapshots at `interval_s`; re-reads the state node list only when needed.

    Use `async for snap in poller.run():` (from a Textual worker or a CLI loop). Errors (dashboard
    unreachable) are yielded and polling continues, so the view recovers by itself when the dashboard returns.
    """

    def __init__(
        self,
        client: RayClient,
        *,
        interval_s: float = DEFAULT_INTERVAL_S,
        dead_refresh_s: float = DEAD_REFRESH_S,
        min_request_interval_s: float = MIN_REQUEST_INTERVAL_S,
    ) -> None:
        self.client = client
        self.interval_s = max(0.5, interval_s)
        self.dead_refresh_s = dead_refresh_s
        self.min_request_interval_s = min_request_interval_s
        self._polled_at = -float("inf")
        self.last: ClusterSnapshot | None = None
        self._state_nodes: list[object] | None = None
        self._state_at = 0.0
        self._alive_ids: frozenset[str] = frozenset()
        self._ray_version: str | None = None
        self._stopped = asyncio.Event()
        self._ray_snap: ClusterSnapshot | None = None
        self._streams: MilesGpuStreams | None = None
        self._dump_dir: Path | None = None
        self._probe: GpuProbe | None = None
        self._roles: dict[str, str] = {}

    def set_roles(self, roles: dict[str, str]) -> None:
        """Name the attached job's processes ("<node id>:<pid>" -> role) wherever the snapshot lists them."""
        self._roles = dict(roles)

    def use_probe(self, probe: GpuProbe | None) -> None:
        """Take each node's GPUs from the console's probe first, wherever its reading is fresh."""
        self._probe = probe

    async def wait_next(self, timeout_s: float) -> None:
        """Sleep until the probe has a new reading (then a few
        ms more, for the rest of its burst) or `timeout_s`."""
        probe = self._probe
        if probe is None:
            await asyncio.sleep(timeout_s)
            return
        with contextlib.suppress(asyncio.TimeoutError):
            await asyncio.wait_for(probe.updated.wait(), timeout_s)
            await asyncio.sleep(PROBE_COALESCE_S)
        probe.updated.clear()

    def watch_job(self, job: JobInfo | None) -> None:
        """Read miles' GPU streams of `job`'s dump directory, when it writes them, before Ray's reporter."""
        found = dump_details_dir(job)
        if found != self._dump_dir:
            self._dump_dir = found
            self._streams = MilesGpuStreams(found) if found is not None else None

    def _merged(self, snap: ClusterSnapshot) -> ClusterSnapshot:
        now = time.time()
        probe, streams = self._probe, self._streams
        if probe is not None and probe.readings:
            snap = with_probe_readings(snap, probe.readings, now)
        if streams is not None and streams.present:
            snap = with_miles_samples(snap, streams.poll(), now)
        if self._roles != snap.roles:
            snap = snap.model_copy(update={"roles": self._roles})
        return snap

    def stop(self) -> None:
        self._stopped.set()

    async def poll_once(self) -> ClusterSnapshot:
        """A fresh snapshot: Ray's part at most every `min_request_interval_s` (else its last one), miles'
        streams, when the watched run writes them, read on every call."""
        if self._ray_snap is not None and time.monotonic() - self._polled_at < self.min_request_interval_s:
            merged = self._merged(self._ray_snap)
            if merged is not self._ray_snap:
                self.last = merged
            return self.last or merged
        if self._ray_version is None:
            with contextlib.suppress(Exception):
                self._ray_version = Fields(await self.client.version()).optional_text("ray_version")
        summary = await self.client.nodes_summary()
        alive_ids = summary_node_ids(summary)
        now = time.monotonic()
        if (
            self._state_nodes is None
            or alive_ids != self._alive_ids
            or now - self._state_at >= self.dead_refresh_s
        ):
            self._state_nodes = await self.client.nodes()
            self._state_at = now
        self._alive_ids = alive_ids
        snap = parse_nodes_summary(summary, self._state_nodes, ray_version=self._ray_version)
        self._ray_snap, self._polled_at = snap, time.monotonic()
        self.last = self._merged(snap)
        return self.last

    async def run(self) -> AsyncIterator[ClusterSnapshot | Exception]:
        """Yield a snapshot per interval, or the ConsoleError that stopped one (then keep going)."""
        sent: ClusterSnapshot | None = None
        while not self._stopped.is_set():
            try:
                snap = await self.poll_once()
                if snap is not sent:  # a throttled poll returns the last snapshot: not news
                    sent = snap
                    yield snap
            except ConsoleError as err:
                self._state_nodes = None  # re-read everything once the dashboard is back
                yield err
            with contextlib.suppress(asyncio.TimeoutError):
                await asyncio.wait_for(self._stopped.wait(), self.interval_s)
