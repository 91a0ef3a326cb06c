"""The numbers a layout implies: data-parallel sizes, the pipeline split, the rollout engines, the batch
arithmetic and the memory per GPU and per node.

`layout_figures(spec)` computes them from the same context the rules read, so a number on screen and the rule
that judges it never disagree. The result is a frozen dataclass; `to_json` gives every figure under
one flat name (what `plan --json` prints, what the plan preview carries and the panels list, in that
order) and `from_json` reads it back.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Literal

from backend.plan import sizing
from backend.plan.checks.context import LayoutContext, TrainMemory

if TYPE_CHECKING:
    from backend.plan.spec import RunSpec

JsonDict = dict[str, Any]


def _r3(x: float) -> float:
    return round(x, 3)


def _int_or_none(value: Any) -> int | None:
    return None if value is None else int(value)


@dataclass(frozen=True, slots=True)
class StageFigures:
    """One pipeline stage: where it starts, its layers by kind, and the parameters one of its GPUs holds."""

    stage: int
    first_layer: int
    layers: int
    mamba: int
    moe: int
    attention: int
    mlp: int
    params_per_gpu_b: float

    def to_json(self) -> JsonDict:
        # The layer kinds go by their hybrid-pattern symbols.
        return {
            "stage": self.stage,
            "first_layer": self.first_layer,
            "layers": self.layers,
            "M": self.mamba,
            "E": self.moe,
            "*": self.attention,
            "-": self.mlp,
            "params_per_gpu_b": self.params_per_gpu_b,
        }

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> StageFigures:
        return cls(
            int(data["stage"]),
            int(data["first_layer"]),
            int(data["layers"]),
            int(data["M"]),
            int(data["E"]),
            int(data["*"]),
            int(data["-"]),
            float(data["params_per_gpu_b"]),
        )


@dataclass(frozen=True, slots=True)
class TrainingLayout:
    """The training grid: world, data-parallel sizes (None where the grid does not divide the world)."""

    world_size: int
    dp: int | None
    edp: int | None
    etp: int  # the effective one: unset means TP
    sequence_parallel: bool  # effective: off at TP = 1 whatever was asked
    experts_per_rank: int | None
    layers_per_stage: int
    stages: tuple[StageFigures, ...]
    ep_group_nodes: int

    def to_json(self) -> JsonDict:
        return {
            "world_size": self.world_size,
            "dp": self.dp,
            "edp": self.edp,
            "etp": self.etp,
            "sequence_parallel": self.sequence_parallel,
            "experts_per_rank": self.experts_per_rank,
            "layers_per_stage": self.layers_per_stage,
            "stages": [s.to_json() for s in self.stages],
            "ep_group_nodes": self.ep_group_nodes,
        }

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> TrainingLayout:
        return cls(
            int(data["world_size"]),
            _int_or_none(data["dp"]),
            _int_or_none(data["edp"]),
            int(data["etp"]),
            bool(data["sequence_parallel"]),
            _int_or_none(data["experts_per_rank"]),
            int(data["layers_per_stage"]),
            tuple(StageFigures.from_json(s) for s in data["stages"]),
            int(data["ep_group_nodes"]),
        )


@dataclass(frozen=True, slots=True)
class RolloutLayout:
    """The SGLang engines: the GPU pool, engine count and span, and each engine's attention and MoE split."""

    gpus: int | None  # the pool (all training GPUs when colocated); None when not given
    engines: int | None
    nodes_per_engine: int
    engine_processes: int | None
    attn_tp: int | None
    moe_tp: int | None
    experts_per_rank: int | None

    def to_json(self) -> JsonDict:
        return {
            "rollout_gpus": self.gpus,
            "rollout_engines": self.engines,
            "rollout_nodes_per_engine": self.nodes_per_engine,
            "rollout_engine_processes": self.engine_processes,
            "attn_tp": self.attn_tp,
            "rollout_moe_tp": self.moe_tp,
            "rollout_experts_per_rank": self.experts_per_rank,
        }

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> RolloutLayout:
        return cls(
            _int_or_none(data["rollout_gpus"]),
            _int_or_none(data["rollout_engines"]),
            int(data["rollout_nodes_per_engine"]),
            _int_or_none(data["rollout_engine_processes"]),
            _int_or_none(data["attn_tp"]),
            _int_or_none(data["rollout_moe_tp"]),
            _int_or_none(data["rollout_experts_per_rank"]),
        )


