"""The run spec: every recipe value and the model's architecture facts, as pydantic models.

Presets live in `configs/<name>.toml`; `load_preset(name_or_path)` reads one, `apply_overrides`
applies `--set key=value` pairs (dotted paths). Unknown keys and wrong types are `SpecError`s
with one clear sentence. Numbers that reach miles' argv verbatim (lr "1e-6", kl coef "0.00")
are kept as the strings the recipe writes, validated as numbers.
"""

from __future__ import annotations

import copy
import json
import math
import re
import sys
from functools import lru_cache
from importlib import resources
from pathlib import Path
from typing import Annotated, Any, Literal

from pydantic import (
    AfterValidator,
    BaseModel,
    BeforeValidator,
    ConfigDict,
    Field,
    ValidationError,
    field_validator,
    model_validator,
)

from backend.errors import SpecError
from backend.plan.miles_flags import spec_choices
from backend.plan.run_modes import RunMode
from backend.regular_files import NotRegularFileError, read_config_text, refuse_special
from backend.toml_input import parse_toml

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover
    import tomli as tomllib

DEFAULT_PRESET = "nemotron-3-ultra-550b-a55b"
SLICE_NAME = re.compile(r"(\d+)layer")


def _as_number_text(value: Any) -> str:
    if isinstance(value, bool):
        raise ValueError("expected a number, got a boolean")
    if isinstance(value, (int, float)):
        number, text = float(value) if abs(value) < 1e308 else math.inf, repr(value)
    elif isinstance(value, str):
        try:
            number, text = float(value), value.strip()
        except ValueError:
            raise ValueError(f"expected a number, got {value[:40]!r}") from None
    else:
        raise ValueError(f"expected a number, got {type(value).__name__}")
    if not math.isfinite(number):  # the job would get `--lr nan`
        raise ValueError(f"expected a finite number, got {text[:40]!r}")
    return text


NumberText = Annotated[str, BeforeValidator(_as_number_text)]
"""A finite number kept as the text miles receives (so `1e-6` stays `1e-6`, not `1e-06`)."""


def _choice(path: str) -> AfterValidator:
    """The value must be one miles' parser accepts for the field's flag (configs/miles/choices.toml)."""
    choices = spec_choices()[path]

    def check(value: str | None) -> str | None:
        problem = None if value is None else choices.problem(value)
        if problem:
            raise ValueError(problem)
        return value

    return AfterValidator(check)


# Caps on what a value can be: no real cluster or recipe is bigger, and every rule's arithmetic (divisors,
# legal-value lists, stage splits) stays bounded -- a keystroke in the plan form never runs for seconds.
MAX_NODES = 4096
MAX_GPUS_PER_NODE = 64
MAX_GPUS = MAX_NODES * MAX_GPUS_PER_NODE
MAX_DEGREE = 1024  # TP, PP, CP, ETP, VPP, rollout DP: per-stage work (memory per stage, splits) stays small
MAX_SPEC_INT = 1 << 24  # any other whole number (layers, widths, vocab, batch sizes)


class _Strict(BaseModel):
    """Unknown keys refused, NaN/Infinity refused in every float, whole numbers at most MAX_SPEC_INT."""

    model_config = ConfigDict(extra="forbid", validate_assignment=True, strict=False, allow_inf_nan=False)

    @field_validator("*", mode="after")
    @classmethod
    def _bounded(cls, value: Any) -> Any:
        if isinstance(value, int) and not isinstance(value, bool) and abs(value) > MAX_SPEC_INT:
            raise ValueError(
                f"at most {MAX_SPEC_INT} (no recipe value is larger; it would make the checks unbounded)"
            )
        return value


