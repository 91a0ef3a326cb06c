"""The console's side of its GPU probe (backend/cluster/gpu_probe_job.py): find it or start it, keep it alive
with a lease, follow its log into the freshest GPU readings the console has.

One probe per cluster, shared: a console adopts the probe it finds in the job list (marked `PROBE_KEY`, named
`ultra-console-gpu-probe-*`), else starts one unless it is read-only (a `--readonly` console reads a probe
that runs and starts none). Each console renews its own lease file in the probe's lease directory every
`LEASE_RENEW_S`; the probe ends once none is fresher than its lease timeout, so a console killed with SIGKILL
or cut off with its SSH session keeps nothing running for more than a minute. When the probe ends (lease gap,
lifetime, crash) a writable console starts the next one, at most `MAX_STARTS` in `START_WINDOW_S`.

The lease directory named on a probe's entrypoint comes from the network: a console writes its lease only
where it is this console's own lease directory (under the per-user runtime dir, else the state dir; proven
the user's own by backend/safe_paths.py), opened with O_NOFOLLOW. A probe whose lease directory is any other
is followed without a lease; a lease that cannot be written starts no probe (it would end for want of one).

The readings are NVML's of one second ago (util, memory, power, temperature, and the PIDs holding each GPU),
for the pane and for the abort flow's first look; anything that signals a process still reads the node itself
after the end (the reaper), never these.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import shlex
import socket
import time
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from backend.cluster.dashboard import JobInfo, RayClient
from backend.cluster.job_identity import PROBE_KEY, job_kind
from backend.cluster.node_job import script_source
from backend.errors import ConsoleError
from backend.json_fields import Fields
from backend.safe_paths import UnsafePath, open_private, private_dir, read_private_tail, safe_name
from backend.sanitize import one_line, sanitize_text

SCRIPT = Path(__file__).with_name("gpu_probe_job.py")
MARK = "ULTRA_CONSOLE_GPU "
SUBMISSION_PREFIX = "ultra-console-gpu-probe-"
LEASE_SUFFIX = ".lease"
LEASE_TIMEOUT_S = 45.0  # the probe ends this long after the last renewal of the last lease
LEASE_RENEW_S = 10.0
SAMPLE_INTERVAL_S = 1.0
MAX_AGE_S = 3600.0  # its log grows ~0.4 KB per node and second: a fresh probe every hour keeps a replay short
STALE_AFTER_S = 5.0  # a reading a few missed samples old
READINGS_NAME = "readings.json"  # the probe's file in its lease directory (gpu_probe_job.READINGS_NAME)
FILE_POLL_S = 0.1  # the console looks at the file this often (a stat; read only when it changed)
FILE_LIMIT = 4 << 20  # a file larger than this is not the probe's (16 nodes x 8 GPUs is ~10 KB)
PROBE_GONE_S = 15.0  # the file unchanged this long: the probe is gone, find or start another
RETRY_S = 2.0
LEASE_UNSEEN_S = (
    15.0  # our lease missing from the probe's list this long after writing it: it cannot see our file
)
MAX_STARTS, START_WINDOW_S = 4, 3600.0  # probes one console submits at most per window (none ran long)
START_CLAIM = "starting"
START_CLAIM_S = (
    20.0  # two consoles starting at once: the one holding this file submits, the other waits for it
)


@dataclass(frozen=True)
class ProbeProcess:
    pid: int
    mem_mb: int


@dataclass(frozen=True)
class ProbeGpu:
    """One GPU as NVML read it on its node."""

    index: int
    util: float | None
    mem_used_mb: int
    mem_total_mb: int
    power_w: int | None
    temp_c: int | None
    processes: tuple[ProbeProcess, ...] = ()


@dataclass(frozen=True)
class ProbeReading:
    """One node's sample: `gpus` None with `nvml` saying why, where the node has no NVML."""

    node_id: str
    ts: float  # epoch seconds, the node's clock
    gpus: tuple[ProbeGpu, ...] | None
    nvml: str = ""
    cpu_s: float | None = None  # the sampling process's CPU seconds so far


def _opt(value: object) -> int | None:
    return None if not isinstance(value, int) or value < 0 else value