@dataclass(frozen=True, slots=True)
class BatchFigures:
    samples_per_rollout: int
    optimizer_steps_per_rollout: int

    def to_json(self) -> JsonDict:
        return {
            "samples_per_rollout": self.samples_per_rollout,
            "optimizer_steps_per_rollout": self.optimizer_steps_per_rollout,
        }

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> BatchFigures:
        return cls(int(data["samples_per_rollout"]), int(data["optimizer_steps_per_rollout"]))


@dataclass(frozen=True, slots=True)
class MemoryFigures:
    """Parameters and GB per GPU (and per node for host RAM); host figures are 0 without optimizer offload."""

    params_per_gpu: tuple[int, ...]  # per pipeline stage
    params_per_gpu_max_b: float
    weights_gb_per_gpu: float
    grads_gb_per_gpu: float
    weights_grads_gb_per_gpu: float
    optimizer_gb_per_gpu: float
    optimizer_location: Literal["host", "gpu"]
    train_hbm_gb_per_gpu: float
    host_adam_gb_per_gpu: float
    host_adam_gb_per_node: float
    host_grad_copies_gb_per_gpu: float
    host_gb_per_node: float
    rollout_weights_gb_per_gpu: float | None  # None while the rollout attention TP is not whole
    rollout_static_gb_per_gpu: float

    def to_json(self) -> JsonDict:
        return {
            "params_per_gpu": list(self.params_per_gpu),
            "params_per_gpu_max_b": self.params_per_gpu_max_b,
            "weights_gb_per_gpu": self.weights_gb_per_gpu,
            "grads_gb_per_gpu": self.grads_gb_per_gpu,
            "weights_grads_gb_per_gpu": self.weights_grads_gb_per_gpu,
            "optimizer_gb_per_gpu": self.optimizer_gb_per_gpu,
            "optimizer_location": self.optimizer_location,
            "train_hbm_gb_per_gpu": self.train_hbm_gb_per_gpu,
            "host_adam_gb_per_gpu": self.host_adam_gb_per_gpu,
            "host_adam_gb_per_node": self.host_adam_gb_per_node,
            "host_grad_copies_gb_per_gpu": self.host_grad_copies_gb_per_gpu,
            "host_gb_per_node": self.host_gb_per_node,
            "rollout_weights_gb_per_gpu": self.rollout_weights_gb_per_gpu,
            "rollout_static_gb_per_gpu": self.rollout_static_gb_per_gpu,
        }

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> MemoryFigures:
        weights = data["rollout_weights_gb_per_gpu"]
        return cls(
            tuple(int(p) for p in data["params_per_gpu"]),
            float(data["params_per_gpu_max_b"]),
            float(data["weights_gb_per_gpu"]),
            float(data["grads_gb_per_gpu"]),
            float(data["weights_grads_gb_per_gpu"]),
            float(data["optimizer_gb_per_gpu"]),
            "host" if data["optimizer_location"] == "host" else "gpu",
            float(data["train_hbm_gb_per_gpu"]),
            float(data["host_adam_gb_per_gpu"]),
            float(data["host_adam_gb_per_node"]),
            float(data["host_grad_copies_gb_per_gpu"]),
            float(data["host_gb_per_node"]),
            None if weights is None else float(weights),
            float(data["rollout_static_gb_per_gpu"]),
        )


@dataclass(frozen=True, slots=True)
class LayoutFigures:
    """Everything `layout_figures` computes for one spec."""

    training: TrainingLayout
    rollout: RolloutLayout
    batch: BatchFigures
    memory: MemoryFigures
    model_params_b: float  # the whole model, unsharded, without the MTP block

    def to_json(self) -> JsonDict:
        """Every figure under its flat name, in the order `plan` and the plan view list them."""
        return (
            self.training.to_json()
            | self.rollout.to_json()
            | self.batch.to_json()
            | self.memory.to_json()
            | {"model_params_b": self.model_params_b}
        )

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> LayoutFigures:
        return cls(
            TrainingLayout.from_json(data),
            RolloutLayout.from_json(data),
            BatchFigures.from_json(data),
            MemoryFigures.from_json(data),
            float(data["model_params_b"]),
        )


