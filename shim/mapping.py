"""HF `config.json` of a NemotronH checkpoint -> the Megatron provider fields the shim must produce.

Pure data in, data out: no torch, no megatron. The same function feeds the bridge registration
(shim.bridge), the per-actor log line, `ultra-console shim-check` and the console's alerts, so
"what the provider must get" has exactly one definition.

Why each field: without them Megatron silently runs the routed experts 1.0x instead of
`routed_scaling_factor` (5.0 for Ultra) -- a train/rollout drift no error reports; the latent MoE
needs shared-expert overlap off; miles does not train the MTP head unless MILES_NEMOTRONH_KEEP_MTP.
"""

from __future__ import annotations

import json
import os
from collections.abc import Mapping
from pathlib import Path
from typing import TypeAlias

KEEP_MTP_ENV = "MILES_NEMOTRONH_KEEP_MTP"
ARCHITECTURE = "NemotronHForCausalLM"
MODEL_TYPE = "nemotron_h"

# HF layer-type words (newer config.json) -> hybrid pattern symbols (older config.json).
LAYER_SYMBOLS: dict[str, str] = {"mamba": "M", "moe": "E", "attention": "*", "mlp": "-"}

# Provider fields whose values are floats; compared with a tolerance, everything else exactly.
FLOAT_FIELDS = frozenset({"moe_router_topk_scaling_factor"})

# HF defaults (transformers NemotronHConfig) for the routing keys a config.json may omit.
HF_SCALING_FACTOR = 1.0
HF_DEFAULTS: dict[str, int] = {"n_group": 1, "topk_group": 1}

# A checkpoint's config.json as decoded, and the provider fields the shim sets (JSON-able values).
HfConfig: TypeAlias = Mapping[str, object]
ProviderValue: TypeAlias = int | float | str | list[int] | None
ProviderFields: TypeAlias = dict[str, ProviderValue]
# One provider field that differs: {"field": name, "expected": value, "actual": value}.
Mismatch: TypeAlias = dict[str, object]


class ShimConfigError(ValueError):
    """The checkpoint config cannot be mapped (not NemotronH, or a key has the wrong type)."""


def _pattern(config: HfConfig, pattern_key: str, list_keys: tuple[str, ...]) -> str | None:
    value = config.get(pattern_key)
    if isinstance(value, str):
        return value
    for key in list_keys:
        layers = config.get(key)
        if isinstance(layers, list) and layers:
            try:
                return "".join(LAYER_SYMBOLS[str(kind)] for kind in layers)
            except KeyError as err:
                raise ShimConfigError(
                    f"config.json {key} has an unknown layer type {err.args[0]!r}"
                ) from None
    return None


def hybrid_pattern(config: HfConfig) -> str | None:
    """The decoder's layer pattern ('MEME*E...'), from either spelling a config.json may use."""
    return _pattern(config, "hybrid_override_pattern", ("layers_block_type", "layer_types"))


def mtp_pattern(config: HfConfig) -> str | None:
    return _pattern(config, "mtp_hybrid_override_pattern", ("mtp_layers_block_type",))


def _int(config: HfConfig, key: str, default: int | None = None) -> int | None:
    value = config.get(key, default)
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, (int, float)) or int(value) != value:
        raise ShimConfigError(f"config.json {key} must be an integer, got {value!r}")
    return int(value)


def _float(config: HfConfig, key: str, default: float | None = None) -> float | None:
    value = config.get(key, default)
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise ShimConfigError(f"config.json {key} must be a number, got {value!r}")
    return float(value)


def keep_mtp_from_env(environ: Mapping[str, str] | None = None) -> bool:
    """miles keeps the MTP head iff the variable is set to anything non-empty."""
    return bool((os.environ if environ is None else environ).get(KEEP_MTP_ENV))


def is_nemotron_h(config: HfConfig) -> bool:
    archs = config.get("architectures")
    return config.get("model_type") == MODEL_TYPE or (
        isinstance(archs, (list, tuple, str)) and ARCHITECTURE in archs
    )


