"""Registration of the NemotronH shim with megatron-bridge (imported only where megatron.bridge is).

`install()` registers, for `NemotronHForCausalLM`, a subclass of whatever bridge is registered for it
right now (upstream's, or miles' own plugin if that loaded), so the shim composes with both instead of
replacing them. The subclass:
- sets the provider fields of `shim.mapping.expected_provider_fields` on the provider it builds;
- adds the router, expert-bias, routed/shared expert and latent projection tensor mappings that the
  base registry lacks (those it already has are left alone);
- logs the one shim line (shim.logline) with the fields the provider ended up with, after the
  provider's `finalize()` (miles calls it after copying its runtime flags), once per process.

Idempotent: a second `install()` finds its own class registered and does nothing.
"""

from __future__ import annotations

import sys
from collections.abc import Callable, Iterable
from types import ModuleType

from shim import logline
from shim.mapping import ARCHITECTURE, ProviderFields, expected_provider_fields, mismatches

MARK = "_ultra_console_shim"
EXPECTED_ATTR = "_ultra_console_shim_expected"

# Megatron parameter name -> HF tensor name, for the MoE parts of a NemotronH layer.
MOE_TENSOR_MAPPINGS: dict[str, str] = {
    "decoder.layers.*.mlp.router.weight": "backbone.layers.*.mixer.gate.weight",
    "decoder.layers.*.mlp.router.expert_bias": "backbone.layers.*.mixer.gate.e_score_correction_bias",
    "decoder.layers.*.mlp.experts.linear_fc1.weight*": "backbone.layers.*.mixer.experts.*.up_proj.weight",
    "decoder.layers.*.mlp.experts.linear_fc2.weight*": "backbone.layers.*.mixer.experts.*.down_proj.weight",
    "decoder.layers.*.mlp.experts.local_experts.*.linear_fc1.weight": (
        "backbone.layers.*.mixer.experts.*.up_proj.weight"
    ),
    "decoder.layers.*.mlp.experts.local_experts.*.linear_fc2.weight": (
        "backbone.layers.*.mixer.experts.*.down_proj.weight"
    ),
    "decoder.layers.*.mlp.shared_experts.linear_fc1.weight": (
        "backbone.layers.*.mixer.shared_experts.up_proj.weight"
    ),
    "decoder.layers.*.mlp.shared_experts.linear_fc2.weight": (
        "backbone.layers.*.mixer.shared_experts.down_proj.weight"
    ),
    "decoder.layers.*.mlp.fc1_latent_proj.weight": "backbone.layers.*.mixer.fc1_latent_proj.weight",
    "decoder.layers.*.mlp.fc2_latent_proj.weight": "backbone.layers.*.mixer.fc2_latent_proj.weight",
}

_logged: set[str] = set()


def emit(line: str) -> None:
    """Print the shim line once per process (stdout reaches Ray's per-worker log and the job log)."""
    if line in _logged:
        return
    _logged.add(line)
    print(line, file=sys.stdout, flush=True)


def hf_config_dict(hf_config: object) -> dict[str, object]:
    """An HF config object (or the wrapper holding one) as the dict the pure mapping reads."""
    config = getattr(hf_config, "config", hf_config)
    to_dict: Callable[[], dict[str, object]] | None = getattr(config, "to_dict", None)
    data = dict(to_dict()) if to_dict is not None else dict(vars(config))
    for key in ("hybrid_override_pattern", "mtp_hybrid_override_pattern"):
        value = getattr(config, key, None)
        if isinstance(value, str):
            data[key] = value
    return data


def provider_fields(provider: object, names: Iterable[str]) -> dict[str, object]:
    """The named provider fields as JSON-able values (absent -> None)."""
    out: dict[str, object] = {}
    for name in names:
        value = getattr(provider, name, None)
        if isinstance(value, tuple):
            value = list(value)
        out[name] = value
    return out


def apply_fields(provider: object, fields: ProviderFields) -> None:
    for name, value in fields.items():
        setattr(provider, name, list(value) if isinstance(value, list) else value)


def report(provider: object) -> None:
    """Log what this provider ended up with, or why it is wrong."""
    expected = getattr(provider, EXPECTED_ATTR, None)
    if expected is None:
        return
    actual = provider_fields(provider, expected)
    bad = mismatches(expected, actual)
    if bad:
        detail = ", ".join(f"{m['field']}={m['actual']!r} (want {m['expected']!r})" for m in bad)
        emit(logline.not_applied(f"provider fields differ from config.json: {detail}"))
    else:
        emit(logline.applied(actual))


