"""Parameter counts and memory per GPU/node of a Nemotron-H layout.

Why a module of its own: the rule engine (M1–M3) and the plan view both need the same numbers, and they
must reproduce the documented layouts exactly (5.550 B params per GPU on stages 0 and 3 of the full model at
TP8 PP4 EP32; 5.803 B for the 4-layer slice at TP1 PP1 EP8). Formulas, all from the model facts of the spec:

* Mamba2 layer: in_proj h·(2·d_in + 2·G·N + H), conv1d (d_in + 2·G·N)·(k + 1), A_log/D/dt_bias 3·H,
  gated norm d_in, out_proj d_in·h, pre-norm h. TP splits everything but the pre-norm.
* attention (GQA): QKV h·(heads + 2·groups)·kv, out (heads·kv)·h, norm h. TP splits all but the norm.
* latent MoE: router E·h and latent fc1/fc2 2·h·latent are *replicated* on every TP rank; shared expert
  2·h·shared (TP-split); routed experts 2·latent·ffn each (relu², no gate), E/EP whole experts per rank,
  split by ETP. Routed experts are the "expert" parameters the distributed optimizer shards over EDP;
  everything else is "dense" and shards over DP·CP.
* embedding/output (untied): padded vocab/TP · h on the first/last stage; final norm h on the last.
* pipeline split: what miles' Megatron fork does (`mamba_block.py:121-131`): stage r gets
  pattern[r·⌊L/PP⌋ : (r+1)·⌊L/PP⌋] — first/last-stage sizes are ignored.

Rollout (an estimate, not checked against SGLang's sharding code): routed experts over the whole engine,
Mamba/attention/embeddings and the shared expert over attn_tp, router + latent projections replicated.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import lru_cache
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from backend.plan.spec import ModelFacts

GB = 1e9
BF16, FP32 = 2, 4
ADAM_BYTES = 12  # fp32 master + Adam m + v per parameter
SGD_BYTES = 8  # fp32 master + momentum per parameter


@dataclass(frozen=True, slots=True)
class StageSlice:
    """One pipeline stage of the hybrid pattern."""

    index: int
    first_layer: int
    pattern: str
    mamba: int
    moe: int
    attention: int
    mlp: int

    def to_json(self) -> dict[str, Any]:
        return {
            "stage": self.index,
            "first_layer": self.first_layer,
            "layers": len(self.pattern),
            "M": self.mamba,
            "E": self.moe,
            "*": self.attention,
            "-": self.mlp,
        }


@lru_cache(maxsize=256)
def stage_slices(pattern: str, num_layers: int, pp: int) -> tuple[StageSlice, ...]:
    """The fork's even split (floor); layers past PP·⌊L/PP⌋ are on no stage."""
    per = num_layers // pp
    out = []
    for r in range(pp):
        part = pattern[r * per : (r + 1) * per]
        out.append(
            StageSlice(r, r * per, part, part.count("M"), part.count("E"), part.count("*"), part.count("-"))
        )
    return tuple(out)


@dataclass(frozen=True, slots=True)
class LayerParams:
    """Unsharded parameter counts per block (and the parts that shard differently)."""

    mamba: int
    mamba_norm: int
    attention: int
    attention_norm: int
    mlp: int
    router: int
    latent: int
    expert: int  # one routed expert
    shared: int
    moe_norm: int
    embedding: int  # one of embedding / output layer, unpadded
    mtp_extra: int  # eh_proj + enorm/hnorm/final norm of one MTP layer

    @property
    def moe(self) -> int:
        return self.router + self.latent + self.shared + self.moe_norm


def layer_params(model: ModelFacts) -> LayerParams:
    """The model's per-block counts; cached on its dimensions, since every check and layout_figures asks
    for them."""
    return _layer_params(
        model.hidden_size,
        model.num_attention_heads,
        model.num_query_groups,
        model.kv_channels,
        model.mamba_num_heads,
        model.mamba_num_groups,
        model.mamba_state_dim,
        model.mamba_head_dim,
        model.mamba_conv_kernel,
        model.ffn_hidden_size,
        model.num_experts,
        model.moe_latent_size,
        model.moe_ffn_hidden_size,
        model.shared_expert_intermediate_size,
        model.vocab_size,
    )


