"""The real-library checks: each builds what the real stack would build from the spec and lets the
library raise. Megatron's TransformerConfig, initialize_model_parallel over the whole world, Megatron's own
parse_args + validate_args on the argv the console would submit, the microbatch calculator, the hybrid
pipeline split `select_pipeline_segment`, and SGLang's ServerArgs for one rollout engine.

The libraries are imported inside each check: nothing here needs them until `--deep` runs.
"""

from __future__ import annotations

import dataclasses
import json
import os
import sys
import tempfile
from collections.abc import Callable
from typing import Any

from backend.plan.checks.context import KEEP_MTP_ENV
from backend.plan.deep.patches import fake_world, hopper_gpu, reused_parser
from backend.plan.deep.rule_map import effective_vpp
from backend.plan.spec import RunSpec
from backend.plan.submission import build_submission


def _keep_mtp(spec: RunSpec) -> bool:
    return bool(spec.run.extra_env.get(KEEP_MTP_ENV))


def check_transformer_config(spec: RunSpec) -> None:
    # only in miles' image: imported when --deep runs
    import torch
    from megatron.core.transformer.transformer_config import TransformerConfig

    m, t = spec.model, spec.train
    kwargs: dict[str, Any] = dict(
        num_layers=m.num_layers,
        hidden_size=m.hidden_size,
        num_attention_heads=m.num_attention_heads,
        num_query_groups=m.num_query_groups,
        kv_channels=m.kv_channels,
        ffn_hidden_size=m.ffn_hidden_size,
        tensor_model_parallel_size=t.tp,
        pipeline_model_parallel_size=t.pp,
        context_parallel_size=t.cp,
        expert_model_parallel_size=t.ep,
        expert_tensor_parallel_size=t.etp,
        virtual_pipeline_model_parallel_size=effective_vpp(spec),
        # miles runs validate_args first, which turns SP off at TP=1 (C5) before any config sees it.
        sequence_parallel=spec.sequence_parallel and t.tp > 1,
        pipeline_dtype=torch.bfloat16 if t.pp > 1 else None,
        params_dtype=torch.bfloat16,
        bf16=True,
        add_bias_linear=m.add_bias_linear,
        normalization=m.normalization,
        num_moe_experts=m.num_experts,
        moe_router_topk=m.moe_router_topk,
        moe_ffn_hidden_size=m.moe_ffn_hidden_size,
        moe_shared_expert_intermediate_size=m.shared_expert_intermediate_size or None,
        moe_latent_size=m.moe_latent_size,
        moe_router_score_function="sigmoid",
        moe_router_enable_expert_bias=True,
        moe_router_topk_scaling_factor=m.routed_scaling_factor,
        moe_router_num_groups=m.n_group,
        moe_router_group_topk=m.topk_group,
        moe_shared_expert_overlap=t.moe_shared_expert_overlap,
        moe_token_dispatcher_type=t.moe_token_dispatcher,
        recompute_granularity=t.recompute_granularity,
        recompute_method=t.recompute_method,
        recompute_num_layers=t.recompute_num_layers,
        num_layers_in_first_pipeline_stage=t.decoder_first_pipeline_num_layers,
        num_layers_in_last_pipeline_stage=t.decoder_last_pipeline_num_layers,
        mamba_num_heads=m.mamba_num_heads,
        mamba_head_dim=m.mamba_head_dim,
        mamba_num_groups=m.mamba_num_groups,
        mamba_state_dim=m.mamba_state_dim,
        mtp_num_layers=(m.mtp_num_layers or None) if _keep_mtp(spec) else None,
    )
    known = {f.name for f in dataclasses.fields(TransformerConfig)}
    TransformerConfig(**{k: v for k, v in kwargs.items() if k in known})  # older cores lack some fields


def check_initialize_model_parallel(spec: RunSpec) -> None:
    # only in miles' image: imported when --deep runs
    from megatron.core import parallel_state

    t = spec.train
    with fake_world(spec.cluster.total_gpus):
        try:
            parallel_state.initialize_model_parallel(
                tensor_model_parallel_size=t.tp,
                pipeline_model_parallel_size=t.pp,
                virtual_pipeline_model_parallel_size=effective_vpp(spec),
                context_parallel_size=t.cp,
                expert_model_parallel_size=t.ep,
                expert_tensor_parallel_size=t.etp,
                create_gloo_process_groups=False,
            )
        finally:
            parallel_state.destroy_model_parallel()


def megatron_argv(spec: RunSpec) -> list[str]:
    """The argv the console submits (miles' flags included: Megatron's parser ignores what it lacks)."""
    argv = build_submission(spec, run_id="000000-000000-000", nvlink=False, with_shim=False).argv
    if argv and argv[0].endswith("python3"):
        argv = argv[2:]  # "python3 /path/train.py"
    extra = []
    if "--seq-length" not in argv:
        extra += ["--seq-length", "4096", "--max-position-embeddings", "4096"]
    if "--micro-batch-size" not in argv:
        extra += ["--micro-batch-size", str(micro_batch(spec))]
    if "--bf16" not in argv:
        extra += ["--bf16"]
    return argv + extra


def micro_batch(spec: RunSpec) -> int:
    """What Megatron gets: miles' default 1 under dynamic batch size (no flag passed), else the spec's."""
    return 1 if spec.train.use_dynamic_batch_size else spec.train.micro_batch_size