def _wrap_finalize(provider_cls: type) -> None:
    """Report after `finalize()`, so flags miles copies onto the provider afterwards are seen."""
    original = getattr(provider_cls, "finalize", None)  # own or inherited
    if original is None or getattr(original, MARK, False):
        return

    def finalize(self: object, *args: object, **kwargs: object) -> object:
        result = original(self, *args, **kwargs)
        report(self)
        return result

    setattr(finalize, MARK, True)
    finalize.__doc__ = original.__doc__
    setattr(provider_cls, "finalize", finalize)  # noqa: B010 (the attribute is only known at run time)


def _current_bridge_class() -> type:
    # megatron.bridge exists only in the training image: imported where it is used
    from megatron.bridge.models.conversion import model_bridge

    return type(model_bridge.get_model_bridge(ARCHITECTURE))


def _target_model_class() -> type:
    try:
        # megatron.bridge exists only in the training image: imported where it is used
        from megatron.core.models.hybrid.hybrid_model import HybridModel

        return HybridModel
    except ImportError:  # megatron-core < 0.17 (the radixark fork miles' image runs)
        from megatron.core.models.mamba import MambaModel

        return MambaModel


def _build_subclass(base: type) -> type:
    # megatron.bridge exists only in the training image: imported where it is used
    from megatron.bridge.models.conversion.mapping_registry import MegatronMappingRegistry
    from megatron.bridge.models.conversion.param_mapping import AutoMapping

    class UltraConsoleNemotronHBridge(base):
        """`base` plus the NemotronH MoE provider fields and tensor mappings."""

        def provider_bridge(self, hf_pretrained: object) -> object:
            provider = super().provider_bridge(hf_pretrained)
            try:
                expected = expected_provider_fields(hf_config_dict(hf_pretrained))
            except Exception as err:
                emit(logline.not_applied(f"cannot map the checkpoint config: {err}"))
                raise
            apply_fields(provider, expected)
            setattr(provider, EXPECTED_ATTR, expected)
            if hasattr(type(provider), "finalize"):
                _wrap_finalize(type(provider))
            else:
                report(provider)
            return provider

        def mapping_registry(self) -> object:
            registry = super().mapping_registry()
            existing = list(getattr(registry, "mappings", None) or getattr(registry, "_mappings", []))
            have = {getattr(m, "megatron_param", None) for m in existing}
            extra = [
                AutoMapping(megatron_param=m, hf_param=h)
                for m, h in MOE_TENSOR_MAPPINGS.items()
                if m not in have
            ]
            return MegatronMappingRegistry(*existing, *extra)

    setattr(UltraConsoleNemotronHBridge, MARK, True)
    return UltraConsoleNemotronHBridge


def install() -> type:
    """Register the shim bridge for NemotronHForCausalLM (idempotent); returns the registered class."""
    # megatron.bridge exists only in the training image: imported where it is used
    from megatron.bridge.models.conversion import model_bridge
    from megatron.bridge.models.conversion.model_bridge import MegatronModelBridge

    base = _current_bridge_class()
    if getattr(base, MARK, False):
        return base
    subclass = _build_subclass(base)
    MegatronModelBridge.register_bridge(
        source=ARCHITECTURE,
        target=_target_model_class(),
        provider=getattr(base, "PROVIDER_CLASS", None),
        model_type=getattr(base, "MODEL_TYPE", None),
    )(subclass)
    _clear_caches(model_bridge)
    return subclass


def uninstall() -> None:
    """Put back the bridge the shim was layered on (diagnostics: `shim-check --without-shim`)."""
    # megatron.bridge exists only in the training image: imported where it is used
    from megatron.bridge.models.conversion import model_bridge
    from megatron.bridge.models.conversion.model_bridge import MegatronModelBridge

    current = _current_bridge_class()
    while getattr(current, MARK, False):
        current = current.__mro__[1]
    if current is _current_bridge_class():
        return
    MegatronModelBridge.register_bridge(
        source=ARCHITECTURE,
        target=_target_model_class(),
        provider=getattr(current, "PROVIDER_CLASS", None),
        model_type=getattr(current, "MODEL_TYPE", None),
    )(current)
    _clear_caches(model_bridge)


def _clear_caches(model_bridge: ModuleType) -> None:
    for dispatcher in (
        model_bridge.get_model_bridge,
        getattr(model_bridge, "stream_weights_megatron_to_hf", None),
    ):
        cache = getattr(dispatcher, "_dispatch_cache", None)
        if isinstance(cache, dict):
            cache.clear()


def installed() -> bool:
    """Whether the class megatron-bridge would use for NemotronH right now is the shim's."""
    return bool(getattr(_current_bridge_class(), MARK, False))
