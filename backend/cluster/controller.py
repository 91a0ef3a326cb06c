"""The run controller: launch, attach, watch, abort, force-stop and clean up one training run.

The run lives in Ray, not here: the controller owns no process of the job, so killing the console
never touches the run, and a new controller rebuilds everything from Ray (`attach`). It is the
single source of a run's state for the app and the CLI:

    SUBMITTING -> PENDING -> RUNNING -> SUCCEEDED | FAILED | STOPPED
                                \\-> STOPPING (stop requested, Ray still says RUNNING) -> STOPPED

SUBMITTING and STOPPING are local: Ray has no such states. A stop asked by an earlier console
survives in the audit log, so an attaching console shows STOPPING too.

A launch re-runs the rule engine on the spec itself, whatever findings the caller brings: no spec with an
error finding is ever submitted. Abort follows backend.cluster.abort_policy (Ray's stop with the job's own
signal and grace, then SIGKILL, then STOPPED). Ray's stop does not cancel a PENDING job: the controller
says so and keeps watching. Force-stop is a second, separate step: Ray offers nothing stronger than stop,
so force SIGKILLs the driver's process tree now (through a kill job pinned to the driver's node, which
first checks that the PID is that job's driver) instead of waiting out the grace period.

Leftovers are read on the nodes after the run ended and killed only when provably the job's
(backend.cluster.leftovers), never by name and never `ray stop`. Every launch, abort, force-stop and
cleanup is appended to the audit log.

Consumers: register callbacks with `subscribe(cb)` or iterate `events()` (one queue per
consumer); `watch()` drives the polling (from a Textual worker or a CLI loop).
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping
from dataclasses import dataclass, field
from enum import Enum
from pathlib import Path
from typing import Literal

import shim
from backend.cluster.abort_policy import (
    LEFTOVER_CHECK_S,
    LEFTOVER_KILL_GRACE_S,
    LEFTOVER_KILL_S,
    abort_policy,
)
from backend.cluster.audit import AuditLog, current_user
from backend.cluster.dashboard import DashboardUnreachable, JobInfo, RayApiError, RayClient
from backend.cluster.job_identity import active_runs, is_console_tool, latest_run
from backend.cluster.launch_claim import claimed
from backend.cluster.leftovers import (
    JobFootprint,
    Leftover,
    LeftoverReport,
    ReapResult,
    footprint_from_audit,
    kill_leftovers,
    read_leftovers,
    record_footprint,
    run_reaper,
)
from backend.cluster.preflight import preflight
from backend.cluster.telemetry import snapshot
from backend.cluster.watcher import WatcherOptions, WatcherStart, ensure_watcher
from backend.errors import ConsoleError, RefusedError
from backend.json_fields import Fields, as_int
from backend.notify_settings import NotifySettings
from backend.plan import checks
from backend.plan.finding import Finding, has_errors
from backend.plan.spec import RunSpec
from backend.plan.submission import LINK_KEYS, Submission, build_submission
from backend.sanitize import shown_name

SUBMITTING = (
    "submitting (written before the submit: no later entry means the console died before Ray answered)"
)
DEFAULT_POLL_S = 3.0  # job status; with telemetry and the log tail the console stays under 1 request/s
PENDING_STOP_NOTE = (
    "the job is still PENDING: Ray's stop does not cancel a pending job (it stays queued until "
    "resources free up, then starts and is stopped at once); still watching it"
)


FORCE_PENDING_NOTE = (
    "Ray offers no way to remove a PENDING job (stop only queues, delete refuses non-terminal "
    "jobs): force cannot do more; free resources so it starts and the queued stop applies"
)
FORCE_NO_PID_NOTE = (
    "Ray reports no driver PID for this job (its entrypoint never called ray.init): force can "
    "only repeat the stop; Ray SIGKILLs the entrypoint when the grace period ends"
)


class RunPhase(str, Enum):
    SUBMITTING = "SUBMITTING"
    PENDING = "PENDING"
    RUNNING = "RUNNING"
    STOPPING = "STOPPING"
    SUCCEEDED = "SUCCEEDED"
    FAILED = "FAILED"
    STOPPED = "STOPPED"

    @property
    def terminal(self) -> bool:
        return self in (RunPhase.SUCCEEDED, RunPhase.FAILED, RunPhase.STOPPED)


EventKind = Literal["state", "notice", "error", "recovered"]


@dataclass(frozen=True)
class RunEvent:
    """What the controller tells its consumers. `state` events carry the job as Ray reported it."""

    kind: EventKind
    state: RunPhase | None = None
    job: JobInfo | None = None
    text: str = ""
    time: float = field(default_factory=time.time)


class LaunchRefused(RefusedError):
    """A launch refused on purpose; `findings` says why (rule engine and preflight findings)."""

    exit_code = 2  # like `plan`: error findings

    def __init__(self, message: str, findings: list[Finding] | None = None) -> None:
        super().__init__(message)
        self.findings = list(findings or [])


class NoRunFound(ConsoleError):
    """No job of ours or of miles' exists on the cluster (nothing to attach to)."""