class ModelFacts(_Strict):
    """Architecture facts of one Nemotron-3-Ultra variant (one source of truth for rules and argv)."""

    name: str = Field(description="HF checkpoint directory name under paths.model_dir")
    org: str = Field(
        default="nvidia", description="hub organisation of the checkpoint (`prepare --fetch`: <org>/<name>)"
    )
    family: Literal["nemotron_h"] = "nemotron_h"
    num_layers: int = Field(gt=0)
    hybrid_pattern: str
    hidden_size: int = Field(gt=0)
    num_attention_heads: int = Field(gt=0)
    num_query_groups: int = Field(gt=0)
    kv_channels: int = Field(gt=0)
    ffn_hidden_size: int = Field(gt=0)
    moe_ffn_hidden_size: int = Field(gt=0)
    shared_expert_intermediate_size: int = Field(ge=0)
    num_experts: int = Field(gt=0)
    moe_router_topk: int = Field(gt=0)
    moe_latent_size: int | None = Field(default=None, gt=0)
    routed_scaling_factor: float = Field(gt=0)
    n_group: int = Field(gt=0)
    topk_group: int = Field(gt=0)
    mamba_num_heads: int = Field(gt=0)
    mamba_head_dim: int = Field(gt=0)
    mamba_num_groups: int = Field(gt=0)
    mamba_state_dim: int = Field(default=128, gt=0)
    mamba_conv_kernel: int = Field(default=4, gt=0)
    vocab_size: int = Field(gt=0)
    make_vocab_size_divisible_by: int = Field(default=128, gt=0)
    untie_embeddings: bool = True
    position_embedding_type: Literal["none", "rope", "learned_absolute"] = "none"
    normalization: Literal["RMSNorm", "LayerNorm"] = "RMSNorm"
    add_bias_linear: bool = False
    mtp_num_layers: int = Field(default=1, ge=0)
    mtp_pattern: str = "*E"
    total_params_b: float | None = Field(default=None, description="published size, billions (for display)")

    @property
    def is_slice(self) -> bool:
        return bool(SLICE_NAME.search(self.name))


class Cluster(_Strict):
    nodes: int = Field(gt=0, le=MAX_NODES, description=f"at most {MAX_NODES}")
    gpus_per_node: int = Field(
        default=8, gt=0, le=MAX_GPUS_PER_NODE, description=f"at most {MAX_GPUS_PER_NODE}"
    )
    gpu_memory_gb: float = Field(default=141.0, gt=0, description="HBM per GPU (H200: 141)")
    host_memory_gb: float = Field(default=2048.0, gt=0, description="host RAM per node")
    gpu_nvlink: bool | None = Field(default=None, description="NCCL_NVLS_ENABLE; None = probe the head")

    @property
    def total_gpus(self) -> int:
        return self.nodes * self.gpus_per_node


class Train(_Strict):
    """Megatron layout and performance flags of the train actors."""

    tp: int = Field(gt=0, le=MAX_DEGREE)
    pp: int = Field(gt=0, le=MAX_DEGREE)
    cp: int = Field(default=1, gt=0, le=MAX_DEGREE)
    ep: int = Field(gt=0, le=MAX_GPUS)
    etp: int | None = Field(
        default=1, gt=0, le=MAX_DEGREE, description="None = unset (Megatron defaults it to TP)"
    )
    vpp: int | None = Field(default=None, gt=0, le=MAX_DEGREE)
    sequence_parallel: bool | None = Field(
        default=None, description="None = on iff TP > 1 (the launcher's rule)"
    )
    decoder_first_pipeline_num_layers: int | None = None
    decoder_last_pipeline_num_layers: int | None = None
    recompute_granularity: Literal["full", "selective"] | None = "full"
    recompute_method: Literal["uniform", "block"] | None = "uniform"
    recompute_num_layers: int | None = 1
    attention_backend: Annotated[str, _choice("train.attention_backend")] = Field(
        default="auto", description="Megatron's --attention-backend"
    )
    micro_batch_size: int = Field(default=1, gt=0)
    use_dynamic_batch_size: bool = True
    log_probs_chunk_size: int = Field(default=128, gt=0)
    moe_shared_expert_overlap: bool = False
    moe_token_dispatcher: Literal["allgather", "alltoall", "flex"] = "alltoall"


class Rollout(_Strict):
    """SGLang engines (colocated with training in this recipe)."""

    gpus_per_engine: int = Field(gt=0, le=MAX_GPUS)
    ep: int = Field(gt=0, le=MAX_GPUS)
    dp: int = Field(default=1, gt=0, le=MAX_DEGREE)
    enable_dp_attention: bool = True
    mem_fraction: float = Field(gt=0, le=1)
    num_gpus: int | None = Field(
        default=None, gt=0, le=MAX_GPUS, description="None = all GPUs (colocate forces it anyway)"
    )
    colocate: bool = True
    max_response_len: int = Field(default=8192, gt=0)
    debug_max_response_len: int = Field(default=256, gt=0)
    temperature: NumberText = "1"
    sglang_attention_backend: Annotated[str | None, _choice("rollout.sglang_attention_backend")] = Field(
        default=None, description="--sglang-attention-backend; None = SGLang picks"
    )


