"""The simulated driver: miles' train loop shape (generate -> train -> save -> eval) on Ray.

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
from collections.abc import Sequence

from backend.demo.simtrainer import SIM_LABEL
from backend.demo.simtrainer.args import SimArgs, parse
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


def run(args: SimArgs, log: MilesLog) -> int:
    import ray

    from backend.demo.simtrainer.actors import MegatronTrainRayActor, RolloutManager

    ray.init(address=os.environ["RAY_ADDRESS"], log_to_driver=True)
    # After ray.init: it installs its own SIGTERM handler (SystemExit) for drivers.
    if args.ignore_sigterm:
        _ignore(log, signal.SIGTERM)
    if args.ignore_sigint:
        _ignore(log, signal.SIGINT)
    log.at("placement_group.py:113", f"Creating placement group with {args.world_size} GPUs...")
    manager_cls = ray.remote(num_cpus=0)(RolloutManager)
    train_cls = ray.remote(num_cpus=0, num_gpus=args.actor_num_gpus_per_node)(MegatronTrainRayActor)
    manager = manager_cls.remote(args)
    actors = [train_cls.options(scheduling_strategy="SPREAD").remote(args, i) for i in range(args.actor_num_nodes)]
    ray.get([a.__ray_ready__.remote() for a in [manager, *actors]])
    log.at("placement_group.py:160", f"Placement group ready: {args.actor_num_nodes} train actors, 1 rollout manager")
    if args.leak_gpu_process:
        ray.get(actors[-1].leak_gpu_process.remote(args.hold_gpu_mib // 4))
    if args.eval_interval:
        ray.get(manager.run_eval.remote(0))
    last = None if args.forever else args.num_rollout
    rollout_id = 0
    while last is None or rollout_id < last:
        ray.get(manager.generate.remote(rollout_id))
        ray.get([a.train.remote(rollout_id) for a in actors])
        if args.save and should_run_periodic_action(rollout_id, args.save_interval, last):
            ray.get([a.save_model.remote(rollout_id) for a in actors])
        if rollout_id > 0 and should_run_periodic_action(rollout_id, args.eval_interval, last):
            ray.get(manager.run_eval.remote(rollout_id))
        rollout_id += 1
    ray.get(manager.dispose.remote())
    log.at("train.py:150", f"{SIM_LABEL}: training finished after {rollout_id} rollouts")
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    args = parse(argv)
    log = MilesLog("main")
    log.at("train.py:24", f"{SIM_LABEL}: no model is loaded and no GPU is used; "
                          f"{len(argv)} miles arguments received")
    if not os.environ.get("RAY_ADDRESS"):
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
            import ray

            ray.shutdown()
        except Exception as err:  # the run's own status matters more than a shutdown hiccup
            log.at("train.py:158", f"ray.shutdown failed: {err!r}")
    return status
