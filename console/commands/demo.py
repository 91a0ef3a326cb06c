"""`ultra-console demo`: the whole product on this machine, no GPU needed.

Starts a local Ray cluster (loopback only, token auth on, several nodes x 8 simulated GPUs),
launches the SIMULATED trainer (backend/demo/simtrainer) through the normal launch path
(RunController.launch with the 4-layer preset and `paths.train_script` pointing at the simulator),
then opens the console attached, labelled DEMO. Quitting tears down only the cluster it started.
`--no-tui` does the same without the app: it prints progress and follows until the run ends or
Ctrl-C.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import secrets
import sys
import time
from pathlib import Path
from typing import TYPE_CHECKING

from backend.demo.simtrainer.args import FAIL_KINDS, LOG_FORMATS
from backend.errors import ConsoleError

if TYPE_CHECKING:
    from backend.plan.spec import RunSpec
    from backend.settings import Settings

DEMO_PRESET = "nemotron-3-ultra-550b-a55b-4layer"
NODE_CHOICES = (1, 2, 4, 8, 16)  # data parallel = 8 x nodes must divide the preset's global batch (128)


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "demo", help="start a local simulated cluster and run, and open the console on it (DEMO)"
    )
    p.add_argument(
        "--nodes",
        type=int,
        default=4,
        choices=NODE_CHOICES,
        help="Ray nodes to start, 8 simulated GPUs each (default 4; the recipe's batch needs a power of 2)",
    )
    p.add_argument("--rollouts", type=int, default=40, help="rollouts the simulated run does (default 40)")
    p.add_argument(
        "--step-seconds", type=float, default=1.0, help="simulated seconds per train step (default 1)"
    )
    p.add_argument(
        "--log-format",
        choices=LOG_FORMATS,
        default="newest",
        help="which miles version's log shape the simulated trainer prints (default newest)",
    )
    p.add_argument(
        "--oom-at-rollout",
        type=int,
        default=None,
        metavar="N",
        help="the simulated run dies of CUDA out of memory at rollout N",
    )
    p.add_argument(
        "--fail",
        choices=[k for k in FAIL_KINDS if k != "error"],
        default=None,
        metavar="KIND",
        help="the simulated run dies this way, as real runs print it: train-oom, engine-start (an SGLang "
        "engine at start), host-oom (Ray's OOM killer), nccl-timeout (a hung collective); in its "
        "second rollout where that applies",
    )
    p.add_argument(
        "--no-launch", action="store_true", help="start the cluster only; launch from the plan view"
    )
    p.add_argument(
        "--no-tui", action="store_true", help="no app: print progress and follow until done or Ctrl-C"
    )
    p.set_defaults(func=run)


def demo_overrides(args: argparse.Namespace, root: Path) -> list[str]:
    # lazy: only this subcommand pays for it (see console/commands/__init__.py)
    from backend.demo.simtrainer import SIM_TRAIN_SCRIPT

    return [
        f"cluster.nodes={args.nodes}",
        f"paths.train_script={SIM_TRAIN_SCRIPT}",
        f"paths.output_dir={root / 'output'}",
        f"paths.model_dir={root / 'models'}",
        f"paths.data_dir={root / 'datasets'}",
        f"batch.num_rollout={args.rollouts}",
        "checkpoint.save_interval=5",
        f"run.extra_args={' '.join(sim_flags(args))}",
    ]


def sim_flags(args: argparse.Namespace) -> list[str]:
    """The simulated trainer's `--sim-*` controls for the demo's options (they travel in `run.extra_args`)."""
    flags = ["--sim-step-seconds", f"{args.step_seconds:g}"]
    if getattr(args, "log_format", "newest") != "newest":
        flags += ["--sim-log-format", args.log_format]
    if getattr(args, "oom_at_rollout", None) is not None:
        flags += ["--sim-oom-at-rollout", str(args.oom_at_rollout)]
    if getattr(args, "fail", None):
        flags += ["--sim-fail", args.fail, "--sim-fail-at-rollout", "1"]
    return flags


def write_demo_preset(args: argparse.Namespace, directory: Path) -> tuple[Path, RunSpec]:
    """The demo's preset (4-layer recipe on the local nodes, simulated trainer) as a TOML file, so the
    plan view starts from it and an edit + launch there goes through the same path."""
    # lazy: only this subcommand pays for it (see console/commands/__init__.py)
    from backend.plan.deep import hf_config
    from backend.plan.spec import build_spec, dump_toml

    spec = build_spec(DEMO_PRESET, demo_overrides(args, directory))
    # What preflight checks on the head: a checkpoint directory (a synthetic config.json; the
    # simulator loads no weights) and the dataset files (a few prompts; it reads none).
    ckpt = directory / "models" / spec.model.name
    ckpt.mkdir(parents=True, exist_ok=True)
    (ckpt / "config.json").write_text(json.dumps(hf_config(spec), indent=1), encoding="utf-8")
    for rel in {spec.data.prompt_data, spec.eval.prompt_data}:
        target = directory / "datasets" / rel
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_text('{"prompt": "What is 1+1?", "label": "2"}\n', encoding="utf-8")
    path = directory / "demo-preset.toml"
    path.write_text(dump_toml(spec), encoding="utf-8")
    return path, spec


def run(args: argparse.Namespace) -> int:
    # lazy: only this subcommand pays for it (see console/commands/__init__.py)
    from backend.demo.local_cluster import LocalRayCluster
    from backend.settings import load_settings

    if args.nodes not in NODE_CHOICES:
        raise ConsoleError(
            f"--nodes must be one of {', '.join(map(str, NODE_CHOICES))} for the local demo cluster"
        )
    if args.rollouts < 1 or args.step_seconds <= 0:
        raise ConsoleError("--rollouts must be >= 1 and --step-seconds > 0")
    _say(f"DEMO: starting a local Ray cluster ({args.nodes} nodes x 8 simulated GPUs, loopback only)…")
    token = secrets.token_hex(16)
    try:
        cluster = LocalRayCluster.start(workers=args.nodes - 1, gpus=8, token=token)
    except RuntimeError as err:
        raise ConsoleError(f"the local Ray cluster did not start: {str(err).splitlines()[0]}") from None
    try:
        try:
            listeners = cluster.assert_loopback_only()
        except AssertionError as err:
            raise ConsoleError(f"refusing to run the demo: {err}") from None
        _say(
            f"DEMO: cluster up in {cluster.start_seconds:.0f}s at {cluster.address} "
            f"({listeners} listeners, all on loopback; token auth on)"
        )
        state_dir = cluster.tmp / "state"
        state_dir.mkdir(parents=True, exist_ok=True)
        preset_path, spec = write_demo_preset(args, cluster.tmp)
        settings = load_settings(
            address=cluster.address, token=token, state_dir=str(state_dir), preset=str(preset_path)
        )
        job_id = None
        if not args.no_launch:
            _say("DEMO: launching the SIMULATED trainer through the normal launch path…")
            job_id = asyncio.run(_launch(settings, spec))
            _say(f"DEMO: launched {job_id}")
        if args.no_tui:
            return asyncio.run(_follow(settings, job_id))
        from console.app import UltraConsoleApp

        UltraConsoleApp(settings, job=job_id, demo=True).run()
        return 0
    finally:
        _say("DEMO: tearing down the local cluster (only the one this demo started)…")
        cluster.shutdown()


def _say(text: str) -> None:
    print(text, file=sys.stderr, flush=True)


async def _launch(settings: Settings, spec: RunSpec) -> str:
    from backend.cluster.controller import RunController
    from backend.cluster.dashboard import RayClient
    from backend.cluster.watcher import options_from

    async with RayClient(settings.address, settings.token_text()) as client:
        controller = RunController(client, state_dir=settings.state_dir, watcher=options_from(settings))
        job = await controller.launch(spec)
        return job.id


async def _follow(settings: Settings, job_id: str | None) -> int:
    """Headless: print state changes and one line per rollout until the run ends (or Ctrl-C)."""
    # lazy: only this subcommand pays for it (see console/commands/__init__.py)
    from backend.cluster.controller import RunController
    from backend.cluster.dashboard import RayClient
    from backend.signals.ingest import LIVE_FLUSH_S, RunLog, text_chunks
    from backend.signals.monitor import RunMonitor

    if job_id is None:
        _say("DEMO: --no-launch with --no-tui: nothing to follow")
        return 0
    async with RayClient(settings.address, settings.token_text()) as client:
        controller = RunController(client, state_dir=settings.state_dir)
        controller.subscribe(
            lambda e: (
                print(f"state: {e.state.value if e.state else '?'} {e.text}".rstrip(), flush=True)
                if e.kind == "state"
                else None
            )
        )
        await controller.attach(job_id)
        watcher = asyncio.create_task(controller.watch())
        monitor = RunMonitor()
        run_log = RunLog.open(Path(settings.state_dir) / "logs", job_id, monitor)
        collector = monitor.collector
        printed = -1
        started = time.monotonic()
        try:
            async for chunk in text_chunks(client.follow_log(job_id), flush_s=LIVE_FLUSH_S):
                run_log.add(chunk)
                done = collector.last_step.get("rollout", -1)
                if done > printed:
                    printed = done
                    latest = collector.latest()
                    reward = latest.get("rollout/raw_reward")
                    kl = latest.get("train/ppo_kl")
                    print(
                        f"rollout {done + 1}: raw_reward={_fmt(reward)} ppo_kl={_fmt(kl)} "
                        f"lines={len(run_log.store)} t={time.monotonic() - started:.0f}s",
                        flush=True,
                    )
            await asyncio.wait_for(watcher, 30)
        finally:
            watcher.cancel()
            run_log.close()
        state = controller.state.value if controller.state else "?"
        print(f"run {job_id} ended {state}", flush=True)
        return 0 if state == "SUCCEEDED" else 1


def _fmt(value: float | None) -> str:
    return "—" if value is None else f"{value:.4g}"
