"""Adding a run to compare with: "compare with…" in the Run view (its prompt, then this worker) and
`replay A B`.

The run (a saved log, a dump directory or a finished job) is read to its end in a throw-away replay session
(backend.signals.replay, the same path `replay` reads), turned into a backend.signals.compare.RunSide, and
posted as BaselineAdded with what is known of the view's own run's launch (its entrypoint, else our audit log,
else its log's argument dump). Bad input is one notice; nothing else changes.
"""

from __future__ import annotations

import asyncio
import shutil
import tempfile

from backend.cluster.dashboard import RayClient
from backend.cluster.job_replay import read_job_log
from backend.errors import ConsoleError
from backend.severity import Severity
from backend.signals.compare import RunSide
from backend.signals.launch_flags import LaunchFlags, flags_from_command
from backend.signals.replay import ReplaySession, source_of
from console.host import ConsoleHost
from console.messages import BaselineAdded, Notice


def first_run_facts(app: ConsoleHost) -> tuple[LaunchFlags | None, str | None]:
    """The flags the view's own run was launched with, and its final state where a replay knows it."""
    if app.replay is not None:
        return app.replay.launch_flags(), app.replay.state()
    job = app.controller.job if app.controller is not None else None
    if job is None:
        return None, None
    flags = flags_from_command(job.entrypoint) if job.entrypoint else None
    if flags is None:
        from backend.cluster.audit import AuditLog, last_launch_command

        try:  # the launch's command as our audit log kept it (already scrubbed)
            command = last_launch_command(AuditLog(app.settings.state_dir).entries(), job.id)
        except ConsoleError:
            command = ""
        flags = flags_from_command(command, "audit") if command else None
    return flags, None


async def read_run(app: ConsoleHost, target: str) -> RunSide:
    """`target` (a path or a job id) read to its end, as one side of a comparison."""
    source = source_of(target)
    spool = tempfile.mkdtemp(prefix="uc-compare-")
    try:
        session = ReplaySession(source, spool)
        try:
            if source.kind == "job":
                settings = app.settings
                token = settings.token_text()
                async with RayClient(settings.address, token) as client:
                    await read_job_log(session, client, await client.get_job(source.job_id or ""))
                await asyncio.to_thread(session.finish)
            else:
                await asyncio.to_thread(session.read_all)
            return session.side()
        finally:
            session.close()
    finally:
        shutil.rmtree(spool, ignore_errors=True)


async def add_run(app: ConsoleHost, target: str) -> None:
    """Read `target` and overlay it on the Run view; a bad target is one notice."""
    try:
        side = await read_run(app, target)
    except ConsoleError as err:
        app.post_message(Notice(f"compare with {target}: {err}", Severity.ERROR))
        return
    flags, state = first_run_facts(app)
    app.post_message(BaselineAdded(side, flags, state))
    app.post_message(Notice(f"comparing with {side.label} ({side.state})"))
