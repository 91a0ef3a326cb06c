"""Capture the simulated trainer's job log for each `--sim-fail` kind on a real loopback Ray cluster.

Why: tests/data/sim_fail/<kind>.log are outputs of the simulator, never written by hand; this is how they
are made again after the simulator changes. Run inside a loopback-only namespace, from the repo root:

    unshare -n -- bash -c 'ip link set lo up && PYTHONPATH=$PWD .venv/bin/python \
        tests/support/capture_sim_fail.py tests/data/sim_fail [KIND ...]'
"""

from __future__ import annotations

import asyncio
import shlex
import sys
import uuid
from collections.abc import Sequence
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from raycluster import LocalRayCluster
from runhelp import job_reaches

from backend.cluster.dashboard import RayClient
from backend.demo.simtrainer import SIM_TRAIN_SCRIPT
from backend.demo.simtrainer.args import FAIL_KINDS

KINDS = tuple(k for k in FAIL_KINDS if k != "error")


def sim_fail_payload(kind: str | None, *extra: str, nodes: int = 2, rollouts: int = 3) -> dict[str, object]:
    """A small simulated run (2 steps per rollout) that dies of `kind` in its second rollout (`kind` None:
    one that dies only of what the test does to it)."""
    argv = [
        "python3",
        SIM_TRAIN_SCRIPT,
        "--actor-num-nodes",
        str(nodes),
        "--actor-num-gpus-per-node",
        "8",
        "--num-rollout",
        str(rollouts),
        "--rollout-batch-size",
        "32",
        "--n-samples-per-prompt",
        "8",
        "--global-batch-size",
        "128",
        "--sim-step-seconds",
        "0.5",
        *(("--sim-fail", kind, "--sim-fail-at-rollout", "1") if kind else ()),
        *extra,
    ]
    sid = f"ultra-console-simfail-{kind or 'none'}-{uuid.uuid4().hex[:6]}"
    return {"entrypoint": shlex.join(argv), "submission_id": sid, "metadata": {"ultra_console": "1"}}


async def capture(address: str, kind: str) -> tuple[str, list[str]]:
    """Run one kind to its end; its final status and the whole job log."""
    payload = sim_fail_payload(kind)
    async with RayClient(address, timeout=30.0) as client:
        sid = await client.submit(payload)
        job = await job_reaches(client, sid, timeout=180)
        return job.status, [line async for line in client.read_log(sid)]


def main(argv: Sequence[str]) -> int:
    out = Path(argv[0])
    kinds = list(argv[1:]) or list(KINDS)
    out.mkdir(parents=True, exist_ok=True)
    with LocalRayCluster.start(workers=1) as rc:
        for kind in kinds:
            status, lines = asyncio.run(capture(rc.address, kind))
            (out / f"{kind}.log").write_text("".join(f"{x}\n" for x in lines), encoding="utf-8")
            print(f"{kind}: {status}, {len(lines)} lines -> {out / (kind + '.log')}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