class Batch(_Strict):
    num_rollout: int = Field(default=30, gt=0)
    rollout_batch_size: int = Field(default=32, gt=0)
    n_samples_per_prompt: int = Field(default=8, gt=0)
    global_batch_size: int = Field(default=128, gt=0)
    max_tokens_per_gpu: int | None = Field(default=1024, gt=0)
    num_steps_per_rollout: int | None = Field(default=None, gt=0)
    over_sampling_batch_size: int | None = Field(default=None, gt=0)
    balance_data: bool = True


class Data(_Strict):
    prompt_data: str = "dapo-math-17k/dapo-math-17k.jsonl"
    repo: str | None = Field(
        default="zhuzilin/dapo-math-17k", description="hub dataset repo `prepare --fetch` reads"
    )
    input_key: str = "prompt"
    label_key: str = "label"
    apply_chat_template: bool = True
    rollout_shuffle: bool = True
    rm_type: str = "deepscaler"


class Grpo(_Strict):
    advantage_estimator: Annotated[str, _choice("grpo.advantage_estimator")] = "grpo"
    kl_loss_coef: NumberText = "0.00"
    kl_loss_type: Annotated[str, _choice("grpo.kl_loss_type")] = "low_var_kl"
    entropy_coef: NumberText = "0.00"
    eps_clip: NumberText = "0.2"
    eps_clip_high: NumberText = "0.28"


class Optimizer(_Strict):
    name: Literal["adam", "sgd"] = "adam"
    lr: NumberText = "1e-6"
    lr_decay_style: Annotated[str, _choice("optimizer.lr_decay_style")] = "constant"
    weight_decay: NumberText = "0.1"
    adam_beta1: NumberText = "0.9"
    adam_beta2: NumberText = "0.98"
    cpu_offload: bool = True


class Eval(_Strict):
    enabled: bool = False
    interval: int = Field(default=20, gt=0)
    prompt_name: str = "aime"
    prompt_data: str = "aime-2024/aime-2024.jsonl"
    n_samples_per_prompt: int = Field(default=16, gt=0)
    max_response_len: int = Field(default=16384, gt=0)
    top_p: NumberText = "1"


class Checkpoint(_Strict):
    save_interval: int = Field(default=50, gt=0)
    skip_saving: bool = False
    save_optim: bool = False
    load: str | None = Field(
        default=None, description="--load: a save dir to resume from (None: a fresh start)"
    )
    load_step: int | None = Field(
        default=None, gt=0, description="--ckpt-step: the iteration of `load` (None: its tracker's)"
    )


class Paths(_Strict):
    miles_root: str = "/root/miles"
    train_script: str | None = Field(default=None, description="None = <miles_root>/train.py")
    model_dir: str = "/root/models"
    data_dir: str = "/root/datasets"
    output_dir: str = "/root/shared_data"
    megatron_path: str = "/root/Megatron-LM"

    @property
    def resolved_train_script(self) -> str:
        return self.train_script or f"{self.miles_root.rstrip('/')}/train.py"


class RunOptions(_Strict):
    id: str | None = Field(default=None, description="YYMMDD-HHMMSS-NNN (UTC); None = made at launch")
    mode: RunMode = "normal"
    extra_args: str = ""
    master_addr: str = "127.0.0.1"
    wandb_project: str | None = None
    stop_wait_s: int = Field(default=120, ge=1, le=3600, description="grace period after SIGINT on abort")
    miles_dashboard: bool = Field(
        default=False, description="miles writes its own 1 s GPU streams (off: the launcher's argv)"
    )
    extra_env: dict[str, str] = Field(default_factory=dict)


