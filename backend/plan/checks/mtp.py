"""Catalog section F: the multi-token-prediction head.

The checkpoint's MTP block: built only when run.extra_env keeps it, placed on the last pipeline
stage, and needed by --enable-mtp-training.
"""

from __future__ import annotations

from backend.plan.checks.context import KEEP_MTP_ENV, Check, LayoutContext
from backend.severity import Severity


def _f1(c: LayoutContext) -> None:
    if c.keep_mtp and c.mtp_layers and c.pp > 1:
        c.add(
            "F1",
            f"the kept MTP block ({c.mtp_layers} × '{c.mtp_pattern}') sits on the last pipeline stage "
            f"(stage {c.pp - 1}), which therefore holds more parameters than the others",
            "",
        )


def _f2(c: LayoutContext) -> None:
    if c.mtp_layers and not c.mtp_pattern:
        c.add(
            "F2",
            f"model.mtp_num_layers = {c.mtp_layers} without model.mtp_pattern: Megatron-Bridge raises "
            "'num_nextn_predict_layers > 0 must define mtp_hybrid_override_pattern'",
            'set model.mtp_pattern = "*E" (the checkpoint\'s) or model.mtp_num_layers = 0',
        )


def _f3(c: LayoutContext) -> None:
    if c.enable_mtp_flag and not (c.keep_mtp and c.mtp_layers):
        c.add(
            "F3",
            "run.extra_args has --enable-mtp-training but the MTP head is not built "
            f"({KEEP_MTP_ENV} unset or model.mtp_num_layers = 0): 'mtp_num_layers must be set when "
            "enable_mtp_training is set'",
            f"set {KEEP_MTP_ENV}=1 in run.extra_env or drop the flag",
            ("run.extra_args", "run.extra_env"),
            Severity.ERROR,
        )
    elif c.keep_mtp and c.mtp_layers:
        c.add(
            "F3",
            f"{KEEP_MTP_ENV} is set: the checkpoint's MTP head ({c.mtp_layers} layer) is built; the "
            "recipe does not train it",
            f"remove {KEEP_MTP_ENV} from run.extra_env to follow the recipe",
            ("run.extra_env",),
            Severity.INFO,
        )


CHECKS: dict[str, Check] = {"F1": _f1, "F2": _f2, "F3": _f3}