@lru_cache(maxsize=64)
def _layer_params(
    h: int,
    heads: int,
    groups: int,
    kv: int,
    m_heads: int,
    m_groups: int,
    m_state: int,
    m_head_dim: int,
    conv_kernel: int,
    ffn: int,
    experts: int,
    latent: int,
    moe_ffn: int,
    shared: int,
    vocab: int,
) -> LayerParams:
    d_in = m_heads * m_head_dim
    xbc = d_in + 2 * m_groups * m_state
    mamba = (
        h * (2 * d_in + 2 * m_groups * m_state + m_heads)
        + xbc * (conv_kernel + 1)
        + 3 * m_heads
        + d_in
        + d_in * h
        + h
    )
    attention = h * (heads + 2 * groups) * kv + heads * kv * h + h
    width = latent if latent else h
    return LayerParams(
        mamba=mamba,
        mamba_norm=h,
        attention=attention,
        attention_norm=h,
        mlp=2 * h * ffn + h,
        router=experts * h,
        latent=2 * h * latent if latent else 0,
        expert=2 * width * moe_ffn,
        shared=2 * h * shared,
        moe_norm=h,
        embedding=vocab * h,
        mtp_extra=2 * h * h + 3 * h,
    )


def padded_vocab(model: ModelFacts, tp: int) -> int:
    mult = model.make_vocab_size_divisible_by * tp
    return -(-model.vocab_size // mult) * mult


def total_params(model: ModelFacts) -> int:
    """Whole model, unsharded, without the MTP block (miles does not build it by default)."""
    lp = layer_params(model)
    p = model.hybrid_pattern
    emb = lp.embedding * (2 if model.untie_embeddings else 1)
    return (
        p.count("M") * lp.mamba
        + p.count("*") * lp.attention
        + p.count("-") * lp.mlp
        + p.count("E") * (lp.moe + model.num_experts * lp.expert)
        + emb
        + model.hidden_size
    )


@dataclass(frozen=True, slots=True)
class StageParams:
    """Parameters one GPU of a stage holds: routed-expert part and dense part."""

    expert: float
    dense: float

    @property
    def total(self) -> float:
        return self.expert + self.dense


def train_stage_params(
    model: ModelFacts, tp: int, pp: int, ep: int, etp: int, keep_mtp: bool
) -> tuple[StageParams, ...]:
    """Per-GPU parameters of each pipeline stage, sharded as above."""
    lp = layer_params(model)
    h = model.hidden_size
    mamba = (lp.mamba - lp.mamba_norm) / tp + lp.mamba_norm
    attention = (lp.attention - lp.attention_norm) / tp + lp.attention_norm
    mlp = (lp.mlp - h) / tp + h
    moe_dense = lp.router + lp.latent + lp.shared / tp + lp.moe_norm
    moe_expert = model.num_experts / ep * lp.expert / etp
    vocab_part = padded_vocab(model, tp) / tp * h
    out = []
    slices = stage_slices(model.hybrid_pattern, model.num_layers, pp)
    for s in slices:
        dense = s.mamba * mamba + s.attention * attention + s.mlp * mlp + s.moe * moe_dense
        expert = s.moe * moe_expert
        if s.index == 0:
            dense += vocab_part
        if s.index == pp - 1:
            if model.untie_embeddings or pp > 1:
                dense += vocab_part  # untied output layer, or the tied copy Megatron keeps on the last stage
            dense += h  # final norm
            if keep_mtp and model.mtp_num_layers:
                mtp = model.mtp_pattern
                layers = model.mtp_num_layers
                dense += layers * (
                    mtp.count("*") * attention
                    + mtp.count("M") * mamba
                    + mtp.count("E") * moe_dense
                    + mtp.count("-") * mlp
                    + (lp.mtp_extra - 3 * h) / tp
                    + 3 * h
                )
                expert += layers * mtp.count("E") * moe_expert
        out.append(StageParams(expert, dense))
    return tuple(out)


def rollout_params_per_gpu(model: ModelFacts, gpus_per_engine: int, attn_tp: int) -> float:
    """Estimated weights one SGLang GPU holds (routed experts over the engine, the rest over attn_tp)."""
    lp = layer_params(model)
    p = model.hybrid_pattern
    n_moe = p.count("E")
    emb = lp.embedding * (2 if model.untie_embeddings else 1)
    split = (
        p.count("M") * lp.mamba
        + p.count("*") * lp.attention
        + p.count("-") * lp.mlp
        + emb
        + n_moe * lp.shared
    )
    return (
        n_moe * model.num_experts * lp.expert / gpus_per_engine
        + split / attn_tp
        + n_moe * (lp.router + lp.latent + lp.moe_norm)
    )