class RunSpec(_Strict):
    """One run, fully described. The rule engine, the submission and the UI all read this."""

    preset: str = DEFAULT_PRESET
    description: str = ""
    model: ModelFacts
    cluster: Cluster
    train: Train
    rollout: Rollout
    batch: Batch = Field(default_factory=Batch)
    data: Data = Field(default_factory=Data)
    grpo: Grpo = Field(default_factory=Grpo)
    optimizer: Optimizer = Field(default_factory=Optimizer)
    eval: Eval = Field(default_factory=Eval)
    checkpoint: Checkpoint = Field(default_factory=Checkpoint)
    paths: Paths = Field(default_factory=Paths)
    run: RunOptions = Field(default_factory=RunOptions)

    @model_validator(mode="after")
    def _pattern_symbols(self) -> RunSpec:
        bad = set(self.model.hybrid_pattern) - set("M*E-")
        if bad:
            raise ValueError(
                f"model.hybrid_pattern has unknown layer symbols {''.join(sorted(bad))!r} (use M, E, *, -)"
            )
        return self

    @property
    def sequence_parallel(self) -> bool:
        """What the launcher passes: explicit setting, else on iff TP > 1."""
        sp = self.train.sequence_parallel
        return self.train.tp > 1 if sp is None else sp


# --------------------------------------------------------------------------- loading


def preset_dir() -> Path:
    return Path(str(resources.files("configs")))


@lru_cache(maxsize=64)
def _parsed_toml(path: Path, _stamp: tuple[int, int]) -> dict[str, Any]:
    """One parse per file version (`_stamp` = mtime, size): listing the variants reads every preset
    several times, and the plan form's first frame waits for that."""
    return parse_toml(read_config_text(path, "preset"))


def _read_toml(path: Path, *, copied: bool = True) -> dict[str, Any]:
    """The parsed file; with `copied`, a fresh copy the caller may change (raises OSError,
    UnicodeDecodeError, tomllib.TOMLDecodeError)."""
    st = path.stat()
    data = _parsed_toml(path, (st.st_mtime_ns, st.st_size))
    return copy.deepcopy(data) if copied else data


def _is_preset(path: Path) -> bool:
    """configs/ also holds other data (alerts.toml): a preset is a TOML file with a [model] table."""
    try:
        return isinstance(_read_toml(path, copied=False).get("model"), dict)
    except (OSError, UnicodeDecodeError, tomllib.TOMLDecodeError, NotRegularFileError):
        return False


def list_presets() -> list[str]:
    return sorted(p.stem for p in preset_dir().glob("*.toml") if _is_preset(p))


def _cut(text: str, limit: int = 60) -> str:
    return text if len(text) <= limit else f"{text[:limit]}… ({len(text)} characters)"


def _format_error(err: ValidationError, source: str) -> str:
    first = err.errors()[0]
    where = ".".join(str(p) for p in first["loc"]) or "(top level)"
    kind = first["type"]
    if kind == "extra_forbidden":
        return f"{source}: unknown key {where!r}"
    if kind == "missing":
        return f"{source}: missing key {where!r}"
    value = first.get("input")
    shown = f" (got {_cut(repr(value))})" if not isinstance(value, (dict, list)) else ""
    return f"{source}: {where}: {first['msg'].removeprefix('Value error, ')}{shown}"


def spec_from_dict(data: dict[str, Any], source: str = "spec") -> RunSpec:
    try:
        return RunSpec.model_validate(data)
    except ValidationError as err:
        raise SpecError(_format_error(err, source)) from None


def resolve_preset_path(name_or_path: str | None) -> Path:
    name = name_or_path or DEFAULT_PRESET
    as_path = Path(name).expanduser()
    if as_path.suffix == ".toml" or "/" in name:
        if not as_path.exists():
            raise SpecError(f"preset file {name} does not exist")
        refuse_special(as_path, "preset file")  # a FIFO would block the plan, a device never end
        return as_path
    candidate = preset_dir() / f"{name}.toml"
    if not candidate.is_file() or not _is_preset(candidate):
        raise SpecError(f"unknown preset {name!r}; known presets: {', '.join(list_presets())}")
    return candidate