def _stages(c: LayoutContext, mem: TrainMemory) -> tuple[StageFigures, ...]:
    """Each pipeline stage: its layers by kind and its parameters (billions)."""
    slices = sizing.stage_slices(c.pattern, c.layers, c.pp)
    return tuple(
        StageFigures(
            sl.index,
            sl.first_layer,
            len(sl.pattern),
            sl.mamba,
            sl.moe,
            sl.attention,
            sl.mlp,
            _r3(sp.total / 1e9),
        )
        for sl, sp in zip(slices, mem.stages, strict=True)
    )


def _training(c: LayoutContext, mem: TrainMemory) -> TrainingLayout:
    """The training side's parallel layout."""
    return TrainingLayout(
        world_size=c.W,
        dp=c.dp,
        edp=c.edp,
        etp=c.etp,
        sequence_parallel=c.sp,
        experts_per_rank=c.experts // c.ep if c.experts % c.ep == 0 else None,
        layers_per_stage=c.layers // c.pp,
        stages=_stages(c, mem),
        ep_group_nodes=max(1, c.etp * c.ep // c.gpn),
    )


def _rollout(c: LayoutContext) -> RolloutLayout:
    """The rollout side: its engines and their parallelism."""
    engines, processes = c.rollout_engines()
    return RolloutLayout(
        gpus=c.R,
        engines=engines,
        nodes_per_engine=c.nn,
        engine_processes=processes,
        attn_tp=c.attn_tp,
        moe_tp=c.g // c.rep if c.g % c.rep == 0 else None,
        experts_per_rank=c.experts // c.rep if c.experts % c.rep == 0 else None,
    )


def _batch(c: LayoutContext) -> BatchFigures:
    """Samples per rollout and optimizer steps per rollout."""
    samples = c.rbs * c.n
    gbs = samples // c.steps if c.steps is not None else c.gbs  # miles sets it so (arguments.py:3431-3439)
    return BatchFigures(samples, samples // gbs if gbs else 0)


def _host_memory(c: LayoutContext, adam: float, copies: float) -> dict[str, float]:
    """Host memory of an offloaded optimizer (Adam's state and the fp32 grad copies); none on the GPU path."""
    if not c.offload:
        return dict.fromkeys(
            (
                "host_adam_gb_per_gpu",
                "host_adam_gb_per_node",
                "host_grad_copies_gb_per_gpu",
                "host_gb_per_node",
            ),
            0.0,
        )
    return {
        "host_adam_gb_per_gpu": _r3(adam),
        "host_adam_gb_per_node": _r3(adam * c.gpn),
        "host_grad_copies_gb_per_gpu": _r3(copies),
        "host_gb_per_node": _r3((adam + copies) * c.gpn),
    }


def _memory(c: LayoutContext, mem: TrainMemory) -> MemoryFigures:
    """Memory per GPU and per node, on the GPU and (with the optimizer offloaded) on the host."""
    hbm = c.hbm_need()
    adam = c.optimizer_gb()
    copies = c.optimizer_params() * sizing.FP32 / sizing.GB
    rollout_gb = c.rollout_weights_gb()
    return MemoryFigures(
        params_per_gpu=tuple(round(s.total) for s in mem.stages),
        params_per_gpu_max_b=_r3(mem.worst.total / 1e9),
        weights_gb_per_gpu=_r3(hbm.weights),
        grads_gb_per_gpu=_r3(hbm.grads),
        weights_grads_gb_per_gpu=_r3(hbm.weights + hbm.grads),
        optimizer_gb_per_gpu=_r3(adam),
        optimizer_location="host" if c.offload else "gpu",
        train_hbm_gb_per_gpu=_r3(hbm.total),
        **_host_memory(c, adam, copies),
        rollout_weights_gb_per_gpu=_r3(rollout_gb) if rollout_gb is not None else None,
        rollout_static_gb_per_gpu=_r3(c.mem_fraction * c.hbm),
    )


def layout_figures(spec: RunSpec) -> LayoutFigures:
    """The numbers a layout implies; answers for a layout that breaks rules too (None where not whole)."""
    c = LayoutContext(spec)
    mem = c.memory()
    return LayoutFigures(
        _training(c, mem), _rollout(c), _batch(c), _memory(c, mem), _r3(sizing.total_params(c.m) / 1e9)
    )