def parse_reading(obj: Mapping[str, Any]) -> ProbeReading | None:
    """A sample line's object as a reading, or None when it is not one (any field of the wrong shape)."""
    try:
        node, ts = str(obj["n"]), float(obj["t"])
        cpu = float(obj["c"]) if isinstance(obj.get("c"), (int, float)) else None
        if "g" not in obj:
            return ProbeReading(
                node, ts, None, sanitize_text(str(obj.get("nvml") or "no GPU reading"))[:200], cpu
            )
        gpus = tuple(
            ProbeGpu(
                int(g[0]),
                None if g[1] is None or g[1] < 0 else float(g[1]),
                int(g[2]),
                int(g[3]),
                _opt(g[4]),
                _opt(g[5]),
                tuple(ProbeProcess(int(p), int(m)) for p, m in g[6]),
            )
            for g in obj["g"]
        )
        return ProbeReading(node, ts, gpus, cpu_s=cpu)
    except (KeyError, TypeError, ValueError, IndexError):
        return None


def parse_line(line: str) -> dict[str, object] | None:
    """The JSON object of a probe line (anywhere in the line: Ray may prefix it), or None."""
    pos = line.find(MARK)
    if pos < 0:
        return None
    try:
        obj = json.loads(line[pos + len(MARK) :])
    except (ValueError, RecursionError):
        return None
    return obj if isinstance(obj, dict) else None


def is_probe(job: JobInfo) -> bool:
    return job_kind(job) == "probe"


def lease_dir_of(job: JobInfo) -> Path | None:
    """The lease directory named on a probe's entrypoint."""
    try:
        tokens = shlex.split(job.entrypoint or "")
    except ValueError:
        return None
    for i, tok in enumerate(tokens):
        if tok.startswith("--lease-dir="):
            return Path(tok.split("=", 1)[1])
        if tok == "--lease-dir" and i + 1 < len(tokens):
            return Path(tokens[i + 1])
    return None


def lease_root() -> Path:
    """Where this user's lease directories live: the per-user runtime dir when it is the user's own
    (`$XDG_RUNTIME_DIR`, tmpfs, gone at logout), else the console's state dir. Never a shared /tmp name
    that another user could have created first."""
    runtime = os.environ.get("XDG_RUNTIME_DIR", "")
    if runtime and os.path.isabs(runtime):
        with contextlib.suppress(OSError, UnsafePath):
            return Path(private_dir(runtime, create=False)) / "ultra-console"
    from backend.settings import load_settings  # settings read only when a probe needs a lease directory

    return Path(load_settings().state_dir) / "gpu-probe"


def default_lease_dir(session_name: str, root: Path | None = None) -> Path:
    return (root or lease_root()) / f"gpu-probe-{safe_name(session_name or 'ray', limit=80)}"


def probe_submission(
    head_node_id: str, lease_dir: Path, *, lease_timeout_s: float, interval_s: float, max_age_s: float
) -> dict[str, object]:
    """The Ray job that starts a probe: no entrypoint resources, and no pinning of its own (the probe's actor
    is pinned to the head by NodeAffinity, which every Ray 2.x has: no label selector, so Ray < 2.54 too)."""
    source = script_source(SCRIPT)
    args = [
        "--gpu-probe",
        f"--node-id={head_node_id}",
        f"--lease-dir={lease_dir}",
        f"--lease-timeout={lease_timeout_s:g}",
        f"--interval={interval_s:g}",
        f"--max-age={max_age_s:g}",
    ]
    return {
        "entrypoint": shlex.join(["python3", "-c", source, *args]),
        "submission_id": f"{SUBMISSION_PREFIX}{int(time.time() * 1000)}",
        "metadata": {PROBE_KEY: "gpu-probe", "node_id": head_node_id},
    }


def _claim(path: Path) -> bool:
    """Create `path` exclusively (O_NOFOLLOW, in the console's own lease directory); a claim older than
    START_CLAIM_S was abandoned and is taken over."""
    for _ in range(2):
        try:
            os.close(open_private(path.parent, path.name, os.O_CREAT | os.O_EXCL | os.O_WRONLY))
            return True
        except FileExistsError:
            with contextlib.suppress(OSError):
                st = path.lstat()
                if time.time() - st.st_mtime > START_CLAIM_S or st.st_mtime - time.time() > START_CLAIM_S:
                    path.unlink()
                    continue
            return False
        except UnsafePath:
            return False
        except OSError:
            return True  # no claim possible here: the probe's own lock still keeps one running
    return False


