"""The NemotronH MoE shim for megatron-bridge. Importing this package never imports megatron.

- shim.mapping: HF config.json -> the Megatron provider fields (pure).
- shim.logline: the per-actor line the alerts match, and its parser.
- shim.bridge: registration with megatron-bridge (imported only where megatron.bridge exists).
- shim.ray_hook / shim.package: delivery to every worker through Ray's runtime env.
- shim.check: `shim-check` -- build the provider on CPU and compare.
"""

from shim.logline import (
    APPLIED_PREFIX,
    LINE_PREFIX,
    MAPPING_ONLY_MARK,
    NOT_APPLIED_PREFIX,
    ShimLine,
    parse,
)
from shim.mapping import ShimConfigError, expected_provider_fields, mismatches, read_config
from shim.package import SETUP_HOOK, package, runtime_env_additions, upload_path

__all__ = [
    "APPLIED_PREFIX",
    "LINE_PREFIX",
    "MAPPING_ONLY_MARK",
    "NOT_APPLIED_PREFIX",
    "SETUP_HOOK",
    "ShimConfigError",
    "ShimLine",
    "expected_provider_fields",
    "mismatches",
    "package",
    "parse",
    "read_config",
    "runtime_env_additions",
    "upload_path",
]