def expected_provider_fields(config: HfConfig, *, keep_mtp: bool | None = None) -> ProviderFields:
    """The provider fields a NemotronH MoE checkpoint needs, as JSON-able values.

    A dense NemotronH (no routed experts) needs nothing from the shim: returns {}.
    """
    _require_nemotron_h(config)
    experts = _int(config, "n_routed_experts") or _int(config, "num_experts") or 0
    if experts <= 0:
        return {}
    fields: ProviderFields = {
        "num_moe_experts": experts,
        "moe_router_topk": _topk(config),
        "moe_router_score_function": "sigmoid",
        "moe_router_enable_expert_bias": True,
        "moe_router_topk_scaling_factor": _float(config, "routed_scaling_factor", HF_SCALING_FACTOR),
        "moe_router_num_groups": _int(config, "n_group", HF_DEFAULTS["n_group"]),
        "moe_router_group_topk": _int(config, "topk_group", HF_DEFAULTS["topk_group"]),
        **_expert_widths(config),
        **_latent_fields(config),
    }
    pattern = hybrid_pattern(config)
    if pattern:
        fields["moe_layer_freq"] = [1 if symbol == "E" else 0 for symbol in pattern]
    keep = keep_mtp_from_env() if keep_mtp is None else keep_mtp
    return {**fields, **_mtp_fields(config, keep)}


def _require_nemotron_h(config: HfConfig) -> None:
    """Refuse a config.json that is not a JSON object of a NemotronH checkpoint."""
    if not isinstance(config, Mapping):
        raise ShimConfigError("config.json must hold a JSON object")
    if not is_nemotron_h(config):
        raise ShimConfigError(
            f"config.json is not a NemotronH checkpoint (model_type {config.get('model_type')!r}, "
            f"architectures {config.get('architectures')!r})"
        )


def _topk(config: HfConfig) -> int:
    """The experts each token is routed to: a MoE checkpoint must say."""
    topk = _int(config, "num_experts_per_tok")
    if topk is None or topk <= 0:
        raise ShimConfigError(
            "config.json num_experts_per_tok must be a positive integer for a MoE checkpoint"
        )
    return topk


def _expert_widths(config: HfConfig) -> ProviderFields:
    """The routed and shared experts' FFN widths (the shared one from the expert count where not given)."""
    out: ProviderFields = {}
    ffn = _int(config, "moe_intermediate_size") or _int(config, "intermediate_size")
    if ffn is not None:
        out["moe_ffn_hidden_size"] = ffn
    shared = _int(config, "moe_shared_expert_intermediate_size")
    n_shared = _int(config, "n_shared_experts") or 0
    if shared is None and n_shared and ffn is not None:
        shared = ffn * n_shared
    if shared is not None:
        out["moe_shared_expert_intermediate_size"] = shared
    return out


def _latent_fields(config: HfConfig) -> ProviderFields:
    """The latent projection's size; Megatron refuses the shared-expert overlap with it."""
    latent = _int(config, "moe_latent_size")
    if latent is None:
        return {}
    if latent <= 0:
        raise ShimConfigError(f"config.json moe_latent_size must be positive, got {latent}")
    return {"moe_latent_size": latent, "moe_shared_expert_overlap": False}


def _mtp_fields(config: HfConfig, keep: bool) -> ProviderFields:
    """The MTP layers when they are kept (set to None, so the provider builds none, otherwise)."""
    depth = _int(config, "num_nextn_predict_layers") or 0
    if keep and depth > 0:
        return {"mtp_num_layers": depth, "mtp_hybrid_override_pattern": mtp_pattern(config)}
    return {"mtp_num_layers": None, "mtp_hybrid_override_pattern": None}


def read_config(checkpoint_dir: str | os.PathLike[str]) -> dict[str, object]:
    """DIR/config.json as a dict; every failure is one ShimConfigError sentence."""
    path = Path(checkpoint_dir) / "config.json"
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise ShimConfigError(f"{path} does not exist") from None
    except (OSError, UnicodeDecodeError) as err:
        raise ShimConfigError(f"cannot read {path}: {err}") from None
    try:
        data = json.loads(text)
    except json.JSONDecodeError as err:
        raise ShimConfigError(f"{path} is not valid JSON: {err.msg} at line {err.lineno}") from None
    if not isinstance(data, dict):
        raise ShimConfigError(f"{path} must hold a JSON object")
    return data


def _same(name: str, want: object, got: object) -> bool:
    if name in FLOAT_FIELDS and isinstance(want, (int, float)) and isinstance(got, (int, float)):
        return abs(float(want) - float(got)) <= 1e-9 * max(1.0, abs(float(want)))
    if isinstance(want, list) and isinstance(got, (list, tuple)):
        return list(got) == want
    return want == got


def mismatches(expected: Mapping[str, object], actual: Mapping[str, object]) -> list[Mismatch]:
    """Fields whose actual value differs from the expected one (a missing field counts as None)."""
    out: list[Mismatch] = []
    for name, want in expected.items():
        got = actual.get(name)
        if not _same(name, want, got):
            out.append({"field": name, "expected": want, "actual": got})
    return out