def load_preset_dict(name_or_path: str | None = None) -> dict[str, Any]:
    path = resolve_preset_path(name_or_path)
    try:
        data = _read_toml(path)
    except (OSError, UnicodeDecodeError) as err:
        raise SpecError(f"cannot read preset {path}: {err}") from None
    except tomllib.TOMLDecodeError as err:
        raise SpecError(f"preset {path} is not valid TOML: {err}") from None
    data.setdefault("preset", path.stem)
    return data


def load_preset(name_or_path: str | None = None) -> RunSpec:
    path = resolve_preset_path(name_or_path)
    return spec_from_dict(load_preset_dict(name_or_path), source=f"preset {path.name}")


# --------------------------------------------------------------------------- overrides


def _parse_value(text: str) -> Any:
    """A --set value: TOML scalar syntax when it parses (1, 0.7, true, "x"), else the raw text."""
    if text.strip().lower() in ("none", "null", "unset"):
        return None
    try:
        return parse_toml(f"v = {text}")["v"]
    except (tomllib.TOMLDecodeError, ValueError):  # ValueError: an integer of thousands of digits
        return text


def _known_paths(model: type[BaseModel], prefix: str = "") -> list[str]:
    out: list[str] = []
    for name, field in model.model_fields.items():
        ann = field.annotation
        if isinstance(ann, type) and issubclass(ann, BaseModel):
            out.extend(_known_paths(ann, f"{prefix}{name}."))
        else:
            out.append(f"{prefix}{name}")
    return out


SETTABLE_KEYS: tuple[str, ...] = tuple(_known_paths(RunSpec))


def apply_overrides(data: dict[str, Any], pairs: list[str] | list[tuple[str, Any]]) -> dict[str, Any]:
    """Apply `key=value` (or (key, value)) overrides to a preset dict; returns a new dict."""
    out = copy.deepcopy(data)
    for pair in pairs:
        key, value = pair if isinstance(pair, tuple) else _split_pair(pair)
        _check_settable(key)
        node = out
        parts = key.split(".")
        for part in parts[:-1]:
            node = node.setdefault(part, {})
        if key == "run.extra_args" and not isinstance(value, str):
            value = str(value)
        node[parts[-1]] = value
    return out


def _split_pair(pair: str) -> tuple[str, Any]:
    """`KEY=VALUE` as the key and its parsed value."""
    if "=" not in pair:
        raise SpecError(f"--set expects KEY=VALUE, got {pair!r}")
    key, raw = pair.split("=", 1)
    return key.strip(), _parse_value(raw.strip())


def _check_settable(key: str) -> None:
    """Refuse a key no spec field has, naming the keys that end the same way."""
    if key in SETTABLE_KEYS:
        return
    close = [k for k in SETTABLE_KEYS if k.split(".")[-1] == key.split(".")[-1]]
    hint = f"; did you mean {', '.join(close)}?" if close else ""
    raise SpecError(f"unknown key {key!r}{hint}")


def build_spec(preset: str | None = None, overrides: list[str] | None = None) -> RunSpec:
    """The one way a spec is made from a preset name/path and --set overrides."""
    path = resolve_preset_path(preset)
    data = apply_overrides(load_preset_dict(preset), overrides or [])
    return spec_from_dict(data, source=f"preset {path.name}" + (" with --set" if overrides else ""))


def dump_toml(spec: RunSpec) -> str:
    """A spec as TOML (for saving an edited layout as a new preset)."""
    data = spec.model_dump(mode="json")
    lines = _plain_items({k: v for k, v in data.items() if not isinstance(v, dict)})
    for section, body in data.items():
        if isinstance(body, dict):
            lines += _section_lines(section, body)
    return "\n".join(lines) + "\n"


def _plain_items(body: dict[str, Any]) -> list[str]:
    """`key = value` for each value that is set and not a table."""
    return [f"{k} = {_toml_value(v)}" for k, v in body.items() if v is not None and not isinstance(v, dict)]


def _section_lines(section: str, body: dict[str, Any]) -> list[str]:
    """One table: its plain values, then each nested table whole."""
    lines = [f"\n[{section}]", *_plain_items(body)]
    for key, value in body.items():
        if isinstance(value, dict):
            lines.append(f"\n[{section}.{key}]")
            lines.extend(f"{k} = {_toml_value(v)}" for k, v in value.items())
    return lines


def _toml_value(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, (int, float)):
        return repr(value)
    return json.dumps(value)
