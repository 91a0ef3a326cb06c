"""The simulated driver: miles' train loop shape (generate -> train -> save -> eval) on Ray.

`--sim-log-format bare` runs the same loop without Ray (the actors are plain objects in the driver), so
every line reaches the job log with neither Ray's prefix nor miles' bracket. A run with `--load` of a
checkpoint resumes after it and restores the event log from the checkpoint's snapshot (`.trash_*` swap).

Signals: like miles, no handler of its own: SIGTERM hits the handler `ray.init` installs in
drivers (SystemExit), SIGINT raises KeyboardInterrupt; both run the `finally` (miles'
finish_tracking); SIGINT exits 130. The
`--sim-ignore-sigterm/--sim-ignore-sigint` flags make the driver log and ignore those signals,
so `ray job stop` has to escalate to SIGKILL.
"""

from __future__ import annotations

import os
import signal
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from types import SimpleNamespace
from typing import Any, TypeVar

import ray
from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy
from ray.util.state import get_actor

from backend.demo.simtrainer import SIM_LABEL, deaths
from backend.demo.simtrainer.actors import ACTOR_CLASSES, remote
from backend.demo.simtrainer.args import SimArgs, parse
from backend.demo.simtrainer.dashboard import COLLECTOR_NAME, DashboardCollector, GpuSampler, run_args
from backend.demo.simtrainer.event_checkpoint import restore
from backend.demo.simtrainer.milog import MilesLog

DRAIN_S = 3.0  # let Ray forward the actors' last lines before the driver disconnects


def should_run_periodic_action(rollout_id: int, interval: int | None, num_rollout: int | None) -> bool:
    """miles' rule: every `interval` rollouts, and after the last one."""
    if not interval:
        return False
    return (rollout_id + 1) % interval == 0 or (num_rollout is not None and rollout_id + 1 == num_rollout)


def _ignore(log: MilesLog, signum: int) -> None:
    name = signal.Signals(signum).name

    def handler(_sig: int, _frame: object) -> None:
        log.at("train.py:30", f"{SIM_LABEL}: received {name}, ignoring it (--sim-ignore-{name[3:].lower()})")

    signal.signal(signum, handler)


class _Local:
    """A plain object's method called like an actor's (`obj.method.remote(...)` then `get`): the shape
    of train.py's loop without Ray (`--sim-log-format bare`)."""

    def __init__(self, obj: object) -> None:
        self._obj = obj

    def __getattr__(self, name: str) -> Any:
        method = getattr(self._obj, name)
        return SimpleNamespace(remote=lambda *a: method(*a))


def _start_dashboard(args: SimArgs, log: MilesLog) -> Any:
    """miles' dashboard processes: the named collector on the driver's node, a GPU sampler per GPU node."""
    assert args.dump_details, "--use-miles-dashboard requires --dump-details"
    here = ray.get_runtime_context().get_node_id()
    collector = (
        remote(num_cpus=0, max_concurrency=8)(DashboardCollector)
        .options(name=COLLECTOR_NAME, scheduling_strategy=NodeAffinitySchedulingStrategy(here, soft=False))
        .remote(
            args.dump_details, args.wandb_group or "miles-run", run_args(args), args.dashboard_flush_interval
        )
    )
    ray.get(collector.__ray_ready__.remote())
    sampler_cls = remote(num_cpus=0, max_concurrency=4)(GpuSampler)
    samplers = []
    for node in ray.nodes():
        if node.get("Alive") and node.get("Resources", {}).get("GPU"):
            samplers.append(
                sampler_cls.options(
                    scheduling_strategy=NodeAffinitySchedulingStrategy(node["NodeID"], soft=False)
                ).remote(
                    node["NodeManagerAddress"],
                    node["NodeID"],
                    args.dashboard_gpu_sample_interval,
                    args.dashboard_flush_interval,
                )
            )
    ray.get([s.__ray_ready__.remote() for s in samplers])
    log.at(
        "backend.py:61",
        f"miles dashboard: collector {COLLECTOR_NAME} and {len(samplers)} GPU sampler(s) started, "
        f"flush every {args.dashboard_flush_interval:g}s",
    )
    return collector, samplers


def _stop_dashboard(handles: Any) -> None:
    collector, samplers = handles
    ray.get([s.stop.remote() for s in samplers], timeout=30)
    ray.get(collector.close.remote(), timeout=30)


