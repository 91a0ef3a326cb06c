"""The simulated actors. Their class names are what Ray prints in the log prefix
(`(MegatronTrainRayActor pid=..., ip=...)`), so they carry miles' names exactly, per version:
`RolloutManager` / `MegatronTrainRayActor` until mid 2026, `RolloutExecutor` /
`MegatronTrainRayActorWithConcurrencyGroups` in the newest miles (`ACTOR_CLASSES`).

One `MegatronTrainRayActor` per node stands for that node's `gpus_per_node` ranks (cheap on a
test machine); it "holds" its GPUs by writing fake-GPU holding files when `FAKE_GPU_DIR` is set
(see fakegpu/sitecustomize.py), which the fake NVML in Ray's reporter turns into per-process GPU
memory, like a real trainer's CUDA allocations.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from backend.demo.simtrainer import SIM_LABEL, deaths, event_checkpoint, metrics, oom, samples
from backend.demo.simtrainer.args import SimArgs
from backend.demo.simtrainer.dashboard import DashboardClient, PhaseEvent
from backend.demo.simtrainer.milog import EventLog, MilesLog


def _node_ip() -> str:
    # ray: only inside the Ray job (tests/unit import this module without Ray)
    import ray

    return str(ray.util.get_node_ip_address())


def remote(*args: Any, **kwargs: Any) -> Any:
    """`ray.remote` untyped: Ray's overloads do not cover actor options such as max_concurrency."""
    # ray: only inside the Ray job (tests/unit import this module without Ray)
    import ray

    decorate: Any = ray.remote
    return decorate(*args, **kwargs)