def _alive_head(nodes: Iterable[Fields]) -> str:
    """The alive head node's id: where the probe's driver runs."""
    head = next(
        (n.text("node_id") for n in nodes if n.has("is_head_node") and n.value("state") == "ALIVE"), None
    )
    if head is None:
        raise ConsoleError("no alive head node to run the GPU probe on")
    return head


class GpuProbe:
    """Keeps a probe running (unless read-only) and its newest
    reading per node; `run()` does it until cancelled."""

    def __init__(
        self,
        client: RayClient,
        *,
        readonly: bool = False,
        lease_timeout_s: float = LEASE_TIMEOUT_S,
        lease_renew_s: float = LEASE_RENEW_S,
        interval_s: float = SAMPLE_INTERVAL_S,
        max_age_s: float = MAX_AGE_S,
        on_status: Callable[[str], None] | None = None,
        lease_home: Path | None = None,
    ) -> None:
        self.client = client
        self.lease_home = lease_home  # None: lease_root(), read when first needed
        self.readonly = readonly
        self.lease_timeout_s = lease_timeout_s
        self.lease_renew_s = min(lease_renew_s, lease_timeout_s / 3)
        self.interval_s = interval_s
        self.max_age_s = max_age_s
        self.on_status = on_status
        self.lease_id = f"{socket.gethostname()}-{os.getpid()}-{os.urandom(3).hex()}"
        self.readings: dict[str, ProbeReading] = {}
        self.job_id: str | None = None
        self.started: list[str] = []  # the probes this console submitted
        self.status = "GPU probe: looking for one"
        self.lease_seen = False
        self.updated = asyncio.Event()  # set on every new reading (the telemetry worker waits on it)
        self._lease_path: Path | None = None
        self._lease_written_at = 0.0
        self._lease_ok = False  # the last renewal reached the file
        self._starts: list[float] = []  # monotonic times of this console's submissions

    # ------------------------------------------------------------------ state
    def _say(self, text: str) -> None:
        if text != self.status:
            self.status = text
            if self.on_status is not None:
                self.on_status(text)

    def fresh(self, now: float, stale_after_s: float = STALE_AFTER_S) -> dict[str, ProbeReading]:
        """The readings at most `stale_after_s` old at `now`, by node id."""
        return {n: r for n, r in self.readings.items() if now - r.ts <= stale_after_s}

    # ------------------------------------------------------------------ lease
    def _renew(self) -> None:
        path = self._lease_path
        if path is None:
            return
        try:
            fd = open_private(path.parent, path.name, os.O_WRONLY | os.O_CREAT | os.O_TRUNC)
            try:
                os.write(fd, f"{time.time():.3f}\n".encode())
            finally:
                os.close(fd)
            self._lease_written_at = self._lease_written_at or time.monotonic()
            self._lease_ok = True
        except (OSError, UnsafePath) as err:
            self._lease_ok = False
            why = err.strerror if isinstance(err, OSError) and err.strerror else str(err)
            self._say(f"GPU probe: cannot renew this console's lease in {path.parent}: {one_line(why)}")

    def _own_lease_dir(self, lease_dir: Path) -> bool:
        """Whether `lease_dir` (named on a probe's entrypoint: from the network) is one of this console's own
        lease directories, so its lease may be written there."""
        home = self.lease_home or lease_root()
        return (
            lease_dir.parent == home
            and lease_dir.name.startswith("gpu-probe-")
            and ".." not in lease_dir.parts
        )

    def _take_lease(self, lease_dir: Path) -> None:
        if not self._own_lease_dir(lease_dir):
            self.drop_lease()
            self._say(
                f"GPU probe: its lease directory {one_line(str(lease_dir))[:200]!r} is not this console's "
                "own: followed without a lease"
            )
            return
        path = lease_dir / f"{self.lease_id}{LEASE_SUFFIX}"
        if path != self._lease_path:
            self.drop_lease()
            self._lease_path, self._lease_written_at, self.lease_seen = path, 0.0, False
        self._renew()

    def drop_lease(self) -> None:
        """Give this console's lease back (a clean exit); a killed console's lease simply expires."""
        if self._lease_path is not None:
            with contextlib.suppress(OSError):
                self._lease_path.unlink()
        self._lease_path = None

    async def _renew_forever(self) -> None:
        while True:
            await asyncio.sleep(self.lease_renew_s)
            self._renew()

    # ------------------------------------------------------------------ find / start
    async def _find(self) -> JobInfo | None:
        """The probe to follow: one whose lease directory is this console's own first, else any other."""
        probes = [j for j in await self.client.list_jobs() if is_probe(j) and not j.is_terminal]
        return min(probes, key=self._preference) if probes else None

    def _preference(self, job: JobInfo) -> tuple[bool, str]:
        lease_dir = lease_dir_of(job)
        return (lease_dir is None or not self._own_lease_dir(lease_dir), job.submission_id or "")

    def _too_many_starts(self, now: float) -> bool:
        """Whether probes keep dying at start: then no more are started (and that is said once per look)."""
        self._starts = [t for t in self._starts if now - t < START_WINDOW_S]
        if len(self._starts) < MAX_STARTS:
            return False
        self._say(
            f"GPU probe: {len(self._starts)} started in the last {START_WINDOW_S / 60:.0f} min and none "
            "kept running: starting no more (GPUs from miles' streams or Ray's reporter)"
        )
        return True

    async def _start(self) -> JobInfo | None:
        """Submit a probe, unless another console on this host is submitting one right now (then None)."""
        head = _alive_head(map(Fields.of, await self.client.nodes()))
        session = Fields(await self.client.version()).text("session_name", "ray")
        lease_dir = default_lease_dir(session, self.lease_home)
        self._take_lease(lease_dir)  # before it starts: it never sees a moment without a lease
        if not self._lease_ok:
            return None  # said by _renew: a probe started now would end for want of a lease
        now = time.monotonic()
        if self._too_many_starts(now):
            return None
        if not _claim(lease_dir / START_CLAIM) or await self._find() is not None:
            return None  # the other console's probe is found at the next look
        payload = probe_submission(
            head,
            lease_dir,
            lease_timeout_s=self.lease_timeout_s,
            interval_s=self.interval_s,
            max_age_s=self.max_age_s,
        )
        self._starts.append(now)
        sid = await self.client.submit(payload)
        self.started.append(sid)
        self._say(f"GPU probe: started {sid}")
        return await self.client.get_job(sid)

    async def _lease_dir(self) -> Path:
        session = Fields(await self.client.version()).text("session_name", "ray")
        return default_lease_dir(session, self.lease_home)

    async def _acquire(self) -> Path | None:
        """The lease directory whose probe to read: one whose file is fresh, else one being started (by a job
        that runs), else (writable) a new one; None while there is none to read."""
        lease_dir = await self._lease_dir()
        self._take_lease(lease_dir)
        if _probe_running(lease_dir):
            return lease_dir
        job = await self._find()
        if job is None and self.readonly:
            self._say(
                "GPU probe: none running (a --readonly console starts none); GPUs from miles' streams or "
                "Ray's reporter"
            )
            return None
        if job is None:
            job = await self._start()
        if job is None:
            return None
        self.job_id = job.id
        why = await self._launch_answer(job)
        if why:
            self._say(f"GPU probe {job.id}: {why}")
            return None
        return lease_dir

    async def _launch_answer(self, job: JobInfo) -> str:
        """What the probe's starting job said ("" for hello or duplicate: a probe runs), read from its log
        once it ended (a few seconds)."""
        async for line in self.client.follow_log(job.id):
            obj = parse_line(line)
            kind = Fields(obj or {}).value("k")
            if kind == "hello":
                self._say(f"GPU probe {job.id}: NVML every {self.interval_s:g} s on every node")
                return ""
            if kind == "duplicate":
                return ""
            if kind == "bye":
                return "ended: " + sanitize_text(Fields(obj or {}).text("why", "bye"))[:200]
        return "ended without a word (its log has no hello)"

    # ------------------------------------------------------------------ follow
    def _take(self, body: Mapping[str, Any]) -> str | None:
        """Use one state of the probe's file; returns why the probe ended, when it says so."""
        fields = Fields(dict(body))
        news = False
        for node, obj in fields.obj("nodes").raw.items():
            reading = parse_reading({**obj, "n": node}) if isinstance(obj, dict) else None
            old = self.readings.get(node)
            if reading is not None and (old is None or reading.ts > old.ts or reading.gpus != old.gpus):
                self.readings[node] = reading
                news = True
        if news:
            self.updated.set()
        self._leases_seen(fields.items("leases"))
        if fields.has("bye"):
            return sanitize_text(fields.text("bye", "bye"))[:200]
        return None

    def _leases_seen(self, ids: list[object]) -> None:
        self.lease_seen = self.lease_id in ids
        if (
            not self.lease_seen
            and self._lease_path is not None
            and self._lease_written_at
            and (time.monotonic() - self._lease_written_at > LEASE_UNSEEN_S)
        ):
            self._say(
                f"GPU probe: it does not see this console's lease in {self._lease_path.parent} "
                "(is this console on the Ray head?)"
            )

    async def _follow_file(self, lease_dir: Path) -> None:
        """Read the probe's file on every change (a stat every FILE_POLL_S) until the probe ends or its file
        stops changing for PROBE_GONE_S; a pause longer than STALE_AFTER_S is said with its age."""
        follower = _FileFollower(lease_dir)
        while True:
            body = follower.poll()
            if body is not None:
                if follower.stale_said:
                    self._say(f"GPU probe: reading again ({lease_dir / READINGS_NAME})")
                    follower.stale_said = False
                why = self._take(body)
                if why is not None:
                    self._say(f"GPU probe ended: {why}")
                    return
            idle = follower.idle()
            if idle > STALE_AFTER_S and not follower.stale_said:
                follower.stale_said = True
                self._say(
                    f"GPU probe: no reading for {idle:.0f} s (its file {lease_dir / READINGS_NAME} stopped "
                    "changing): the pane shows the readings' age, then Ray's reporter"
                )
            if idle > PROBE_GONE_S:
                self._say(f"GPU probe: no reading for {idle:.0f} s: looking for a probe again")
                return
            await asyncio.sleep(FILE_POLL_S)

    async def run(self) -> None:
        """Find or start the probe and follow it, forever (cancel to stop); a probe that ends is replaced."""
        renewer = asyncio.create_task(self._renew_forever())
        try:
            while True:
                try:
                    lease_dir = await self._acquire()
                    if lease_dir is not None:
                        await self._follow_file(lease_dir)
                except ConsoleError as err:
                    self._say(f"GPU probe unavailable: {err}")
                await asyncio.sleep(RETRY_S)
        finally:
            renewer.cancel()
            self.drop_lease()