def check_validate_args(spec: RunSpec) -> None:
    # only in miles' image: imported when --deep runs
    from megatron.training import arguments

    env = {"CUDA_DEVICE_MAX_CONNECTIONS": spec.run.extra_env.get("CUDA_DEVICE_MAX_CONNECTIONS", "1")}
    saved_argv = sys.argv
    sys.argv = ["train.py", *megatron_argv(spec)]
    try:
        with hopper_gpu(env), reused_parser(arguments):
            args = arguments.parse_args(ignore_unknown_args=True)
            args.world_size = spec.cluster.total_gpus
            args.rank = 0
            arguments.validate_args(args, {})
    finally:
        sys.argv = saved_argv


def check_microbatches(spec: RunSpec) -> None:
    # only in miles' image: imported when --deep runs
    from megatron.core import num_microbatches_calculator as nmc

    t = spec.train
    dp = spec.cluster.total_gpus // (t.tp * t.pp * t.cp)
    if dp == 0 or spec.cluster.total_gpus % (t.tp * t.pp * t.cp):
        return  # A1 decides this spec; the calculator needs a whole DP
    nmc.init_num_microbatches_calculator(0, None, spec.batch.global_batch_size, micro_batch(spec), dp, False)
    nmc.destroy_num_microbatches_calculator()


def check_select_pipeline_segment(spec: RunSpec) -> None:
    # only in miles' image: imported when --deep runs
    from megatron.core import parallel_state
    from megatron.core.models.hybrid.hybrid_layer_allocation import select_pipeline_segment

    t = spec.train
    with fake_world(t.pp):
        parallel_state.initialize_model_parallel(
            pipeline_model_parallel_size=t.pp, create_gloo_process_groups=False
        )
        try:
            select_pipeline_segment(
                spec.model.hybrid_pattern,
                parallel_state.get_pipeline_model_parallel_group() if t.pp > 1 else None,
                0 if effective_vpp(spec) else None,
                t.decoder_first_pipeline_num_layers,
                t.decoder_last_pipeline_num_layers,
                tp_group=parallel_state.get_tensor_model_parallel_group(),
                dp_cp_group=parallel_state.get_data_parallel_group(with_context_parallel=True),
            )
        finally:
            parallel_state.destroy_model_parallel()


def hf_config(spec: RunSpec) -> dict[str, Any]:
    """A synthetic NemotronH config.json for the spec's model (what SGLang and the Bridge read)."""
    m = spec.model
    return {
        "architectures": ["NemotronHForCausalLM"],
        "model_type": "nemotron_h",
        "hidden_size": m.hidden_size,
        "num_hidden_layers": m.num_layers,
        "hybrid_override_pattern": m.hybrid_pattern,
        "num_attention_heads": m.num_attention_heads,
        "num_key_value_heads": m.num_query_groups,
        "head_dim": m.kv_channels,
        "intermediate_size": m.ffn_hidden_size,
        "moe_intermediate_size": m.moe_ffn_hidden_size,
        "moe_shared_expert_intermediate_size": m.shared_expert_intermediate_size,
        "n_shared_experts": 1 if m.shared_expert_intermediate_size else 0,
        "n_routed_experts": m.num_experts,
        "num_experts_per_tok": m.moe_router_topk,
        "moe_latent_size": m.moe_latent_size,
        "routed_scaling_factor": m.routed_scaling_factor,
        "n_group": m.n_group,
        "topk_group": m.topk_group,
        "mamba_num_heads": m.mamba_num_heads,
        "mamba_head_dim": m.mamba_head_dim,
        "n_groups": m.mamba_num_groups,
        "ssm_state_size": m.mamba_state_dim,
        "conv_kernel": m.mamba_conv_kernel,
        "vocab_size": m.vocab_size,
        "tie_word_embeddings": not m.untie_embeddings,
        "max_position_embeddings": 4096,
        "num_nextn_predict_layers": m.mtp_num_layers,
        "mtp_hybrid_override_pattern": m.mtp_pattern,
        "torch_dtype": "bfloat16",
    }


def check_server_args(spec: RunSpec) -> None:
    # only in miles' image: imported when --deep runs
    from sglang.srt.server_args import ServerArgs

    r, c = spec.rollout, spec.cluster
    with tempfile.TemporaryDirectory(prefix="ultra-console-deep-") as model_dir:
        with open(os.path.join(model_dir, "config.json"), "w", encoding="utf-8") as fh:
            json.dump(hf_config(spec), fh)
        kwargs: dict[str, Any] = dict(
            model_path=model_dir,
            skip_tokenizer_init=True,
            tp_size=r.gpus_per_engine,
            ep_size=r.ep,
            dp_size=r.dp,
            enable_dp_attention=r.enable_dp_attention,
            nnodes=max(1, -(-r.gpus_per_engine // c.gpus_per_node)),
            node_rank=0,
            mem_fraction_static=r.mem_fraction,
            trust_remote_code=False,
            # On CPU, ServerArgs resolves only with these (else 'extra_buffer requires platform support for
            # Mamba cache state snapshots'); the layout checks they reach are the ones an H200 engine runs.
            device="cpu",
            mamba_radix_cache_strategy="no_buffer",
            disable_overlap_schedule=True,
            page_size=1,
        )
        if r.sglang_attention_backend:
            kwargs["attention_backend"] = r.sglang_attention_backend
        args = ServerArgs(**kwargs)
        args.resolve_once()
        args.check_server_args()


# Every real-library check by name, in the order they run.
CHECKS: tuple[tuple[str, Callable[[RunSpec], None]], ...] = (
    ("transformer_config", check_transformer_config),
    ("initialize_model_parallel", check_initialize_model_parallel),
    ("validate_args", check_validate_args),
    ("microbatches", check_microbatches),
    ("select_pipeline_segment", check_select_pipeline_segment),
    ("server_args", check_server_args),
)
