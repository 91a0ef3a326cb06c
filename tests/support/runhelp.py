"""Helpers for the run-controller tests against the real loopback Ray cluster: a spec that runs the
simulated trainer with paths that exist, the CLI as a subprocess, and a pausable loopback proxy."""

from __future__ import annotations

import asyncio
import contextlib
import os
import re
import subprocess
import sys
from collections.abc import AsyncIterator, Collection
from pathlib import Path
from typing import Any

from waiting import until

from backend.demo.simtrainer import SIM_TRAIN_SCRIPT
from backend.plan.spec import RunSpec, build_spec

REPO = Path(__file__).resolve().parents[2]
PRESET = "nemotron-3-ultra-550b-a55b-4layer"
METRIC_LINE = re.compile(r"\bstep \d+: \{")


def sim_spec(
    tmp: Path,
    *,
    sim: str = "--sim-forever",
    stop_wait_s: int = 10,
    nodes: int = 1,
    more: list[str] | None = None,
) -> RunSpec:
    """The 4-layer preset on the simulated trainer, with a checkpoint dir and dataset that exist."""
    overrides = [
        f"paths.train_script={SIM_TRAIN_SCRIPT}",
        f"paths.model_dir={tmp}/models",
        f"paths.data_dir={tmp}/data",
        f"paths.output_dir={tmp}/out",
        f"run.stop_wait_s={stop_wait_s}",
        f"cluster.nodes={nodes}",
        f'run.extra_args="--sim-step-seconds 0.2 {sim}"',
        *(more or []),
    ]
    spec = build_spec(PRESET, overrides)
    (tmp / "models" / spec.model.name).mkdir(parents=True, exist_ok=True)
    data = tmp / "data" / spec.data.prompt_data
    data.parent.mkdir(parents=True, exist_ok=True)
    data.write_text('{"prompt": "1+1?", "label": "2"}\n')
    return spec


def spec_args(tmp: Path, **kw: Any) -> list[str]:
    """The same spec as `--preset/--set` CLI arguments."""
    spec = sim_spec(tmp, **kw)
    out = ["--preset", PRESET]
    for key in (
        "paths.train_script",
        "paths.model_dir",
        "paths.data_dir",
        "paths.output_dir",
        "run.stop_wait_s",
        "cluster.nodes",
        "run.extra_args",
    ):
        section, name = key.split(".")
        value = getattr(getattr(spec, section), name)
        out += ["--set", f"{key}={value!r}" if isinstance(value, str) and " " in value else f"{key}={value}"]
    return out


def cli_env(state_dir: Path, **extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k not in ("RAY_ADDRESS", "RAY_AUTH_TOKEN")}
    env.update(
        {
            "ULTRA_CONSOLE_STATE_DIR": str(state_dir),
            "ULTRA_CONSOLE_CONFIG": str(state_dir / "none.toml"),
            "PYTHONPATH": str(REPO),
        },
        **extra,
    )
    return env


def cli(
    address: str, state_dir: Path, *args: str, timeout: float = 120, env: dict[str, str] | None = None
) -> subprocess.CompletedProcess[str]:
    """`ultra-console --address ADDRESS ARGS...` as a subprocess (stdin not a TTY)."""
    return subprocess.run(
        [sys.executable, "-m", "console.cli", "--address", address, *args],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=timeout,
        stdin=subprocess.DEVNULL,
        env=env or cli_env(state_dir),
    )


def cli_in_process(
    address: str, state_dir: Path, *args: str, env: dict[str, str] | None = None
) -> subprocess.CompletedProcess[str]:
    """`cli` run inside this process (support/inproc_cli.py): for the cases where what the command says is
    the subject, not the process boundary; the same environment as `cli`'s subprocess."""
    from inproc_cli import run_cli

    return run_cli(["--address", address, *args], env=env or cli_env(state_dir))


def one_line_error(proc: subprocess.CompletedProcess[str]) -> str:
    """Assert a failed CLI call printed exactly one line and no traceback; return it."""
    assert proc.returncode != 0, proc.stdout
    lines = [ln for ln in proc.stderr.splitlines() if ln.strip()]
    assert len(lines) == 1 and "Traceback" not in proc.stderr, proc.stderr
    return lines[0]


