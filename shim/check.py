"""`shim-check`: what the provider must get from a checkpoint, and -- where megatron-bridge is
importable -- what a CPU-built provider (no weights) actually gets, compared field by field.

A mismatch (a 1.0 routed scaling factor where config.json says 5.0) is exactly the silent drift the
shim exists to prevent, so the console blocks a launch on it.
"""

from __future__ import annotations

import contextlib
import importlib.util
import io
import logging
import os
import warnings
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field

from shim.mapping import Mismatch, ShimConfigError, expected_provider_fields, mismatches, read_config


@dataclass
class CheckResult:
    """The JSON contract: {"ok", "expected", "actual" | null, "mismatches", ...}."""

    ok: bool
    expected: Mapping[str, object]
    actual: Mapping[str, object] | None
    mismatches: list[Mismatch] = field(default_factory=list)
    checkpoint: str = ""
    shim_installed: bool = False
    note: str = ""

    def to_json(self) -> dict[str, object]:
        return {
            "ok": self.ok,
            "expected": self.expected,
            "actual": self.actual,
            "mismatches": self.mismatches,
            "checkpoint": self.checkpoint,
            "shim_installed": self.shim_installed,
            "note": self.note,
        }


def bridge_importable() -> bool:
    try:
        return importlib.util.find_spec("megatron.bridge") is not None
    except (ImportError, ValueError):
        return False


def build_provider(checkpoint_dir: str, *, with_shim: bool = True) -> object:
    """The provider megatron-bridge builds from DIR/config.json on CPU (no weights, not finalized).

    Uses transformers' built-in NemotronH config class; the checkpoint's own config code only where
    transformers has none and config.json names it (auto_map), which is what miles runs anyway.
    """
    # megatron.bridge exists only in the training image (shim.bridge imports it at its top)
    from megatron.bridge import AutoBridge
    from transformers import AutoConfig

    from shim import bridge

    if with_shim:
        bridge.install()
    else:
        bridge.uninstall()
    try:
        config = AutoConfig.from_pretrained(checkpoint_dir, trust_remote_code=False, local_files_only=True)
    except ValueError:
        # A transformers release without a built-in nemotron_h: use the checkpoint's own config class,
        # as miles does (trust_remote_code=True), but only when the checkpoint declares one.
        if "auto_map" not in read_config(checkpoint_dir):
            raise
        config = AutoConfig.from_pretrained(checkpoint_dir, trust_remote_code=True, local_files_only=True)
    return AutoBridge.from_hf_config(config).to_megatron_provider(load_weights=False)


@contextlib.contextmanager
def quiet() -> Iterator[None]:
    """Library chatter (warnings, prints, logging) stays out of the console's output."""
    previous = logging.root.manager.disable
    logging.disable(logging.WARNING)
    with (
        warnings.catch_warnings(),
        contextlib.redirect_stdout(io.StringIO()),
        contextlib.redirect_stderr(io.StringIO()),
    ):
        warnings.simplefilter("ignore")
        try:
            yield
        finally:
            logging.disable(previous)


def run_check(
    checkpoint_dir: str | os.PathLike[str],
    *,
    with_shim: bool = True,
    keep_mtp: bool | None = None,
    use_bridge: bool | None = None,
) -> CheckResult:
    """Expected fields always; actual ones when megatron-bridge is importable (use_bridge=None: auto).

    Raises shim.mapping.ShimConfigError for an unreadable or non-NemotronH config.json.
    """
    directory = os.fspath(checkpoint_dir)
    expected = expected_provider_fields(read_config(directory), keep_mtp=keep_mtp)
    if use_bridge is None:
        use_bridge = bridge_importable()
    if not use_bridge:
        return CheckResult(
            True,
            expected,
            None,
            checkpoint=directory,
            note="megatron.bridge not importable here: expected fields only, nothing compared",
        )
    if not expected:
        return CheckResult(
            True,
            expected,
            {},
            checkpoint=directory,
            shim_installed=with_shim,
            note="dense checkpoint (no routed experts): the shim sets nothing",
        )
    # megatron.bridge exists only in the training image (shim.bridge imports it at its top)
    from shim.bridge import provider_fields

    saved = os.environ.get("MILES_NEMOTRONH_KEEP_MTP")
    if keep_mtp is not None:
        os.environ["MILES_NEMOTRONH_KEEP_MTP"] = "1" if keep_mtp else ""
    try:
        with quiet():
            provider = build_provider(directory, with_shim=with_shim)
    except Exception as err:  # the library's own refusal of this config, as one sentence
        text = " ".join(str(err).split())[:300]
        raise ShimConfigError(
            f"megatron-bridge cannot build a provider from {directory}/config.json: "
            f"{type(err).__name__}: {text}"
        ) from None
    finally:
        if keep_mtp is not None:
            if saved is None:
                os.environ.pop("MILES_NEMOTRONH_KEEP_MTP", None)
            else:
                os.environ["MILES_NEMOTRONH_KEEP_MTP"] = saved
    actual = provider_fields(provider, expected)
    bad = mismatches(expected, actual)
    return CheckResult(not bad, expected, actual, bad, checkpoint=directory, shim_installed=with_shim)
