"""Adding a run to compare with: "compare with…" in the Run view (a prompt, then this worker) and `replay A B`.

The run (a saved log, a dump directory or a finished job) is read to its end in a throw-away replay session
(backend.signals.replay, the same path `replay` reads), turned into a backend.signals.compare.RunSide, and
posted as BaselineAdded with what is known of the view's own run's launch (its entrypoint, else our audit log,
else its log's argument dump). Bad input is one notice; nothing else changes.
"""

from __future__ import annotations

import asyncio
import shutil
import tempfile
from typing import TYPE_CHECKING

from backend.errors import ConsoleError
from console.messages import BaselineAdded, Notice

if TYPE_CHECKING:
    from backend.signals.compare import RunSide
    from backend.signals.launch_flags import LaunchFlags
    from console.app import UltraConsoleApp


def first_run_facts(app: UltraConsoleApp) -> tuple[LaunchFlags | None, str | None]:
    """The flags the view's own run was launched with, and its final state where a replay knows it."""
    from backend.signals.launch_flags import flags_from_audit, flags_from_command

    if app.replay is not None:
        return app.replay.launch_flags(), app.replay.state()
    job = app.controller.job if app.controller is not None else None
    if job is None:
        return None, None
    flags = flags_from_command(job.entrypoint) if job.entrypoint else None
    if flags is None:
        from backend.cluster.audit import AuditLog

        try:
            flags = flags_from_audit(AuditLog(app.settings.state_dir).entries(), job.id)
        except ConsoleError:
            flags = None
    return flags, None


async def read_run(app: UltraConsoleApp, target: str) -> RunSide:
    """`target` (a path or a job id) read to its end, as one side of a comparison."""
    from backend.signals.replay import ReplaySession, source_of

    source = source_of(target)
    spool = tempfile.mkdtemp(prefix="uc-compare-")
    try:
        session = ReplaySession(source, spool)
        try:
            if source.kind == "job":
                from backend.cluster.dashboard import RayClient
                from backend.cluster.job_replay import read_job_log

                settings = app.settings
                token = settings.token.get_secret_value() if settings.token else None
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


async def add_run(app: UltraConsoleApp, target: str) -> None:
    """Read `target` and overlay it on the Run view; a bad target is one notice."""
    try:
        side = await read_run(app, target)
    except ConsoleError as err:
        app.post_message(Notice(f"compare with {target}: {err}", "error"))
        return
    flags, state = first_run_facts(app)
    app.post_message(BaselineAdded(side, flags, state))
    app.post_message(Notice(f"comparing with {side.label} ({side.state})"))


def ask_and_add(app: UltraConsoleApp) -> None:
    """ "Compare with…": ask for a path or a job id, then read it in a worker."""
    from console.widgets.compare_prompt import ComparePrompt

    def chosen(target: str | None) -> None:
        if target:
            app.run_worker(
                add_run(app, target),
                group="compare",
                exit_on_error=False,
                description=f"compare with {target}",
            )

    app.push_screen(ComparePrompt(), chosen)