async def job_reaches(
    client: Any, job_id: str, wanted: Collection[str] | None = None, timeout: float = 90.0
) -> Any:
    """The job (a JobInfo) once its status is one of `wanted`, or once it has ended when none is given."""
    seen: list[Any] = []

    async def reached() -> Any:
        job = await client.get_job(job_id)
        seen[:] = [job]
        return job if (job.is_terminal if wanted is None else job.status in wanted) else None

    def what() -> str:
        now = f"; it is {seen[0].status}: {seen[0].message}" if seen else ""
        return f"job {job_id} to reach {sorted(wanted) if wanted else 'an end'}{now}"

    return await until(None, reached, what, timeout, interval=0.5)


async def stop_quietly(client: Any, job_id: str) -> None:
    """Test cleanup: stop the job and wait (up to 30 s) for it to end; a failure here hides no test result."""
    with contextlib.suppress(Exception):
        await client.stop_job(job_id)
        await job_reaches(client, job_id, timeout=30)


@contextlib.asynccontextmanager
async def live_app(
    address: str, state_dir: Path, payload: dict[str, Any]
) -> AsyncIterator[tuple[Any, Any, Any]]:
    """Submit `payload` and attach the app to that run while it is live, Run view shown: (client, app, pilot).
    The job is stopped afterwards if it is still going."""
    from app_helpers import MODELS, RUN_ID, PilotApp

    from backend.cluster.dashboard import RayClient
    from backend.settings import Settings

    sid = str(payload["submission_id"])
    app = PilotApp(
        Settings(address=address, state_dir=state_dir),
        job=sid,
        watchdog=False,
        preview_run_id=RUN_ID,
        model_dir=str(MODELS),
    )
    async with RayClient(address, timeout=30.0) as client:
        await client.submit(payload)
        try:
            async with app.run_test(size=(160, 45)) as pilot:
                await pilot.press("2")
                yield client, app, pilot
        finally:
            await stop_quietly(client, sid)


class PausableProxy:
    """A loopback TCP proxy in front of the dashboard whose pause() drops every connection and
    stops listening (the dashboard "goes away"), and resume() listens again on the same port."""

    def __init__(self, target_port: int) -> None:
        self.target_port = target_port
        self.port = 0
        self._server: asyncio.base_events.Server | None = None
        self._writers: set[asyncio.StreamWriter] = set()

    @property
    def address(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    async def start(self) -> PausableProxy:
        self._server = await asyncio.start_server(self._handle, "127.0.0.1", self.port)
        self.port = self._server.sockets[0].getsockname()[1]
        return self

    async def pause(self) -> None:
        assert self._server is not None
        self._server.close()
        for w in list(self._writers):
            w.transport.abort()
        await self._server.wait_closed()
        self._server = None

    async def resume(self) -> None:
        await self.start()

    async def close(self) -> None:
        if self._server is not None:
            await self.pause()

    async def _handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            up_reader, up_writer = await asyncio.open_connection("127.0.0.1", self.target_port)
        except OSError:
            writer.transport.abort()
            return
        self._writers.update((writer, up_writer))

        async def pipe(src: asyncio.StreamReader, dst: asyncio.StreamWriter) -> None:
            with contextlib.suppress(Exception):
                while data := await src.read(65536):
                    dst.write(data)
                    await dst.drain()
            with contextlib.suppress(Exception):
                dst.close()

        try:
            await asyncio.gather(pipe(reader, up_writer), pipe(up_reader, writer))
        finally:
            self._writers.difference_update((writer, up_writer))


async def launch_when_free(ctl: Any, spec: RunSpec, timeout: float = 60.0) -> Any:
    """Launch once preflight passes: the dashboard's GPU readings lag a finished run by 5-7 s, so a
    test that follows another may first see that run's GPUs still in use (P1/P2)."""
    from backend.cluster.controller import LaunchRefused

    async def launched() -> Any:
        try:
            await ctl.check(spec)
            return await ctl.launch(spec)
        except LaunchRefused:
            return None

    return await until(
        None, launched, "preflight to pass (the GPUs of an earlier run freed)", timeout, interval=1.0
    )
