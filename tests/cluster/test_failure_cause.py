"""A run that dies of CUDA OOM on a real Ray cluster: `ultra-console status` names the cause and the line."""

from __future__ import annotations

import json
import shlex
import sys
from pathlib import Path

import pytest
from miles_log_shapes import OOM_TRACEBACK
from runhelp import cli
from waiting import until

from backend.cluster.dashboard import RayClient

pytestmark = [pytest.mark.ray, pytest.mark.timeout(240), pytest.mark.asyncio(loop_scope="session")]


async def test_status_of_a_job_that_died_of_cuda_oom(
    ray_cluster, ray_client: RayClient, tmp_path: Path
) -> None:
    # the traceback as miles' driver log holds it (actor lines forwarded by Ray), then the driver exits 1
    script = tmp_path / "oom.py"
    script.write_text(
        "import sys\n" + "".join(f"print({line!r})\n" for line in OOM_TRACEBACK) + "sys.exit(1)\n"
    )
    sid = await ray_client.submit({"entrypoint": f"{shlex.quote(sys.executable)} {shlex.quote(str(script))}"})

    async def failed() -> bool:
        return (await ray_client.get_job(sid)).status == "FAILED"

    await until(None, failed, "the job to fail", timeout=90)
    state = tmp_path / "state"
    info = json.loads(cli(ray_cluster.address, state, "--job", sid, "status", "--json").stdout)
    assert info["status"] == "FAILED" and info["cause"]["id"] == "cuda-oom"
    assert info["cause"]["message"] == (
        "CUDA out of memory on GPU 3 in MegatronTrainRayActor pid=4101 on 10.0.0.3: "
        "asked for 2.10 GiB, 1.02 GiB free of 139.80 GiB"
    )
    assert info["cause"]["line"].startswith("torch.OutOfMemoryError: CUDA out of memory.")
    text = cli(ray_cluster.address, state, "--job", sid, "status").stdout
    assert f"cause    {info['cause']['message']}" in text and "GPU 3" in text
