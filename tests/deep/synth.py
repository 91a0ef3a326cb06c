"""A small synthetic NemotronH checkpoint config (no weights): Ultra's routing on a toy size."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any


def small_config(**changes: Any) -> dict[str, Any]:
    cfg: dict[str, Any] = {
        "architectures": ["NemotronHForCausalLM"],
        "model_type": "nemotron_h",
        "hidden_size": 256,
        "num_hidden_layers": 4,
        "hybrid_override_pattern": "ME*E",
        "num_attention_heads": 8,
        "num_key_value_heads": 2,
        "head_dim": 32,
        "intermediate_size": 128,
        "moe_intermediate_size": 128,
        "n_routed_experts": 16,
        "num_experts_per_tok": 4,
        "n_shared_experts": 1,
        "moe_shared_expert_intermediate_size": 256,
        "moe_latent_size": 64,
        "routed_scaling_factor": 5.0,
        "n_group": 1,
        "topk_group": 1,
        "mamba_num_heads": 16,
        "mamba_head_dim": 32,
        "n_groups": 8,
        "ssm_state_size": 16,
        "vocab_size": 1024,
        "num_nextn_predict_layers": 1,
        "mtp_hybrid_override_pattern": "*E",
        "tie_word_embeddings": False,
        "torch_dtype": "bfloat16",
    }
    cfg.update(changes)
    return cfg


def write_checkpoint(directory: Path, **changes: Any) -> Path:
    directory.mkdir(parents=True, exist_ok=True)
    (directory / "config.json").write_text(json.dumps(small_config(**changes)))
    return directory