@dataclass(frozen=True)
class AbortOutcome:
    job: JobInfo
    stop_sent: bool
    message: str


class RunController:
    """One run on one cluster. Create with a connected `RayClient`; call `attach()` or `launch()`."""

    def __init__(
        self,
        client: RayClient,
        *,
        state_dir: Path | str,
        readonly: bool = False,
        poll_s: float = DEFAULT_POLL_S,
        watcher: WatcherOptions | None = None,
    ) -> None:
        """`watcher`: where a run's watcher reports (None: this console starts none)."""
        self.client = client
        self.watcher = watcher
        self.audit = AuditLog(state_dir)
        self.readonly = readonly
        self.poll_s = poll_s
        self.job: JobInfo | None = None
        self.state: RunPhase | None = None
        self._stop_requested = False
        self._callbacks: list[Callable[[RunEvent], Awaitable[None] | None]] = []
        self._queues: list[asyncio.Queue[RunEvent]] = []
        self._unreachable: str | None = None  # the fault's text while the dashboard is lost
        self.footprint: JobFootprint | None = None

    # ---------------------------------------------------------------- events
    def subscribe(self, callback: Callable[[RunEvent], Awaitable[None] | None]) -> Callable[[], None]:
        """Call `callback(event)` for every event; returns an unsubscribe function."""
        self._callbacks.append(callback)
        return lambda: self._callbacks.remove(callback) if callback in self._callbacks else None

    async def events(self) -> AsyncIterator[RunEvent]:
        """Every event from now on, for one consumer (ends when the consumer stops iterating)."""
        queue: asyncio.Queue[RunEvent] = asyncio.Queue()
        self._queues.append(queue)
        try:
            while True:
                yield await queue.get()
        finally:
            self._queues.remove(queue)

    async def _emit(self, event: RunEvent) -> None:
        for queue in list(self._queues):
            queue.put_nowait(event)
        for cb in list(self._callbacks):
            result = cb(event)
            if asyncio.iscoroutine(result):
                await result

    async def _notice(self, text: str) -> None:
        await self._emit(RunEvent("notice", self.state, self.job, text))

    async def _set(self, job: JobInfo, state: RunPhase | None = None) -> None:
        new = state or self._derive(job)
        changed = new != self.state or self.job is None or job.status != self.job.status
        self.job, self.state = job, new
        if changed:
            await self._emit(RunEvent("state", new, job, job.message or ""))

    def _derive(self, job: JobInfo) -> RunPhase:
        status = RunPhase(job.status) if job.status in RunPhase.__members__ else RunPhase.PENDING
        if status is RunPhase.RUNNING and self._stop_requested:
            return RunPhase.STOPPING
        return status

    def _require_writable(self, action: str) -> None:
        if self.readonly:
            raise RefusedError(f"{action} refused: the console is read-only (--readonly)")

    # ---------------------------------------------------------------- attach / refresh
    async def attach(self, job_id: str | None = None) -> JobInfo:
        """Attach to `job_id`, or to the latest run (ours or miles') when None."""
        found = await self.client.get_job(job_id) if job_id else latest_run(await self.client.list_jobs())
        if found is None:
            raise NoRunFound(f"no training run found on the Ray cluster at {self.client.address}")
        job = found
        self._stop_requested = self._audited_stop(job)
        await self._set(job)
        return job

    def _audited_stop(self, job: JobInfo) -> bool:
        """A stop requested by an earlier console (still RUNNING) keeps showing as STOPPING."""
        if job.is_terminal:
            return False
        with contextlib.suppress(ConsoleError):
            return any(
                e.action in ("abort", "force-stop") and e.job == job.id for e in self.audit.entries(limit=200)
            )
        return False

    async def refresh(self) -> JobInfo:
        if self.job is None:
            raise NoRunFound("no run attached")
        job = await self.client.get_job(self.job.id)
        await self._set(job)
        return job

    async def watch(self, *, until_terminal: bool = True) -> RunPhase | None:
        """Poll the job every `poll_s` and emit state changes; a lost dashboard is reported once per
        distinct fault and retried until it answers again (then `recovered`). Returns the final state."""
        while True:
            try:
                await self.refresh()
                if self._unreachable is not None:
                    self._unreachable = None
                    await self._emit(
                        RunEvent("recovered", self.state, self.job, "Ray dashboard answers again")
                    )
            except DashboardUnreachable as err:
                if str(err) != self._unreachable:  # lost, or lost otherwise: said again in the new words
                    self._unreachable = str(err)
                    await self._emit(RunEvent("error", self.state, self.job, str(err)))
            if until_terminal and self.state is not None and self.state.terminal:
                return self.state
            await asyncio.sleep(self.poll_s)

    async def wait_terminal(self, timeout_s: float | None = None) -> JobInfo:
        """Watch until the job is terminal; raises TimeoutError after `timeout_s`."""
        await asyncio.wait_for(self.watch(), timeout_s)
        assert self.job is not None
        return self.job

    # ---------------------------------------------------------------- launch
    async def check(
        self, spec: RunSpec, *, force: bool = False, check_cluster: bool = True, record: bool = False
    ) -> list[Finding]:
        """Findings for launching `spec` now (rules, then preflight against the cluster). Raises
        LaunchRefused on an error finding; with `force`, another active run (P3) is allowed.
        `record`: this is a launch attempt, so a refusal goes to the audit log too."""
        try:
            findings = self._rules(spec)
            return findings + await self._cluster_check(
                spec, findings, force=force, check_cluster=check_cluster
            )
        except LaunchRefused as err:
            if record:
                self._record_refusal(spec, err, force)
            raise

    def _record_refusal(self, spec: RunSpec, err: LaunchRefused, force: bool) -> None:
        self.audit.record(
            "launch",
            job=None,
            command=f"launch preset {spec.preset}",
            result=str(err),
            details={
                "findings": [f.to_json() for f in err.findings if f.severity == "error"],
                "forced": force,
            },
        )

    @staticmethod
    def _rules(spec: RunSpec) -> list[Finding]:
        """The rule engine on `spec`; raises LaunchRefused on an error finding."""
        findings = list(checks.check(spec))
        if checks.has_errors(findings):
            raise LaunchRefused(f"launch refused: {_first_error(findings)}", findings)
        return findings

    async def _cluster_check(
        self, spec: RunSpec, findings: list[Finding], *, force: bool, check_cluster: bool
    ) -> list[Finding]:
        if check_cluster:
            cluster = await preflight(spec, self.client)
            if force:
                cluster = [f for f in cluster if f.rule != "P3"]
            if has_errors(cluster):
                raise LaunchRefused(f"launch refused: {_first_error(cluster)}", findings + cluster)
            return cluster
        if not force:
            active = active_runs(await self.client.list_jobs())
            if active:
                raise LaunchRefused(
                    f"launch refused: run {shown_name(active[0].id)} is still {active[0].status} "
                    "(abort it first or use --force)"
                )
        return []

    async def launch(
        self,
        spec: RunSpec,
        *,
        force: bool = False,
        secrets: dict[str, str] | None = None,
        run_id: str | None = None,
        check_cluster: bool = True,
        notify: NotifySettings | None = None,
        links: dict[str, str] | None = None,
    ) -> JobInfo:
        """Submit `spec` as a new run, as one step: holding the cluster-wide launch claim
        (backend.cluster.launch_claim), the rules run on `spec` and the cluster is read again (the active-run
        check and preflight's verdict, whatever an earlier `check()` said: a confirmation prompt may have
        waited minutes), then the job is submitted. Refuses error findings and a second active run unless
        `force`. The audit entry is written before the submit and completed after it, so a console killed
        in between leaves a trace. `notify`: this launch's notification settings (None: the console's). The
        run's watcher starts with it (a notice says so, or why not; a watcher that cannot start never fails
        the launch). `links`: a resumed attempt's metadata (its chain), also in its audit entry. Returns the
        job as Ray reports it right after submission."""
        self._require_writable("launch")
        try:
            rules = self._rules(spec)
        except LaunchRefused as err:
            self._record_refusal(spec, err, force)
            raise
        sub = build_submission(spec, run_id=run_id, secrets=secrets, links=links)
        async with claimed(self.client, str(sub.metadata.get("run_id") or sub.submission_id), current_user()):
            findings = rules + await self._checked_cluster(spec, rules, force, check_cluster)
            sid = await self._submit(sub, secrets, force, findings)
        job = await self.client.get_job(sid)
        await self._set(job)
        await self.start_watcher(job, notify)
        return job

    async def _checked_cluster(
        self, spec: RunSpec, rules: list[Finding], force: bool, check_cluster: bool
    ) -> list[Finding]:
        try:
            return await self._cluster_check(spec, rules, force=force, check_cluster=check_cluster)
        except LaunchRefused as err:
            self._record_refusal(spec, err, force)
            raise

    async def _submit(
        self, sub: Submission, secrets: dict[str, str] | None, force: bool, findings: list[Finding]
    ) -> str:
        """Audit (intent), submit, audit (outcome): the first entry is written before anything reaches Ray,
        and a launch whose intent cannot be written is refused."""
        details = {
            "run_id": sub.metadata.get("run_id"),
            **{k: v for k, v in sub.metadata.items() if k in LINK_KEYS},
            "forced": force,
            "warnings": [f.message for f in findings if f.severity == "warning"],
        }
        command = sub.shell()
        self.audit.record(
            "launch",
            job=sub.submission_id,
            command=command,
            result=SUBMITTING,
            secrets=secrets,
            details=details,
        )
        self.job, self.state, self._stop_requested = None, RunPhase.SUBMITTING, False
        await self._emit(RunEvent("state", RunPhase.SUBMITTING, None, f"submitting {sub.submission_id}"))
        try:
            await self._upload_packages(sub.runtime_env)
            sid = await self.client.submit(sub.to_ray_payload())
        except ConsoleError as err:
            self.audit.record(
                "launch",
                job=sub.submission_id,
                command=command,
                result=f"refused by Ray: {err}",
                secrets=secrets,
            )
            self.state = None
            raise
        self.audit.record(
            "launch", job=sid, command=command, result="submitted", secrets=secrets, details=details
        )
        return sid

    async def start_watcher(self, job: JobInfo, notify: NotifySettings | None = None) -> WatcherStart | None:
        """The run's watcher, found or started (None: this console starts none: read-only, or no options);
        a notice says what happened, unless it found the one that runs or the run ended (nothing to say)."""
        if self.readonly or self.watcher is None:
            return None
        options = self.watcher if notify is None else dataclasses.replace(self.watcher, notify=notify)
        try:
            started = await ensure_watcher(self.client, job, options)
        except ConsoleError as err:
            await self._notice(f"no watcher for run {shown_name(job.id)}: {err}")
            return None
        if started.started or not (started.job or job.is_terminal):
            await self._notice(started.text)
        return started

    async def _upload_packages(self, runtime_env: Mapping[str, object]) -> None:
        """Upload the shim's `gcs://` py_modules package unless the cluster has it already (Ray's own
        client does this before a submit; over plain HTTP it is ours to do)."""
        uri, data = shim.package()
        if uri not in Fields(runtime_env).items("py_modules"):
            return
        path = shim.upload_path(uri)
        # RayClient has no package route (yet): its generic request keeps auth, retries and typed errors.
        try:
            await self.client._send("GET", path, what=f"package {uri}")
            return
        except RayApiError as err:
            if err.status != 404:
                raise
        await self.client._send("PUT", path, content=data, what=f"the upload of package {uri}")

    # ---------------------------------------------------------------- abort
    async def abort(self) -> AbortOutcome:
        """Ask Ray to stop the run (graceful: the job's stop signal and grace period). Does not
        wait: follow with `wait_terminal()` / `watch()` to confirm STOPPED. Records where the job
        ran (its footprint) first, while its workers are still listed."""
        self._require_writable("abort")
        job = await self.refresh()
        if job.is_terminal:
            return AbortOutcome(
                job, False, f"job {shown_name(job.id)} already ended {job.status}; nothing to stop"
            )
        policy = abort_policy(job)
        self.footprint = await record_footprint(self.client, job)
        sent = await self.client.stop_job(job.id)
        self._stop_requested = True
        message = PENDING_STOP_NOTE if job.status == "PENDING" else policy.stop_message()
        self.audit.record(
            "abort",
            job=job.id,
            command=f"POST /api/jobs/{job.id}/stop",
            result=f"stop requested while {job.status}" if sent else "job was no longer alive",
            details={
                "signal": policy.signal,
                "grace_s": policy.grace_s,
                "footprint": self.footprint.to_json(),
            },
        )
        await self._set(job)
        await self._notice(message)
        return AbortOutcome(job, sent, message)

    async def _kill_tree(self, job: JobInfo, node_id: str, pid: int) -> list[ReapResult]:
        """SIGKILL `pid`'s process tree on its node; a failed kill job is one failed result."""
        try:
            answer = await run_reaper(
                self.client,
                node_id,
                ["--tree", str(pid), "--job", job.id],
                timeout_s=abort_policy(job).force_wait_s,
                purpose="force",
            )
        except ConsoleError as err:
            return [ReapResult(node_id, pid, "failed", reason=str(err))]
        return answer.results(node_id)

    async def force_stop(self) -> str:
        """The second step after abort: SIGKILL the driver's process tree now. Returns what was done."""
        self._require_writable("force-stop")
        job = await self.refresh()
        if job.is_terminal:
            return f"job {shown_name(job.id)} already ended {job.status}; nothing to force"
        if job.status == "PENDING":
            return FORCE_PENDING_NOTE
        await self.client.stop_job(job.id)  # so the supervisor records STOPPED, not FAILED
        self._stop_requested = True
        pid = _driver_pid(job)
        if pid is None or not job.driver_node_id:
            return FORCE_NO_PID_NOTE
        results = await self._kill_tree(job, job.driver_node_id, pid)
        summary = _force_summary(results, pid, job.driver_node_id)
        self.audit.record(
            "force-stop",
            job=job.id,
            command=f"kill job: SIGKILL process tree of pid {pid}",
            result=summary,
            details={"results": [r.__dict__ for r in results]},
        )
        await self._notice(summary)
        return summary

    # ---------------------------------------------------------------- leftovers
    def job_footprint(self) -> JobFootprint | None:
        """Where the attached job ran: recorded by this console's abort, else by an earlier one (audit log),
        else only what Ray still says about the job (its driver's node)."""
        if self.job is None:
            return None
        if self.footprint is not None and self.footprint.submission_id == self.job.id:
            return self.footprint
        with contextlib.suppress(ConsoleError):
            found = footprint_from_audit(self.audit.entries(limit=500), self.job.id)
            if found is not None:
                return found
        return JobFootprint.of(self.job)

    async def leftover_nodes(self) -> list[tuple[str, str]]:
        """(node id, label) of the alive nodes a leftover check of the attached job asks: the nodes it ran on
        when its footprint is complete, else every alive node."""
        return (await self._leftover_scope())[0]

    async def _leftover_scope(self) -> tuple[list[tuple[str, str]], list[str]]:
        snap = await snapshot(self.client)
        alive = [(n.node_id, n.label) for n in snap.alive_nodes]
        fp = self.job_footprint()
        if fp is None or not fp.complete or not fp.node_ids:
            return alive, []
        alive_ids = {n for n, _ in alive}
        return [n for n in alive if n[0] in fp.node_ids], [n for n in fp.node_ids if n not in alive_ids]

    async def leftovers(self) -> LeftoverReport:
        """GPU processes still held, read on each node the job ran on after it ended (refused while it runs:
        its processes hold GPU memory legitimately)."""
        if self.job is not None and not self.job.is_terminal:
            job = await self.refresh()
            if not job.is_terminal:
                raise RefusedError(
                    f"leftovers are read after the job ended: {shown_name(job.id)} is still {job.status}"
                )
        nodes, gone = await self._leftover_scope()
        timeout = abort_policy(self.job).leftover_check_s if self.job is not None else LEFTOVER_CHECK_S
        return await read_leftovers(self.client, self.job_footprint(), nodes, timeout_s=timeout, gone=gone)

    async def cleanup(self, leftovers: list[Leftover] | None = None) -> list[ReapResult]:
        """Kill exactly the job's leftover PIDs, one kill job pinned per node, each re-checking on the node
        that the PID still holds GPU memory and is the job's; refused while a run is active."""
        self._require_writable("cleanup")
        _refuse_cleanup_while_busy(await self.client.list_jobs())
        items = leftovers if leftovers is not None else list((await self.leftovers()).killable)
        grace_s, timeout_s = _leftover_kill_times(self.job)
        results = await kill_leftovers(
            self.client, self.job_footprint(), items, grace_s=grace_s, timeout_s=timeout_s
        )
        killed = sum(1 for r in results if r.action == "killed")
        self.audit.record(
            "cleanup",
            job=self.job.id if self.job else None,
            command=_cleanup_command(items),
            result=f"killed {killed} of {len(items)} process(es)",
            details={"results": [r.__dict__ for r in results]},
        )
        return results


