"""Write `rollout_data/<N>.pt` as miles' `save_debug_rollout_data` does, without torch or miles.

Why: the simulated trainer (`--dump-details`) and the tests need rollout files in exactly miles' format
(reference/miles-rollout-data.md §2-3): `torch.save(dict(rollout_id=N, metadata={}, samples=[Sample.to_dict()
...]))` straight to the final path. `sample_record` is one `Sample.to_dict()` with every key miles writes (at
31f1ca9), unset ones as miles' defaults; backend.demo.torch_zip lays out the zip as torch 2.13 does.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from backend.demo.torch_zip import write_torch_zip


def sample_record(group_index: int, index: int, **fields: Any) -> dict[str, Any]:
    """One sample as `Sample.to_dict()` writes it; `fields` override miles' defaults (`tokens`, `response`,
    `reward`, `status` ...)."""
    record: dict[str, Any] = {
        "group_index": group_index,
        "index": index,
        "rollout_id": None,
        "prompt": "",
        "tokens": [],
        "multimodal_inputs": None,
        "multimodal_train_inputs": None,
        "response": "",
        "response_length": 0,
        "label": None,
        "reward": None,
        "loss_mask": None,
        "weight_versions": [],
        "rollout_log_probs": None,
        "rollout_routed_experts": None,
        "rollout_indexer_topk": None,
        "remove_sample": False,
        "teacher_log_probs": None,
        "opd_reverse_kl": None,
        "status": "pending",
        "metadata": {},
        "generate_function_path": None,
        "train_metadata": None,
        "adapter": None,
        "reward_spec": None,
        "routing_key": None,
        "non_generation_time": 0.0,
        "spec_info": {
            "spec_accept_token_num": 0,
            "spec_draft_token_num": 0,
            "spec_verify_ct": 0,
            "completion_token_num": 0,
        },
        "prefix_cache_info": {"cached_tokens": 0, "total_prompt_tokens": 0},
    }
    record.update(fields)
    return record


def rollout_path(dump_dir: str | os.PathLike[str], rollout_id: int, *, evaluation: bool = False) -> Path:
    """`{dump}/rollout_data/{rollout_id}.pt` (miles' template `--dump-details` sets), `eval_` for evals."""
    return Path(dump_dir) / "rollout_data" / f"{'eval_' if evaluation else ''}{rollout_id}.pt"


def write_rollout(
    dump_dir: str | os.PathLike[str],
    rollout_id: int,
    samples: Sequence[dict[str, Any]],
    *,
    metadata: dict[str, Any] | None = None,
    evaluation: bool = False,
    partial: float | None = None,
) -> Path:
    """Save one rollout's samples where and how miles does (in place, no rename); `partial` writes only that
    fraction of the bytes (the half-written file a reader can catch)."""
    path = rollout_path(dump_dir, rollout_id, evaluation=evaluation)
    path.parent.mkdir(parents=True, exist_ok=True)
    obj = {"rollout_id": rollout_id, "metadata": metadata or {}, "samples": list(samples)}
    return write_torch_zip(path, obj, partial=partial)
