"""The shim reaches every train actor of a console-launched run, on every node, through Ray's runtime
env (py_modules package uploaded by the console + worker_process_setup_hook) -- on the real loopback
Ray cluster with the simulated trainer. The workers have no megatron.bridge, so each logs the
"mapping only" form with the fields computed from the checkpoint's config.json."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
from runhelp import launch_when_free, sim_spec, stop_quietly
from waiting import until

import shim
from backend.cluster.controller import RunController
from backend.cluster.dashboard import RayClient
from backend.json_fields import Fields
from backend.plan.submission import build_submission
from shim import logline

pytestmark = [pytest.mark.ray, pytest.mark.timeout(240), pytest.mark.asyncio(loop_scope="session")]

# Ray's prefix of a worker's line, e.g. "\x1b[36m(pid=7396)\x1b[0m": printed by the setup hook before the
# worker becomes an actor, so it carries the pid but not yet the actor's class name.
RAY_PREFIX_PID = re.compile(r"^(?:\x1b\[[0-9;]*m)?\((?:[A-Za-z_]\w* )?pid=(\d+)")
NODES = 3  # the shared cluster: head + 2 workers, 8 fake GPUs each -> one train actor per node


def write_config(model_dir: Path, scaling: float) -> None:
    model_dir.mkdir(parents=True, exist_ok=True)
    (model_dir / "config.json").write_text(
        json.dumps(
            {
                "architectures": ["NemotronHForCausalLM"],
                "model_type": "nemotron_h",
                "hybrid_override_pattern": "ME*E",
                "n_routed_experts": 512,
                "num_experts_per_tok": 22,
                "moe_intermediate_size": 5120,
                "moe_shared_expert_intermediate_size": 10240,
                "moe_latent_size": 2048,
                "routed_scaling_factor": scaling,
                "n_group": 1,
                "topk_group": 1,
                "num_nextn_predict_layers": 1,
                "mtp_hybrid_override_pattern": "*E",
            }
        )
    )


async def train_actors(client: RayClient, job_id: str, want: int, timeout: float = 120) -> list[Fields]:
    """The job's alive MegatronTrainRayActor rows from Ray's state API (pid, node_id)."""
    alive: list[Fields] = []

    async def enough() -> list[Fields]:
        job = await client.get_job(job_id)
        assert not job.is_terminal, f"job ended {job.status}: {job.message}"
        alive.clear()
        if job.job_id:
            data = await client.get_json("/api/v0/actors", {"detail": 1, "limit": 1000})
            rows = Fields.of(data).obj("data").obj("result").objs("result")
            alive.extend(
                a
                for a in rows
                if a.text("class_name").startswith("MegatronTrainRayActor")
                and a.value("job_id") == job.job_id
                and a.value("state") == "ALIVE"
                and a.has("pid")
            )
        return list(alive) if len(alive) >= want else []

    return await until(
        None, enough, lambda: f"{want} train actors alive ({len(alive)} are)", timeout, interval=0.5
    )


async def shim_lines_by_pid(
    client: RayClient, job_id: str, pids: set[int], timeout: float = 90
) -> dict[int, list]:
    """Shim lines of the job log, keyed by the worker pid in Ray's line prefix."""
    found: dict[int, list] = {}

    async def from_every_pid() -> dict[int, list]:
        found.clear()
        async for line in client.read_log(job_id):
            parsed = logline.parse(line)
            pid = RAY_PREFIX_PID.search(line)
            if parsed is not None and pid is not None:
                found.setdefault(int(pid.group(1)), []).append(parsed)
        return dict(found) if pids <= set(found) else {}

    return await until(
        None,
        from_every_pid,
        lambda: f"shim lines from pids {sorted(pids)} (only from {sorted(found)})",
        timeout,
        interval=1.0,
    )


async def test_every_train_actor_on_every_node_logs_the_shim_line(
    ray_client: RayClient, ray_cluster, tmp_path
):
    spec = sim_spec(tmp_path, nodes=NODES, more=["batch.global_batch_size=48"])
    write_config(tmp_path / "models" / spec.model.name, scaling=5.0)
    env = build_submission(spec, nvlink=False).runtime_env
    assert env["worker_process_setup_hook"] == shim.SETUP_HOOK and env["py_modules"] == [shim.package()[0]]
    assert env["env_vars"]["ULTRA_CONSOLE_SHIM_CHECKPOINT"] == f"{tmp_path}/models/{spec.model.name}"

    ctl = RunController(ray_client, state_dir=tmp_path / "state", poll_s=0.5)
    job = await launch_when_free(ctl, spec)
    try:
        actors = await train_actors(ray_client, job.id, NODES)
        assert len({a.text("node_id") for a in actors}) == NODES  # one per node: every node is covered
        pids = {a.integer("pid") for a in actors}
        lines = await shim_lines_by_pid(ray_client, job.id, pids)
        for pid in pids:
            assert len(lines[pid]) == 1, f"pid {pid} logged {len(lines[pid])} shim lines"
            (line,) = lines[pid]
            assert line.status == "mapping_only"
            assert line.fields["moe_router_topk_scaling_factor"] == 5.0
            assert (
                line.fields["moe_latent_size"] == 2048 and line.fields["moe_shared_expert_overlap"] is False
            )
            assert line.fields["mtp_num_layers"] is None
    finally:
        await stop_quietly(ray_client, job.id)