def _refuse_cleanup_while_busy(jobs: list[JobInfo]) -> None:
    """A live job's processes hold GPU memory legitimately: cleanup waits for its abort."""
    busy = [j for j in jobs if not j.is_terminal and not is_console_tool(j) and j.type != "DRIVER"]
    if busy:
        raise RefusedError(
            f"cleanup refused: job {shown_name(busy[0].id)} is still {busy[0].status}; its processes "
            "hold GPU memory legitimately (abort it first)"
        )


def _leftover_kill_times(job: JobInfo | None) -> tuple[float, float]:
    """(grace, timeout) seconds for the leftover kill jobs: the job's abort policy, else the defaults."""
    if job is None:
        return LEFTOVER_KILL_GRACE_S, LEFTOVER_KILL_S
    policy = abort_policy(job)
    return policy.leftover_kill_grace_s, policy.leftover_kill_s


def _cleanup_command(items: list[Leftover]) -> str:
    """The audit log's command: the PIDs killed, per node."""
    nodes = sorted({it.node_id for it in items})
    return "kill jobs pinned per node: " + ", ".join(
        f"{n[:8]}: {' '.join(str(i.pid) for i in items if i.node_id == n)}" for n in nodes
    )


def _force_summary(results: list[ReapResult], pid: int, node_id: str) -> str:
    """What force-stop did, said for the operator and the audit log."""
    killed = [r.pid for r in results if r.action == "killed"]
    if not killed:
        return f"killed nothing: {'; '.join(r.reason for r in results) or 'no result'}"
    return (
        f"SIGKILLed the driver (pid {pid}) and {max(len(killed) - 1, 0)} descendant(s) on node "
        f"{node_id[:8]}; miles' own shutdown does not run; Ray marks the job STOPPED and kills its actors"
    )


def _driver_pid(job: JobInfo) -> int | None:
    info = getattr(job, "driver_info", None) or (job.model_extra or {}).get("driver_info")
    pid = Fields(info).value("pid") if isinstance(info, dict) else getattr(info, "pid", None)
    number = as_int(pid, -1) if pid is not None else -1
    return number if number != -1 else None


def _first_error(findings: list[Finding]) -> str:
    first = next(f for f in findings if f.severity == "error")
    extra = sum(1 for f in findings if f.severity == "error") - 1
    return f"[{first.rule}] {first.message}" + (f" (+{extra} more error finding(s))" if extra else "")