def _announce_resume(args: SimArgs, log: MilesLog, resumed: int) -> None:
    """Megatron's checkpointing.py words, then the simulator's own line."""
    print(f" loading checkpoint from {args.load} at iteration {resumed}", flush=True)
    print(
        f"  successfully loaded checkpoint from {args.load} [ t 1/1, p 1/1 ] at iteration {resumed}",
        flush=True,
    )
    log.at("train.py:61", f"resuming from checkpoint iteration {resumed} in {args.load}")


@dataclass
class _Actors:
    """The run's actors, how to wait on their calls, and the dashboard collector (None: off)."""

    get: Callable[[Any], Any]
    manager: Any
    trainers: list[Any]
    dashboard: Any


def _ray_actors(args: SimArgs, log: MilesLog) -> _Actors:
    """The rollout manager and one train actor per node, as Ray actors spread over the nodes."""
    manager_cls, train_cls = ACTOR_CLASSES[args.log_format]
    ray.init(address=os.environ["RAY_ADDRESS"], log_to_driver=True)
    # After ray.init: it installs its own SIGTERM handler (SystemExit) for drivers.
    _signals(args, log)
    dashboard = _start_dashboard(args, log) if args.use_miles_dashboard else None
    log.at("placement_group.py:113", f"Creating placement group with {args.world_size} GPUs...")
    manager = remote(num_cpus=0)(manager_cls).remote(args)
    remote_train = remote(num_cpus=0, num_gpus=args.actor_num_gpus_per_node)(train_cls)
    trainers = [
        remote_train.options(scheduling_strategy="SPREAD", **_shim_off(args, i)).remote(args, i)
        for i in range(args.actor_num_nodes)
    ]
    _ready(args, log, [manager, *trainers])
    return _Actors(get=ray.get, manager=manager, trainers=trainers, dashboard=dashboard)


def _local_actors(args: SimArgs, log: MilesLog) -> _Actors:
    """The same actors in this process (`--sim-log-format bare`: no Ray)."""
    manager_cls, train_cls = ACTOR_CLASSES[args.log_format]
    _signals(args, log)
    if args.use_miles_dashboard:
        log.at("backend.py:88", "miles dashboard: no Ray in this process; dashboard streams are off")
    manager = _Local(manager_cls(args, in_ray=False))
    trainers = [_Local(train_cls(args, i, in_ray=False)) for i in range(args.actor_num_nodes)]
    return _Actors(get=_identity, manager=manager, trainers=trainers, dashboard=None)


def _train(args: SimArgs, x: _Actors, start: int) -> int:
    """miles' loop: generate, train, save and evaluate on their intervals; returns the next rollout id."""
    get, manager, actors = x.get, x.manager, x.trainers
    if args.eval_interval and start == 0:
        get(manager.run_eval.remote(0))
    last = None if args.forever else args.num_rollout
    rollout_id = start
    while last is None or rollout_id < last:
        get(manager.generate.remote(rollout_id))
        get([a.train.remote(rollout_id) for a in actors])
        _save_and_eval(args, x, rollout_id, last)
        rollout_id += 1
    get(manager.dispose.remote())
    return rollout_id


def _save_and_eval(args: SimArgs, x: _Actors, rollout_id: int, last: int | None) -> None:
    """A checkpoint and an evaluation after the rollout, each on its interval (the first eval is before)."""
    if args.save and should_run_periodic_action(rollout_id, args.save_interval, last):
        x.get([a.save_model.remote(rollout_id) for a in x.trainers])
    if rollout_id > 0 and should_run_periodic_action(rollout_id, args.eval_interval, last):
        x.get(x.manager.run_eval.remote(rollout_id))