def truncated(line: str) -> str:
    """A metric line cut inside its dict, as a full pipe or a
    killed writer leaves it (`--sim-unreadable-metrics`)."""
    return line[: line.index("{") + max(8, (len(line) - line.index("{")) // 2)]


def _hold_gpus(gpu_ids: list[int], pid: int, mib: int, util: int) -> list[Path]:
    """Register `pid` as holding `mib` MiB on each GPU with the node's fake NVML, if any."""
    base = os.environ.get("FAKE_GPU_DIR")
    if not base:
        return []
    # ray: only inside the Ray job (tests/unit import this module without Ray)
    import ray

    node_dir = Path(base) / ray.get_runtime_context().get_node_id()
    node_dir.mkdir(parents=True, exist_ok=True)
    paths = []
    for gpu in gpu_ids:
        path = node_dir / f"gpu{gpu}-{pid}.json"
        path.write_text(json.dumps({"mem": mib, "util": util}))
        paths.append(path)
    return paths


class RolloutManager:
    """Generates rollouts (sleeps) and logs the rollout-side `perf N` / `eval N` lines."""

    PROC = "rollout_manager"  # bracket name and event source

    def __init__(self, args: SimArgs, in_ray: bool = True) -> None:
        self.args = args
        self.dashboard = DashboardClient(args.use_miles_dashboard and in_ray)
        self.log = MilesLog(self.PROC, args.log_format)
        self.events = EventLog(args.dump_details, self.PROC, {"component": self.PROC}, self.dashboard)
        self.log.at(
            "rollout_manager.py:59", f"{SIM_LABEL}: {type(self).__name__} started (no sglang engines)"
        )
        if args.fail == "engine-start":
            self._start_engine(in_ray)

    def _start_engine(self, in_ray: bool) -> None:
        """miles starts its SGLang engines in the manager's creation task and waits for each engine's init();
        an engine that dies there fails the manager's creation (`--sim-fail engine-start`)."""
        if not in_ray:
            SGLangEngine(self.args).init()
            return
        # ray: only inside the Ray job (tests/unit import this module without Ray)
        import ray

        engine = remote(num_cpus=0)(SGLangEngine).remote(self.args)
        ray.get(engine.init.remote())

    def generate(self, rollout_id: int) -> int:
        a = self.args
        t0 = time.monotonic()
        wall0 = time.time()
        node = _node_ip() if self.dashboard.enabled else ""
        self.dashboard.phase(PhaseEvent("rollout", wall0, -1.0, node, [], -1, "rollout_manager"))
        time.sleep(a.step_seconds)
        self.dashboard.phase(PhaseEvent("rollout", wall0, time.time(), node, [], -1, "rollout_manager"))
        self.log.at(
            "inference_rollout_train.py:156",
            (
                f"Finish rollout: rollout_id={rollout_id} "
                f"samples={a.rollout_batch_size * a.n_samples_per_prompt}"
            ),
        )
        if a.dump_details:  # miles saves the samples before it logs `perf N` (rollout_manager.py:153)
            samples.save_rollout(
                a.dump_details, rollout_id, a.rollout_batch_size, a.n_samples_per_prompt, a.max_response_len
            )
        perf = metrics.rollout_perf(
            rollout_id,
            a.world_size,
            a.rollout_batch_size,
            a.n_samples_per_prompt,
            a.max_response_len,
            round(time.monotonic() - t0, 3),
            a.log_passrate,
        )
        self.log.at("metrics.py:89", f"perf {rollout_id}: {perf}")
        self.events.metric({**perf, "rollout/step": rollout_id}, rollout_id)
        self.dashboard.drain()
        return a.rollout_batch_size * a.n_samples_per_prompt

    def run_eval(self, rollout_id: int) -> None:
        a = self.args
        values = metrics.eval_metrics(rollout_id, a.eval_name or "aime", a.log_passrate)
        self.log.at("metrics.py:53", f"eval {rollout_id}: {values}")
        self.events.metric({**values, "eval/step": rollout_id}, rollout_id)
        self.dashboard.drain()

    def dispose(self) -> None:
        self.log.at("rollout_manager.py:131", "dispose: closing data source")


class MegatronTrainRayActor:
    """Stands for ranks [node*G, node*G+G) of the training world; the one hosting the metric
    rank prints `rollout N`, the doubled `step N` and train-side `perf N`; rank 0 prints Timers.
    Outside Ray (`--sim-log-format bare`) it is a plain object in the driver that holds no GPU."""

    def __init__(self, args: SimArgs, node_index: int, in_ray: bool = True) -> None:
        self.args = args
        g = args.actor_num_gpus_per_node
        self.ranks = range(node_index * g, node_index * g + g)
        self.prints_metrics = args.metric_rank in self.ranks
        rank = args.metric_rank if self.prints_metrics else self.ranks[0]
        self.dashboard = DashboardClient(args.use_miles_dashboard and in_ray and self.prints_metrics)
        self.phases = DashboardClient(args.use_miles_dashboard and in_ray)
        self.log = MilesLog(f"actor_cell0_rank{rank}", args.log_format)
        self.events = EventLog(
            args.dump_details if self.prints_metrics else None,
            f"actor_cell0_rank{rank}",
            {"component": "actor", "cell_index": 0, "rank_within_cell": rank},
            self.dashboard,
        )
        self.gpu_ids: list[int] = []
        self.holdings: list[Path] = []
        self.node = ""
        if in_ray:
            self._take_gpus()
        self.log.at(
            "train_actor.py:53",
            f"{SIM_LABEL}: ranks {self.ranks.start}-{self.ranks.stop - 1} on GPUs {self.gpu_ids}",
        )
        if in_ray and args.fail == "host-oom" and node_index == 0:
            # Ray's memory monitor SIGKILLs the worker while it loads the checkpoint into host memory; the
            # driver words what Ray reports (driver.py), the simulator cannot really exhaust the host's RAM.
            self.log.at("train_actor.py:71", "loading the checkpoint into host memory")
            os.kill(os.getpid(), signal.SIGKILL)

    def _take_gpus(self) -> None:
        """The GPUs Ray gave this actor, held (fake memory) as a real trainer would hold them."""
        # ray: only inside the Ray job (tests/unit import this module without Ray)
        import ray

        self.gpu_ids = [int(x) for x in ray.get_gpu_ids()]
        self.holdings = _hold_gpus(self.gpu_ids, os.getpid(), self.args.hold_gpu_mib, 0)
        self.node = _node_ip()

    def _set_util(self, util: int, mem: int | None = None) -> None:
        for path in self.holdings:
            with contextlib.suppress(OSError):
                path.write_text(
                    json.dumps({"mem": self.args.hold_gpu_mib if mem is None else mem, "util": util})
                )

    def _metric_line(self, where: str, line: str) -> None:
        self.log.at(where, truncated(line) if self.args.unreadable_metrics else line)

    def _out_of_memory(self, rollout_id: int) -> None:
        """Every train process hits torch_memory_saver's OOM; the one on GPU `--sim-oom-gpu` of the first
        node raises PyTorch's error (its fake GPU shows full), which kills the run."""
        a = self.args
        print(oom.malloc_oom_line(oom.ASKED, a.oom_gpu), file=sys.stderr, flush=True)
        if self.ranks.start != 0:
            return
        for path in self.holdings:
            if path.name.startswith(f"gpu{a.oom_gpu}-"):
                with contextlib.suppress(OSError):
                    path.write_text(
                        json.dumps({"mem": (oom.capacity_bytes() - oom.FREE) // oom.MIB, "util": 100})
                    )
        _allocate(oom.ASKED, a.oom_gpu, rollout_id)

    def _collective_timeout(self) -> None:
        """`--sim-fail nccl-timeout`: the step's all-reduce never completes because the culprit rank never
        joins it. Every other rank's watchdog fires after the (short, simulated) timeout and takes its
        process down; the culprit prints nothing. One actor stands for a node's ranks, so it prints each
        of its ranks' lines and then aborts once, as the first of its real processes would."""
        a = self.args
        self._set_util(100)  # NCCL kernels spin while they wait
        t0 = time.monotonic()
        time.sleep(a.nccl_timeout_s)
        timeout_ms = int(a.nccl_timeout_s * 1000)
        ran_ms = int((time.monotonic() - t0) * 1000)
        timed_out = [r for r in self.ranks if r != a.culprit_rank]
        if not timed_out:  # a node of the culprit alone: it goes when Ray ends the failed job
            os.kill(os.getpid(), signal.SIGKILL)
        for rank in timed_out:
            sys.stderr.write(
                "".join(f"{line}\n" for line in deaths.nccl_timeout_lines(rank, timeout_ms, ran_ms))
            )
            sys.stderr.flush()
        deaths.nccl_abort(timed_out[0], timeout_ms, ran_ms)

    def _store_unreachable(self) -> None:
        """`--sim-fail c10d-unreachable`: each rank of this actor tries the store's address and gives up, as
        torch's TCPStore client prints it; the first rank's error ends train()."""
        timeout_ms = int(self.args.nccl_timeout_s * 1000)
        time.sleep(self.args.nccl_timeout_s)
        sys.stderr.write("".join(f"{deaths.c10d_timeout_line(r, timeout_ms)}\n" for r in self.ranks))
        sys.stderr.flush()
        raise deaths.DistNetworkError(deaths.c10d_timeout_message(timeout_ms))

    def _hang(self, rollout_id: int) -> None:
        """With `--sim-hang-rank`, at the second rollout (the first of a one-rollout run): the hung rank
        waits in a receive that never comes; every other rank waits in the all-reduce."""
        a = self.args
        if a.hang_rank is None or rollout_id != min(1, a.num_rollout - 1):
            return
        if a.hang_rank in self.ranks:
            simulated_stuck_recv()
        simulated_allreduce_wait()

    def _fail_in_train(self, rollout_id: int) -> None:
        """Die (or, for an incident, print a caught error) the way `--sim-fail` asks at this rollout."""
        a = self.args
        if a.fails_at("train-oom", rollout_id):
            self._out_of_memory(rollout_id)
        if a.fails_at("nccl-timeout", rollout_id):
            self._collective_timeout()
        if a.fails_at("c10d-unreachable", rollout_id):
            self._store_unreachable()
        if a.fails_at("incident", rollout_id) and self.ranks.start == 0:
            sys.stderr.write("".join(f"{line}\n" for line in deaths.caught_error_lines()))
            sys.stderr.flush()

    def _rollout_metrics(self, rollout_id: int) -> None:
        """The rollout's batch dict, logged and as an event."""
        batch = metrics.rollout_batch(rollout_id)
        self._metric_line("log_utils.py:123", f"rollout {rollout_id}: {batch}")
        self.events.metric({**batch, "rollout/step": rollout_id}, rollout_id)

    def _perf_metrics(self, rollout_id: int) -> None:
        """The trainer's perf dict for the rollout, logged and as an event."""
        perf = metrics.train_perf(rollout_id, self.args.step_seconds, self.args.steps_per_rollout)
        self._metric_line("train_metric_utils.py:56", f"perf {rollout_id}: {perf}")
        self.events.metric({**perf, "rollout/step": rollout_id}, rollout_id)

    def _train_step(self, rollout_id: int, s: int) -> None:
        """Step `s` of the rollout, logged twice as miles does, and as an event."""
        a = self.args
        n = rollout_id * a.steps_per_rollout + s
        nan = a.nan_at_step is not None and n >= a.nan_at_step
        step = metrics.train_step(
            n, s == 0, a.lr, nan, rollout_id == a.kl_spike_at_rollout, n == a.nan_grad_at_step
        )
        self._metric_line("log_utils.py:542", f"step {n}: {step}")
        self._metric_line("model.py:854", f"step {n}: {step}")
        self.events.metric(step, rollout_id)

    def train(self, rollout_id: int) -> None:
        a = self.args
        cls = type(self).__name__
        self.log.at("structured_log.py:41", f"ft cls={cls} fn=train phase=start")
        if a.fails_at("error", rollout_id):
            raise RuntimeError(f"simulated failure at rollout {rollout_id} (--sim-fail-at-rollout)")
        self._set_util(97)
        wall0 = time.time()
        self._rank_phases("train", wall0, -1.0)
        self._hang(rollout_id)
        if self.ranks.start == 0:
            self.log.at("timer.py:30", "Timer train start")
        self._fail_in_train(rollout_id)
        if self.prints_metrics:
            self._rollout_metrics(rollout_id)
        for s in range(a.steps_per_rollout):
            time.sleep(a.step_seconds / a.steps_per_rollout)
            if self.prints_metrics:
                self._train_step(rollout_id, s)
        if self.ranks.start == 0:
            self.log.at("timer.py:41", f"Timer train end (elapsed: {a.step_seconds:.1f}s)")
        end = time.time()
        if a.straggler_rank in self.ranks:
            time.sleep(a.straggler_seconds)
        self._rank_phases("train", wall0, end)
        if self.prints_metrics:
            self._perf_metrics(rollout_id)
        self._set_util(0)
        self.dashboard.drain()
        self.phases.drain()
        self.log.at("structured_log.py:41", f"ft cls={cls} fn=train phase=end")

    def _rank_phases(self, name: str, t0: float, t1: float) -> None:
        """One phase event per rank this actor stands for, as miles' Timer sink sends per train rank; the
        straggler rank's close comes `--sim-straggler-seconds` later."""
        for i, rank in enumerate(self.ranks):
            gpus = [self.gpu_ids[i]] if i < len(self.gpu_ids) else []
            late = self.args.straggler_seconds if t1 != -1.0 and rank == self.args.straggler_rank else 0.0
            self.phases.phase(
                PhaseEvent(name, t0, t1 + late if t1 != -1.0 else t1, self.node, gpus, rank, "train")
            )

    def save_model(self, rollout_id: int) -> None:
        """Megatron's checkpoint lines and layout (`iter_XXXXXXX/`, tracker file) plus a marker, and
        miles' snapshot of the event dir into it."""
        if self.ranks.start != 0 or not self.args.save:
            return
        it = rollout_id + 1
        save = self.args.save
        print(f"saving checkpoint at iteration {it:7d} to {save} in torch_dist format", flush=True)
        ckpt = Path(save) / f"iter_{it:07d}"
        ckpt.mkdir(parents=True, exist_ok=True)
        (ckpt / "SIMULATED").write_text(f"{SIM_LABEL}: no weights; rollout_id={rollout_id}\n")
        for name in ("common.pt", ".metadata", "metadata.json"):  # what a finished torch_dist save leaves
            (ckpt / name).write_text("{}\n" if name.endswith(".json") else SIM_LABEL + "\n")
        (Path(save) / event_checkpoint.TRACKER).write_text(f"{it}\n")
        event_checkpoint.snapshot(self.args.dump_details, save, it, self.log)
        print(
            f"  successfully saved checkpoint from iteration {it:7d} to {save} [ t 1/1, p 1/1 ]", flush=True
        )

    def leak_gpu_process(self, mib: int) -> int:
        """Start a process in its own session that outlives this actor and keeps "holding" GPU 0
        of this node: what a stray SGLang scheduler does to a real run (miles-run-output.md §8)."""
        # ray: only inside the Ray job (tests/unit import this module without Ray)
        import ray

        # Double fork: the holder is re-parented at once, so Ray's kill of the worker's
        # children (on worker exit) does not reach it, as with a daemonised SGLang process.
        holder = [
            sys.executable,
            "-c",
            "import time\nwhile True: time.sleep(60)",
            "simtrainer-leaked-gpu-holder",
        ]
        spawn = (
            "import subprocess, sys\n"
            f"p = subprocess.Popen({holder!r}, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, "
            "stderr=subprocess.DEVNULL, start_new_session=True)\nprint(p.pid)"
        )
        out = subprocess.run(
            [sys.executable, "-c", spawn], capture_output=True, text=True, check=True, timeout=60
        )
        pid = int(out.stdout.strip())
        gpu_ids = [int(x) for x in ray.get_gpu_ids()][:1]
        _hold_gpus(gpu_ids, pid, mib, 0)
        self.log.at("sglang_engine.py:76", f"{SIM_LABEL}: leaked GPU holder pid={pid} on GPUs {gpu_ids}")
        return pid


def simulated_stuck_recv() -> None:
    """Where the hung rank blocks (`--sim-hang-rank`): a name no other rank's stack holds."""
    while True:
        time.sleep(60)


def simulated_allreduce_wait() -> None:
    """Where every other train rank blocks while one hangs: the collective that waits for it."""
    while True:
        time.sleep(60)


def _allocate(size: int, gpu: int, rollout_id: int) -> None:
    """Where PyTorch's caching allocator gives up (the frame a real OOM traceback ends in)."""
    raise oom.OutOfMemoryError(oom.oom_message(gpu, os.getpid(), size, oom.FREE))


class SGLangEngine:
    """One SGLang server as miles runs it: `init()` launches the server and waits until it is healthy. The
    simulator's rollouts are sleeps in the manager, so it starts an engine only to see it die at start
    (`--sim-fail engine-start`): the scheduler gives up sizing its KV cache, SGLang's engine process gets
    the child's SIGQUIT, and init() finds its server gone."""

    def __init__(self, args: SimArgs) -> None:
        self.args = args
        print(
            deaths.sglang_line(f"{SIM_LABEL}: SGLangEngine launching a server (no model)"),
            file=sys.stderr,
            flush=True,
        )

    def init(self) -> None:
        if self.args.fail == "engine-start":
            sys.stderr.write(deaths.scheduler_exception("TP0") + "\n")
            sys.stderr.flush()
            print(deaths.sigquit_line(), file=sys.stderr, flush=True)
            raise RuntimeError(deaths.SERVER_DIED)


class RolloutExecutor(RolloutManager):
    """The newest miles' name for the rollout manager actor."""

    PROC = "rollout_executor"


class MegatronTrainRayActorWithConcurrencyGroups(MegatronTrainRayActor):
    """The newest miles' name for the train actor."""


ACTOR_CLASSES: dict[str, tuple[type[RolloutManager], type[MegatronTrainRayActor]]] = {
    "newest": (RolloutExecutor, MegatronTrainRayActorWithConcurrencyGroups),
    "2026-04": (RolloutManager, MegatronTrainRayActor),
    "bare": (RolloutManager, MegatronTrainRayActor),
}