def _probe_running(lease_dir: Path) -> bool:
    """Whether the probe's file in `lease_dir` changed within STALE_AFTER_S and does not say it ended."""
    follower = _FileFollower(lease_dir)
    body = follower.poll()
    try:
        age = time.time() - (lease_dir / READINGS_NAME).lstat().st_mtime
    except OSError:
        return False
    return body is not None and "bye" not in body and age <= STALE_AFTER_S


class _FileFollower:
    """The probe's file, read again only when it changed (by its inode, size and mtime)."""

    def __init__(self, lease_dir: Path) -> None:
        self.lease_dir = lease_dir
        self._key: tuple[int, int, int] | None = None
        self._changed_at = time.monotonic()
        self.stale_said = False

    def idle(self) -> float:
        return time.monotonic() - self._changed_at

    def poll(self) -> Mapping[str, Any] | None:
        """The file's object when it changed since the last look (None: unchanged, missing or unreadable)."""
        try:
            st = (self.lease_dir / READINGS_NAME).lstat()
        except OSError:
            return None
        key = (st.st_ino, st.st_size, st.st_mtime_ns)
        if key == self._key:
            return None
        self._key = key
        try:
            raw, _ = read_private_tail(self.lease_dir, READINGS_NAME, FILE_LIMIT)
            body = json.loads(raw)
        except (OSError, UnsafePath, ValueError, RecursionError):
            return None
        if not isinstance(body, dict) or body.get("k") != "readings":
            return None
        self._changed_at = time.monotonic()
        return body