def run(args: SimArgs, log: MilesLog) -> int:
    in_ray = args.log_format != "bare"
    resumed = restore(args.dump_details, args.load, log, args.ckpt_step)
    start = resumed or 0
    if resumed is not None:
        _announce_resume(args, log, resumed)
    x = _ray_actors(args, log) if in_ray else _local_actors(args, log)
    log.at(
        "placement_group.py:160",
        f"Placement group ready: {args.actor_num_nodes} train actors, 1 rollout manager",
    )
    try:
        if args.leak_gpu_process and in_ray:
            x.get(x.trainers[-1].leak_gpu_process.remote(args.hold_gpu_mib // 4))
        rollout_id = _train(args, x, start)
    finally:
        if x.dashboard is not None:
            _stop_dashboard(x.dashboard)
    log.at("train.py:150", f"{SIM_LABEL}: training finished after {rollout_id - start} rollouts")
    return 0


# Ray hands a job's worker_process_setup_hook to its workers in this variable; empty, a worker runs no hook.
_SETUP_HOOK_VAR = "__RAY_WORKER_PROCESS_SETUP_HOOK_ENV_VAR"


def _shim_off(args: SimArgs, index: int) -> dict[str, object]:
    """`--sim-shim-off-rank N`: train actor N's worker starts without the job's setup hook, so it never logs
    the shim line (its own runtime env, merged over the
    job's, empties the hook; everything else is inherited)."""
    if args.shim_off_rank != index:
        return {}
    return {"runtime_env": {"env_vars": {_SETUP_HOOK_VAR: ""}}}


def _ready(args: SimArgs, log: MilesLog, handles: list[Any]) -> None:
    """Wait for the actors' creation tasks, as miles' train.py does. With `--sim-fail host-oom` the first
    train actor was killed in its creation task (actors.py): the driver gets Ray's OutOfMemoryError."""
    try:
        ray.get([h.__ray_ready__.remote() for h in handles])
    except ray.exceptions.ActorDiedError as err:
        if args.fail != "host-oom":
            raise
        raise _host_oom(err, log) from err


def _host_oom(err: BaseException, log: MilesLog) -> Exception:
    """What Ray says of a worker its memory monitor killed: the raylet's report (`(raylet) …`, which the
    real raylet sends to every driver; the simulator prints its shape from the driver, as it cannot make
    the raylet exhaust a test machine's memory) and the `ray.exceptions.OutOfMemoryError` the caller gets."""
    actor_id = str(getattr(err, "actor_id", None) or "")
    state = get_actor(actor_id) if actor_id else None
    node_id = str(getattr(state, "node_id", None) or ray.get_runtime_context().get_node_id())
    ip = next((n["NodeManagerAddress"] for n in ray.nodes() if n["NodeID"] == node_id), "127.0.0.1")
    pid = int(getattr(state, "pid", None) or 0)
    name = f"{getattr(state, 'class_name', None) or 'MegatronTrainRayActor'}.__init__"
    worker_id = os.urandom(28).hex()  # the state API does not keep a dead worker's id; Ray's is this shape
    print(
        deaths.raylet_oom_line(node_id, ip, os.getpid()), file=sys.stderr, flush=True
    )  # raylet pid: invented
    return ray.exceptions.OutOfMemoryError(
        deaths.host_oom_message(ip, node_id, actor_id, name, pid, worker_id)
    )


_T = TypeVar("_T")


def _identity(value: _T) -> _T:
    """`ray.get` of a local call: its result is already there (a list of results stays a list)."""
    return value


def _signals(args: SimArgs, log: MilesLog) -> None:
    if args.ignore_sigterm:
        _ignore(log, signal.SIGTERM)
    if args.ignore_sigint:
        _ignore(log, signal.SIGINT)


def main(argv: Sequence[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    args = parse(argv)
    log = MilesLog("main", args.log_format)
    log.at(
        "train.py:24",
        f"{SIM_LABEL}: no model is loaded and no GPU is used; {len(argv)} miles arguments received",
    )
    if args.log_format != "bare" and not os.environ.get("RAY_ADDRESS"):
        log.at("train.py:26", f"{SIM_LABEL}: RAY_ADDRESS is not set; submit it as a Ray job")
        return 2
    status = 1
    try:
        status = run(args, log)
    except KeyboardInterrupt:
        log.at("train.py:156", f"{SIM_LABEL}: KeyboardInterrupt (SIGINT), shutting down cleanly")
        status = 130
    finally:
        time.sleep(DRAIN_S)
        log.at("tracking.py:61", "finish_tracking: done")
        try:
            if args.log_format != "bare":
                ray.shutdown()
        except Exception as err:  # the run's own status matters more than a shutdown hiccup
            log.at("train.py:158", f"ray.shutdown failed: {err!r}")
    return status
