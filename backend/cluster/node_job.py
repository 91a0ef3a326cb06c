"""Run a small self-contained script as a Ray job pinned to one node, and read its marked result lines.

Why a job: only a process on the node can look at the node's own disks and processes, and Ray's job API is
the one door into every node the console has. The script travels as `python3 -c <source>` (worker nodes
need no copy of the console; a line `from backend.X import ...  # inlined on the node` is replaced by that
stdlib-only module's source, so a rule such as backend.safe_paths has one copy), pinned by Ray's
`ray.io/node-id` label, with a hundredth of a CPU so it runs beside a busy node. Its results are lines `MARK
{json}` in the job log, read while it runs (progress) and once it ended; the job
record is deleted afterwards. Secrets go in `env` (the runtime env), never in argv.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import re
import shlex
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from backend.cluster.dashboard import RayClient
from backend.cluster.job_identity import CLEANUP_KEY
from backend.errors import ConsoleError
from backend.json_fields import Fields

POLL_S = 0.5
REPO_ROOT = Path(__file__).resolve().parents[2]
_INLINED = re.compile(r"^from (backend(?:\.\w+)+) import [\w, ]+  # inlined on the node$", re.MULTILINE)
_FUTURE = re.compile(r"^from __future__ import annotations$", re.MULTILINE)


def script_source(script: Path) -> str:
    """`script` as it travels to the node: each `# inlined
    on the node` import replaced by its module's code, the inlined modules' own such imports too (each
    module once, where it is first imported)."""
    seen: set[str] = set()

    def module_code(match: re.Match[str]) -> str:
        name = match.group(1)
        if name in seen:
            return ""
        seen.add(name)
        path = REPO_ROOT.joinpath(*name.split(".")).with_suffix(".py")
        return _INLINED.sub(module_code, _FUTURE.sub("", path.read_text(encoding="utf-8")))

    return _INLINED.sub(module_code, script.read_text(encoding="utf-8"))


@dataclass(frozen=True)
class NodeJobResult:
    """What one pinned job said: its marked JSON lines, how it ended."""

    node_id: str
    submission_id: str
    status: str
    events: tuple[Fields, ...]
    message: str = ""


def _marked(lines: list[str], mark: str) -> list[Fields]:
    out = []
    for line in lines:
        pos = line.find(mark)
        if pos < 0:
            continue
        try:
            item = json.loads(line[pos + len(mark) :])
        except (ValueError, RecursionError):
            continue
        if isinstance(item, dict):
            out.append(Fields(item))
    return out


async def run_node_job(
    client: RayClient,
    node_id: str,
    script: Path,
    args: list[str],
    *,
    mark: str,
    purpose: str,
    timeout_s: float,
    env: dict[str, str] | None = None,
    on_event: Callable[[Fields], None] | None = None,
) -> NodeJobResult:
    """Submit `script` with `args` pinned to `node_id`, wait for it, return its `mark`ed events.

    `on_event` sees each event as soon as the log shows it (the log is re-read every POLL_S while the job
    runs: these jobs print little). Raises ConsoleError when the job cannot be submitted or does not end in
    `timeout_s` (it is stopped then)."""
    source = script_source(script)
    sid = f"ultra-console-{purpose}-{node_id[:8]}-{int(time.time() * 1000)}"
    payload: dict[str, object] = {
        "entrypoint": shlex.join(["python3", "-c", source, *args]),
        "submission_id": sid,
        "metadata": {CLEANUP_KEY: purpose, "node_id": node_id},
        "entrypoint_label_selector": {"ray.io/node-id": node_id},
        "entrypoint_num_cpus": 0.01,
    }
    if env:
        payload["runtime_env"] = {"env_vars": dict(env)}
    await client.submit(payload)
    seen = 0
    deadline = time.monotonic() + timeout_s

    async def read_new() -> list[Fields]:
        nonlocal seen
        lines = [line async for line in client.read_log(sid)]
        events = _marked(lines, mark)
        fresh, seen = events[seen:], max(seen, len(events))
        if on_event is not None:
            for item in fresh:
                on_event(item)
        return events

    events: list[Fields] = []
    while True:
        job = await client.get_job(sid)
        if job.is_terminal:
            break
        if time.monotonic() > deadline:
            with contextlib.suppress(ConsoleError):
                await client.stop_job(sid)
            raise ConsoleError(
                f"no answer in {timeout_s:.0f} s (its {purpose} job was still {job.status}; stopped)"
            )
        if on_event is not None and job.status == "RUNNING":
            with contextlib.suppress(ConsoleError):
                await read_new()
        await asyncio.sleep(POLL_S)
    events = await read_new()
    with contextlib.suppress(ConsoleError):
        await client.delete_job(sid)
    message = (job.message or "").strip().splitlines()
    return NodeJobResult(node_id, sid, job.status, tuple(events), message[-1] if message else "")
