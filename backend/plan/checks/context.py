"""The spec read once into a slotted context: the numbers every layout rule and `layout_figures` share.

Besides the spec's own values it holds the layout they imply (data-parallel sizes, the rollout pool,
nodes per engine, attention TP), the legal-value sets the fixes name, and the memory estimates the M
rules and the derived numbers both read (computed once per context, on first use).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from functools import lru_cache
from math import gcd
from typing import TYPE_CHECKING

from backend.plan import sizing
from backend.plan.catalog import RULES
from backend.plan.checks.values import divisors
from backend.plan.finding import Finding

if TYPE_CHECKING:
    from backend.plan.spec import Batch, ModelFacts, Rollout, RunSpec, Train
    from backend.severity import Severity

KEEP_MTP_ENV = "MILES_NEMOTRONH_KEEP_MTP"  # set in run.extra_env: the checkpoint's MTP head is built


@lru_cache(maxsize=64)
def _counts(pattern: str) -> tuple[int, int, int, int]:
    return pattern.count("M"), pattern.count("E"), pattern.count("*"), pattern.count("-")


@dataclass(frozen=True, slots=True)
class TrainMemory:
    """Parameters per GPU of each pipeline stage, and the data-parallel sizes the optimizer shards over."""

    stages: tuple[sizing.StageParams, ...]
    dp: float
    edp: float

    @property
    def worst(self) -> sizing.StageParams:
        return max(self.stages, key=lambda s: s.total)

    def sharded(self, s: sizing.StageParams, cp: int) -> float:
        """Parameters whose optimizer state one GPU owns (distributed optimizer)."""
        return s.expert / self.edp + s.dense / (self.dp * cp)

    def max_sharded(self, cp: int) -> float:
        return max(self.sharded(s, cp) for s in self.stages)


@dataclass(frozen=True, slots=True)
class HbmNeed:
    """GB per GPU on the fullest stage: bf16 weights, fp32 grads, Adam state (0 when offloaded), total."""

    weights: float
    grads: float
    optimizer: float

    @property
    def total(self) -> float:
        return self.weights + self.grads + self.optimizer


class LayoutContext:
    """The spec read once into plain attributes, plus the layout numbers every rule shares.

    Slotted and filled in one pass: the plan form re-checks on every keystroke, and attribute reads of a
    slotted object are the cheapest way for fifty checks to see the same numbers.
    """

    __slots__ = (
        "R",
        "W",
        "attn_tp",
        "bias",
        "cdmc",
        "colocate",
        "cp",
        "dense_grid",
        "dispatcher",
        "distributed_optimizer",
        "dp",
        "dpa",
        "dyn",
        "edp",
        "enable_mtp_flag",
        "ep",
        "etp",
        "etp_raw",
        "expert_grid",
        "experts",
        "extra_args",
        "ffn",
        "first",
        "g",
        "gbs",
        "gpn",
        "groups",
        "has_attn",
        "has_mamba",
        "has_mlp",
        "has_moe",
        "hbm",
        "heads",
        "host_mem",
        "keep_mtp",
        "kv",
        "last",
        "latent",
        "layers",
        "m",
        "m_groups",
        "m_heads",
        "max_tokens",
        "mbs",
        "mbs_raw",
        "mem_fraction",
        "moe_ffn",
        "mtp_layers",
        "mtp_pattern",
        "n",
        "n_group",
        "nn",
        "nodes",
        "num_gpus",
        "offload",
        "osb",
        "out",
        "overlap",
        "overlap_p2p",
        "pattern",
        "pos_emb",
        "pp",
        "r_backend",
        "rbs",
        "rdp",
        "rec_gran",
        "rec_method",
        "rec_n",
        "rep",
        "shared",
        "sp",
        "sp_raw",
        "sp_req",
        "spec",
        "steps",
        "topk_group",
        "tp",
        "train_memory",
        "uneven_args",
        "vpp",
    )

    def __init__(self, spec: RunSpec) -> None:
        self.spec = spec
        self.out: list[Finding] = []
        c = spec.cluster
        self.m = spec.model
        self.nodes, self.gpn = c.nodes, c.gpus_per_node
        self.W = c.nodes * c.gpus_per_node
        self.hbm, self.host_mem = c.gpu_memory_gb, c.host_memory_gb
        self._read_train(spec.train)
        self._read_model(spec.model)
        self._read_run(spec)
        self._read_rollout(spec.rollout, spec.batch)
        self._derive_layout()
        self.train_memory: TrainMemory | None = None  # computed on first use (memory rules, layout_figures)

    def _read_train(self, t: Train) -> None:
        """The training parallelism and schedule, with Megatron's defaults applied."""
        self.tp, self.pp, self.cp, self.ep = t.tp, t.pp, t.cp, t.ep
        self.etp_raw = t.etp
        self.etp = t.etp if t.etp is not None else t.tp  # Megatron's validate_args default
        self.vpp = t.vpp if t.vpp is not None and t.vpp > 1 else None  # validate_args: 1 ⇒ no interleaving
        self.sp_raw = t.sequence_parallel
        self.sp_req = t.tp > 1 if t.sequence_parallel is None else t.sequence_parallel
        self.sp = self.sp_req and t.tp > 1
        self.first, self.last = t.decoder_first_pipeline_num_layers, t.decoder_last_pipeline_num_layers
        # validate_args runs its even-split check (C2) only without these flags
        self.uneven_args = self.first is not None or self.last is not None or t.vpp is not None
        self.rec_gran, self.rec_method, self.rec_n = (
            t.recompute_granularity,
            t.recompute_method,
            t.recompute_num_layers,
        )
        self.mbs_raw, self.dyn = t.micro_batch_size, t.use_dynamic_batch_size
        self.mbs = 1 if self.dyn else self.mbs_raw  # H15: not passed under dynamic batching, miles uses 1
        self.overlap, self.dispatcher = t.moe_shared_expert_overlap, t.moe_token_dispatcher

    def _read_model(self, m: ModelFacts) -> None:
        """The architecture: layer kinds of the hybrid pattern, widths, experts, MTP."""
        self.layers, self.pattern = m.num_layers, m.hybrid_pattern
        n_m, n_e, n_a, n_d = _counts(m.hybrid_pattern)
        self.has_mamba, self.has_moe, self.has_attn, self.has_mlp = n_m > 0, n_e > 0, n_a > 0, n_d > 0
        self.heads, self.groups, self.kv = m.num_attention_heads, m.num_query_groups, m.kv_channels
        self.ffn, self.moe_ffn, self.shared = (
            m.ffn_hidden_size,
            m.moe_ffn_hidden_size,
            m.shared_expert_intermediate_size,
        )
        self.experts, self.latent = m.num_experts, m.moe_latent_size
        self.n_group, self.topk_group = m.n_group, m.topk_group
        self.m_heads, self.m_groups = m.mamba_num_heads, m.mamba_num_groups
        self.pos_emb, self.bias = m.position_embedding_type, m.add_bias_linear
        self.mtp_layers, self.mtp_pattern = m.mtp_num_layers, m.mtp_pattern

    def _read_run(self, spec: RunSpec) -> None:
        """What the run's environment and extra args switch, and the optimizer."""
        env = spec.run.extra_env
        self.keep_mtp = bool(env.get(KEEP_MTP_ENV))
        self.cdmc = env.get("CUDA_DEVICE_MAX_CONNECTIONS")
        self.extra_args = spec.run.extra_args
        flags = spec.run.extra_args.split()
        self.enable_mtp_flag = "--enable-mtp-training" in flags
        self.overlap_p2p = "--no-overlap-p2p-communication" not in flags
        self.offload = spec.optimizer.cpu_offload
        # the distributed optimizer only for Adam (miles backends/megatron_utils/arguments.py:15)
        self.distributed_optimizer = spec.optimizer.name == "adam"

    def _read_rollout(self, r: Rollout, b: Batch) -> None:
        """The rollout engines and the batch sizes."""
        self.g, self.rep, self.rdp, self.dpa = r.gpus_per_engine, r.ep, r.dp, r.enable_dp_attention
        self.mem_fraction, self.num_gpus, self.colocate = r.mem_fraction, r.num_gpus, r.colocate
        self.r_backend = r.sglang_attention_backend
        self.gbs, self.rbs, self.n = b.global_batch_size, b.rollout_batch_size, b.n_samples_per_prompt
        self.steps, self.osb, self.max_tokens = (
            b.num_steps_per_rollout,
            b.over_sampling_batch_size,
            b.max_tokens_per_gpu,
        )

    def _derive_layout(self) -> None:
        """The layout the parallel degrees imply (None where it is not whole)."""
        self.dense_grid = self.tp * self.pp * self.cp
        self.dp = self.W // self.dense_grid if self.W % self.dense_grid == 0 else None
        self.expert_grid = self.etp * self.ep * self.pp
        self.edp = self.W // self.expert_grid if self.W % self.expert_grid == 0 else None
        self.R = self.W if self.colocate else self.num_gpus  # H3: colocate forces all actor GPUs
        self.nn = max(1, self.g // self.gpn)  # H4: nodes per engine (--num-gpus-per-node is passed)
        if self.dpa and self.rdp > 1:
            self.attn_tp = self.g // self.rdp if self.g % self.rdp == 0 else None
        else:
            self.attn_tp = self.g

    def add(
        self,
        rule: str,
        message: str,
        fix: str,
        fields: tuple[str, ...] | None = None,
        severity: Severity | None = None,
    ) -> None:
        meta = RULES[rule]
        self.out.append(Finding(rule, severity or meta.severities[0], fields or meta.fields, message, fix))

    # legal-value sets used by fixes -------------------------------------------------------------
    def tp_ok_model(self, v: int) -> bool:
        """TP constraints that come from the model alone (B1, B2, D1, D2)."""
        return (
            self.heads % v == 0
            and (self.groups % v == 0 or v % self.groups == 0)
            and (not self.has_mamba or (self.m_heads % v == 0 and self.m_groups % v == 0))
        )

    def legal_tp(self) -> list[int]:
        """TP values the model allows (B1, B2, D1, D2), those the grid also fits (A1) when there are some:
        a fix never offers a TP that another finding rules out."""
        return self.grid_tps() or [v for v in divisors(self.heads) if self.tp_ok_model(v)]

    def grid_tps(self) -> list[int]:
        """TP values the model allows (B1: heads % tp == 0, B2, D1, D2) that also fit the grid (A1)."""
        return [
            v for v in divisors(self.heads) if self.tp_ok_model(v) and self.W % (v * self.pp * self.cp) == 0
        ]

    def legal_pp(self) -> list[int]:
        fits = [
            p
            for p in divisors(self.layers)
            if self.W % (self.tp * p * self.cp) == 0 and self.W % (self.etp * self.ep * p) == 0
        ]
        return fits or list(divisors(self.layers))

    def legal_ep(self) -> list[int]:
        fits = [e for e in divisors(self.experts) if self.W % (self.etp * e * self.pp) == 0]
        return fits or list(divisors(self.experts))

    def attn_tp_ok(self, a: int) -> bool:
        """G9 + G10 for one attention-TP degree."""
        mamba = not self.has_mamba or (
            self.m_heads % a == 0 and (self.m_groups % a == 0 or self.m_groups == 1)
        )
        if self.groups >= a:
            kv_ok = self.groups % a == 0
        else:
            kv_ok = a % self.groups == 0
        attn = not self.has_attn or (self.heads % a == 0 and kv_ok)
        return mamba and attn

    def legal_rollout_dp(self) -> list[int]:
        """dp values whose attn_tp = g/dp passes G9/G10 (dp > 1 only with dp-attention)."""
        return [d for d in divisors(self.g) if self.attn_tp_ok(self.g // d) and (d == 1 or self.dpa)]

    def engine_sizes(self, pool: int) -> list[int]:
        """Engine sizes that tile a pool of GPUs on whole nodes (G4/G12/H4)."""
        return [d for d in divisors(pool) if (d <= self.gpn and self.gpn % d == 0) or d % self.gpn == 0]

    def nodes_fitting(self, grid: int) -> list[int]:
        step = grid // gcd(grid, self.gpn)
        base = max(step, (self.nodes // step) * step)
        return sorted({base, base + step} - {0})

    # memory estimates (M rules and layout_figures) --------------------------------------------------------
    def memory(self) -> TrainMemory:
        if self.train_memory is None:
            stages = sizing.train_stage_params(
                self.m, self.tp, self.pp, self.ep, self.etp, self.keep_mtp and self.mtp_layers > 0
            )
            self.train_memory = TrainMemory(
                stages, max(1.0, self.W / self.dense_grid), max(1.0, self.W / self.expert_grid)
            )
        return self.train_memory

    def optimizer_params(self) -> float:
        """Parameters whose optimizer state one GPU holds: its DP shard with the distributed optimizer,
        every parameter it holds without it (miles turns it off for anything but Adam)."""
        mem = self.memory()
        return mem.max_sharded(self.cp) if self.distributed_optimizer else mem.worst.total

    def optimizer_gb(self) -> float:
        per_param = sizing.ADAM_BYTES if self.spec.optimizer.name == "adam" else sizing.SGD_BYTES
        return self.optimizer_params() * per_param / sizing.GB

    def hbm_need(self) -> HbmNeed:
        p = self.memory().worst.total
        optimizer = 0.0 if self.offload else self.optimizer_gb()
        return HbmNeed(p * sizing.BF16 / sizing.GB, p * sizing.FP32 / sizing.GB, optimizer)

    def rollout_engines(self) -> tuple[int | None, int | None]:
        """(engines, engine processes) as miles counts them: one process per min(engine, node) GPUs
        (rollout_server.py:48-49), an engine for every nodes_per_engine processes, the last possibly
        partial (server_group.py:51,56)."""
        if self.R is None:
            return None, None
        processes = self.R // min(self.g, self.gpn)
        return -(-processes // self.nn), processes

    def rollout_weights_gb(self) -> float | None:
        """Weights one rollout GPU holds (None while the attention TP is not whole)."""
        if self.attn_tp is None:
            return None
        return sizing.rollout_params_per_gpu(self.m, self.g, self.attn_tp) * sizing.BF16 / sizing.GB

    def world(self) -> str:
        return f"{self.W} GPUs ({self.nodes} nodes × {self.gpn})"


Check = Callable[[LayoutContext], None]
"""One rule's check: reads the context, adds its findings to it."""
