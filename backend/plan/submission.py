"""RunSpec -> the Ray job miles' launcher would submit, made safe.

The argv matches `scripts/run_nemotron_3_ultra_550b_a55b.py` token for token (golden tests pin it),
in the launcher's group order: model, ckpt, rollout, optimizer, grpo, wandb, perf, eval, sglang,
misc, extra. Where the launcher is unsafe we differ on purpose:
- the W&B key travels only as WANDB_API_KEY in the runtime env, never in argv;
- RAY_JOB_STOP_SIGNAL=SIGINT and RAY_JOB_STOP_WAIT_TIME_S let an abort run miles' cleanup;
- extra_args are split with shlex and every token is quoted in the entrypoint, so nothing in them
  can become shell syntax when Ray's job supervisor runs the entrypoint through a shell.
"""

from __future__ import annotations

import json
import re
import shlex
import shutil
import subprocess
from collections.abc import Mapping
from functools import lru_cache
from typing import Any

from pydantic import BaseModel, Field

import shim
from backend.errors import SpecError
from backend.json_fields import Fields
from backend.plan.dashboard_flags import DASHBOARD_FLAGS
from backend.plan.run_id import new_run_id
from backend.plan.simulation import is_simulated
from backend.plan.spec import RunSpec
from backend.redaction import SECRET_NAME
from shim.logline import LINE_PREFIX as SHIM_LINE_PREFIX

SECRET_ENV = SECRET_NAME  # one pattern for every secret-looking name (backend.redaction)
FORBIDDEN_EXTRA = ("--wandb-key",)
# A flag that names a secret (`--hf-token`, `--api-key`, `--password`; not `--max-tokens-per-gpu` nor miles'
# `--input-key`), or a value shaped like a known token: argv is shown in previews, `ps` and Ray's metadata.
SECRET_FLAG = re.compile(
    r"^--?(?:[\w-]*[-_])?(?:token|secret|password|passwd|credentials?|api[-_]?key|access[-_]?key|"
    r"private[-_]?key|auth|wandb[-_]?key)$",
    re.IGNORECASE,
)
SECRET_VALUE = re.compile(
    r"^(?:hf_[A-Za-z0-9]{20,}|sk-[A-Za-z0-9_-]{20,}|gh[pousr]_[A-Za-z0-9]{20,}|xox[abpr]-\S{10,})"
)
INHERITED_ENV = ("NCCL_SOCKET_IFNAME", "GLOO_SOCKET_IFNAME", "NCCL_DEBUG", "NCCL_DEBUG_FILE")
WANDB_PROJECT = "miles-run_nemotron_3_ultra_550b_a55b"
REDACTED = "***"
SECRET_NAMES = ("WANDB_API_KEY",)
MILES_GPUS_PER_NODE = 8  # miles' --num-gpus-per-node default (configs/miles/args.toml; a test pins it)


class Submission(BaseModel):
    """One Ray job, ready for `POST /api/jobs/`."""

    entrypoint: str
    argv: list[str]
    runtime_env: dict[str, Any]
    submission_id: str
    metadata: dict[str, str]
    secret_env: list[str] = Field(default_factory=list, description="env var names holding secrets")

    def to_ray_payload(self) -> dict[str, Any]:
        return {
            "entrypoint": self.entrypoint,
            "runtime_env": self.runtime_env,
            "submission_id": self.submission_id,
            "metadata": self.metadata,
        }

    def redacted_runtime_env(self) -> dict[str, Any]:
        env = dict(Fields(self.runtime_env).obj("env_vars").raw)
        for name in env:
            if name in self.secret_env or SECRET_ENV.search(name):
                env[name] = REDACTED
        return {**self.runtime_env, "env_vars": env}

    def shell(self, address: str | None = None) -> str:
        """A copyable `ray job submit` line; secrets replaced by ***."""
        head = ["ray", "job", "submit"]
        if address:
            head.append(f"--address={address}")
        head += [
            "--submission-id",
            self.submission_id,
            f"--runtime-env-json={json.dumps(self.redacted_runtime_env(), separators=(',', ':'))}",
            f"--metadata-json={json.dumps(self.metadata, separators=(',', ':'))}",
            "--",
        ]
        return shlex.join(head) + " " + self.entrypoint

    def redacted_payload(self) -> dict[str, Any]:
        return {**self.to_ray_payload(), "runtime_env": self.redacted_runtime_env()}


# --------------------------------------------------------------------------- argv groups


def _flag(cond: bool, *tokens: str) -> list[str]:
    return list(tokens) if cond else []


def model_args(spec: RunSpec) -> list[str]:
    """`scripts/models/nemotron-3-ultra-550b-a55b*.py:model_args()`, from the spec's facts."""
    m = spec.model
    args = [
        *_flag(not m.add_bias_linear, "--disable-bias-linear"),
        *_flag(m.num_query_groups < m.num_attention_heads, "--group-query-attention"),
        "--num-attention-heads",
        str(m.num_attention_heads),
        "--num-query-groups",
        str(m.num_query_groups),
        "--kv-channels",
        str(m.kv_channels),
        "--num-layers",
        str(m.num_layers),
        "--hidden-size",
        str(m.hidden_size),
        "--ffn-hidden-size",
        str(m.ffn_hidden_size),
        "--normalization",
        m.normalization,
        "--position-embedding-type",
        m.position_embedding_type,
        "--vocab-size",
        str(m.vocab_size),
        "--make-vocab-size-divisible-by",
        str(m.make_vocab_size_divisible_by),
        *_flag(m.untie_embeddings, "--untie-embeddings-and-output-weights"),
        "--num-experts",
        str(m.num_experts),
        "--moe-router-topk",
        str(m.moe_router_topk),
        "--moe-ffn-hidden-size",
        str(m.moe_ffn_hidden_size),
        "--moe-shared-expert-intermediate-size",
        str(m.shared_expert_intermediate_size),
    ]
    if m.moe_latent_size is not None:
        args += ["--moe-latent-size", str(m.moe_latent_size)]
    args += [
        "--moe-router-score-function",
        "sigmoid",
        "--moe-router-enable-expert-bias",
        "--moe-grouped-gemm",
        "--moe-router-dtype",
        "fp32",
        "--moe-router-num-groups",
        str(m.n_group),
        "--moe-router-group-topk",
        str(m.topk_group),
        "--moe-router-topk-scaling-factor",
        str(m.routed_scaling_factor),
        "--moe-router-pre-softmax",
        "--moe-router-load-balancing-type",
        "seq_aux_loss",
        "--moe-router-bias-update-rate",
        "0",
        "--moe-aux-loss-coeff",
        "0",
    ]
    return args


def _run_dir(spec: RunSpec, run_id: str) -> str:
    return f"{spec.paths.output_dir.rstrip('/')}/{run_id}"


def ckpt_args(spec: RunSpec, run_id: str) -> list[str]:
    ckpt = f"{spec.paths.model_dir.rstrip('/')}/{spec.model.name}"
    args = ["--hf-checkpoint", ckpt, "--ref-load", ckpt, "--megatron-to-hf-mode", "bridge"]
    if not spec.checkpoint.skip_saving:
        args += [
            "--save",
            f"{_run_dir(spec, run_id)}/checkpoints",
            "--save-interval",
            str(spec.checkpoint.save_interval),
        ]
        args += _flag(not spec.checkpoint.save_optim, "--no-save-optim")
    return args + load_args(spec)


def load_args(spec: RunSpec) -> list[str]:
    """`--load` (and `--ckpt-step`) of a resumed run: Megatron reads the iteration from the tracker unless
    `--ckpt-step` names one (the one before a partial save)."""
    c = spec.checkpoint
    if c.load is None:
        return []
    return ["--load", c.load, *(["--ckpt-step", str(c.load_step)] if c.load_step is not None else [])]


def rollout_args(spec: RunSpec) -> list[str]:
    d, b, r = spec.data, spec.batch, spec.rollout
    max_len = r.debug_max_response_len if spec.run.mode == "debug_minimal" else r.max_response_len
    args = [
        "--prompt-data",
        f"{spec.paths.data_dir.rstrip('/')}/{d.prompt_data}",
        "--input-key",
        d.input_key,
        "--label-key",
        d.label_key,
        *_flag(d.apply_chat_template, "--apply-chat-template"),
        *_flag(d.rollout_shuffle, "--rollout-shuffle"),
        "--rm-type",
        d.rm_type,
        "--num-rollout",
        str(b.num_rollout),
        "--rollout-batch-size",
        str(b.rollout_batch_size),
        "--n-samples-per-prompt",
        str(b.n_samples_per_prompt),
        "--rollout-max-response-len",
        str(max_len),
        "--rollout-temperature",
        r.temperature,
        "--global-batch-size",
        str(b.global_batch_size),
    ]
    if b.num_steps_per_rollout is not None:
        args += ["--num-steps-per-rollout", str(b.num_steps_per_rollout)]
    if b.over_sampling_batch_size is not None:
        args += ["--over-sampling-batch-size", str(b.over_sampling_batch_size)]
    return args + _flag(b.balance_data, "--balance-data")


def optimizer_args(spec: RunSpec) -> list[str]:
    o = spec.optimizer
    return [
        "--optimizer",
        o.name,
        "--lr",
        o.lr,
        "--lr-decay-style",
        o.lr_decay_style,
        "--weight-decay",
        o.weight_decay,
        "--adam-beta1",
        o.adam_beta1,
        "--adam-beta2",
        o.adam_beta2,
        *_flag(
            o.cpu_offload,
            "--optimizer-cpu-offload",
            "--overlap-cpu-optimizer-d2h-h2d",
            "--use-precision-aware-optimizer",
        ),
    ]


def grpo_args(spec: RunSpec) -> list[str]:
    g = spec.grpo
    return [
        "--advantage-estimator",
        g.advantage_estimator,
        "--kl-loss-coef",
        g.kl_loss_coef,
        "--kl-loss-type",
        g.kl_loss_type,
        "--entropy-coef",
        g.entropy_coef,
        "--eps-clip",
        g.eps_clip,
        "--eps-clip-high",
        g.eps_clip_high,
    ]


def wandb_args(spec: RunSpec, run_id: str, enabled: bool) -> list[str]:
    """W&B flags without `--wandb-key`: wandb reads WANDB_API_KEY from the runtime env."""
    if not enabled:
        return []
    return [
        "--use-wandb",
        "--wandb-project",
        spec.run.wandb_project or WANDB_PROJECT,
        "--wandb-group",
        run_id,
        "--disable-wandb-random-suffix",
    ]


def perf_args(spec: RunSpec) -> list[str]:
    t, b = spec.train, spec.batch
    args = [
        "--tensor-model-parallel-size",
        str(t.tp),
        "--pipeline-model-parallel-size",
        str(t.pp),
        "--context-parallel-size",
        str(t.cp),
        "--expert-model-parallel-size",
        str(t.ep),
    ]
    if t.etp is not None:
        args += ["--expert-tensor-parallel-size", str(t.etp)]
    if t.vpp is not None:
        args += ["--num-virtual-stages-per-pipeline-rank", str(t.vpp)]
    if t.decoder_first_pipeline_num_layers is not None:
        args += ["--decoder-first-pipeline-num-layers", str(t.decoder_first_pipeline_num_layers)]
    if t.decoder_last_pipeline_num_layers is not None:
        args += ["--decoder-last-pipeline-num-layers", str(t.decoder_last_pipeline_num_layers)]
    if t.recompute_granularity is not None:
        args += ["--recompute-granularity", t.recompute_granularity]
        if t.recompute_method is not None:
            args += ["--recompute-method", t.recompute_method]
        if t.recompute_num_layers is not None:
            args += ["--recompute-num-layers", str(t.recompute_num_layers)]
    if t.use_dynamic_batch_size:
        args.append("--use-dynamic-batch-size")
    else:
        args += ["--micro-batch-size", str(t.micro_batch_size)]
    if b.max_tokens_per_gpu is not None:
        args += ["--max-tokens-per-gpu", str(b.max_tokens_per_gpu)]
    args += ["--log-probs-chunk-size", str(t.log_probs_chunk_size)]
    return args + _flag(spec.sequence_parallel, "--sequence-parallel") + moe_runtime_args(spec)


def moe_runtime_args(spec: RunSpec) -> list[str]:
    """The dispatcher and shared-expert overlap, where the flag changes what miles runs.

    Without the flag Megatron's default `allgather` reaches miles, which turns it into `alltoall` (always
    variable sequence lengths; utils/arguments.py:2715-2720): the plan's default `alltoall` needs no flag
    (so the argv stays the launcher's), `flex` does; `allgather` ends as `alltoall` whatever is passed
    (rule B10 says so)."""
    t = spec.train
    args = ["--moe-token-dispatcher-type", "flex"] if t.moe_token_dispatcher == "flex" else []
    return args + _flag(t.moe_shared_expert_overlap, "--moe-shared-expert-overlap")


def eval_args(spec: RunSpec) -> list[str]:
    e = spec.eval
    if not e.enabled:
        return []
    return [
        "--eval-interval",
        str(e.interval),
        "--eval-prompt-data",
        e.prompt_name,
        f"{spec.paths.data_dir.rstrip('/')}/{e.prompt_data}",
        "--n-samples-per-eval-prompt",
        str(e.n_samples_per_prompt),
        "--eval-max-response-len",
        str(e.max_response_len),
        "--eval-top-p",
        e.top_p,
    ]


def sglang_args(spec: RunSpec) -> list[str]:
    r = spec.rollout
    return [
        "--rollout-num-gpus-per-engine",
        str(r.gpus_per_engine),
        "--sglang-ep-size",
        str(r.ep),
        "--sglang-dp-size",
        str(r.dp),
        *_flag(r.enable_dp_attention, "--sglang-enable-dp-attention"),
        "--sglang-mem-fraction-static",
        str(r.mem_fraction),
        *(["--sglang-attention-backend", r.sglang_attention_backend] if r.sglang_attention_backend else []),
    ]


def misc_args(spec: RunSpec, run_id: str) -> list[str]:
    c, r = spec.cluster, spec.rollout
    return [
        "--attention-dropout",
        "0.0",
        "--hidden-dropout",
        "0.0",
        "--accumulate-allreduce-grads-in-fp32",
        "--attention-softmax-in-fp32",
        "--attention-backend",
        spec.train.attention_backend,
        *_flag(r.colocate, "--colocate"),
        "--actor-num-nodes",
        str(c.nodes),
        "--actor-num-gpus-per-node",
        str(c.gpus_per_node),
        "--rollout-num-gpus",
        str(r.num_gpus or c.total_gpus),
        *gpus_per_node_args(spec),
        "--dump-details",
        f"{_run_dir(spec, run_id)}/dump_details",
        *_flag(spec.run.miles_dashboard, *DASHBOARD_FLAGS),
    ]


def gpus_per_node_args(spec: RunSpec) -> list[str]:
    """miles places rollout engines by --num-gpus-per-node (default 8, utils/arguments.py:134), not by the
    actor flags: passed whenever the cluster's differs, so the engines and nodes per engine the plan shows
    are what runs (miles' launcher omits it; on 8-GPU nodes the argv stays the launcher's)."""
    gpn = spec.cluster.gpus_per_node
    return [] if gpn == MILES_GPUS_PER_NODE else ["--num-gpus-per-node", str(gpn)]


def split_extra_args(text: str) -> list[str]:
    """Operator extra args as argv tokens; refuses unbalanced quotes and secrets on the command line."""
    try:
        tokens = shlex.split(text, comments=False, posix=True)
    except ValueError as err:
        raise SpecError(f"run.extra_args cannot be split into arguments: {err}") from None
    for token in tokens:
        _check_extra_token(token)
    return tokens


def _check_extra_token(token: str) -> None:
    """Refuse a secret on the command line (named by the flag only: the value is never repeated)."""
    name, _, value = token.partition("=")
    if name in FORBIDDEN_EXTRA:
        raise SpecError(f"run.extra_args must not carry {name}: put the key in WANDB_API_KEY instead")
    if "\x00" in token or any(ord(ch) < 32 for ch in token):
        raise SpecError("run.extra_args contains control characters")
    if SECRET_FLAG.match(name):
        raise SpecError(
            f"run.extra_args must not carry {name[:60]}: a secret on the command line is shown in previews, "
            "`ps` and Ray's job metadata (pass it in run.extra_env under a *_TOKEN / *_KEY name)"
        )
    if SECRET_VALUE.match(value or token):
        raise SpecError("run.extra_args holds a value shaped like an access token: pass it in run.extra_env")


def train_argv(spec: RunSpec, run_id: str, *, wandb: bool = False) -> list[str]:
    """Everything after `python3 <train.py>`."""
    return [
        *model_args(spec),
        *ckpt_args(spec, run_id),
        *rollout_args(spec),
        *optimizer_args(spec),
        *grpo_args(spec),
        *wandb_args(spec, run_id, wandb),
        *perf_args(spec),
        *eval_args(spec),
        *sglang_args(spec),
        *misc_args(spec, run_id),
        *split_extra_args(spec.run.extra_args),
    ]


# --------------------------------------------------------------------------- runtime env


@lru_cache(maxsize=1)
def probe_nvlink() -> bool:
    """What the launcher probes: any NV# link in `nvidia-smi topo -m` on this host (no shell)."""
    exe = shutil.which("nvidia-smi")
    if not exe:
        return False
    try:
        out = subprocess.run(
            [exe, "topo", "-m"], capture_output=True, text=True, timeout=10, check=False
        ).stdout
    except (OSError, subprocess.SubprocessError):
        return False
    return bool(re.search(r"\bNV\d+", out))


def submission_id_for(run_id: str) -> str:
    return f"ultra-console-{run_id}"


def _shim_runtime_env(spec: RunSpec) -> dict[str, Any]:
    """Runtime-env keys that deliver the NemotronH shim to every worker (see shim/); the checkpoint
    path lets a worker without megatron.bridge still log the fields its config.json implies."""
    return shim.runtime_env_additions(hf_checkpoint=f"{spec.paths.model_dir.rstrip('/')}/{spec.model.name}")


def runtime_env(
    spec: RunSpec,
    *,
    nvlink: bool | None = None,
    secrets: Mapping[str, str] | None = None,
    inherit: Mapping[str, str] | None = None,
    with_shim: bool = True,
) -> dict[str, Any]:
    nv = spec.cluster.gpu_nvlink if spec.cluster.gpu_nvlink is not None else nvlink
    if nv is None:
        nv = probe_nvlink()
    master = spec.run.master_addr
    env: dict[str, str] = {
        "PYTHONUNBUFFERED": "1",
        "CUDA_DEVICE_MAX_CONNECTIONS": "1",
        "NCCL_NVLS_ENABLE": "1" if nv else "0",
        **_inherited(inherit),
    }
    env.update(
        {
            "no_proxy": f"127.0.0.1,{master}",
            "MASTER_ADDR": master,
            "SGLANG_SKIP_SGL_KERNEL_VERSION_CHECK": "1",
            "PYTHONPATH": ":".join(dict.fromkeys([spec.paths.miles_root, spec.paths.megatron_path])),
            "RAY_JOB_STOP_SIGNAL": "SIGINT",
            "RAY_JOB_STOP_WAIT_TIME_S": str(spec.run.stop_wait_s),
            # Ray's driver folds "similar" lines across actors ignoring digits; the shim's per-actor line must
            # never be folded, or a wrong scaling factor on one actor hides behind "[repeated 127x ...]".
            "RAY_DEDUP_LOGS_ALLOW_REGEX": re.escape(SHIM_LINE_PREFIX.strip()),
        }
    )
    env.update(spec.run.extra_env)
    env.update(secrets or {})
    out: dict[str, Any] = {"env_vars": env}
    if with_shim:
        shim_env = _shim_runtime_env(spec)
        env.update(shim_env.pop("env_vars", {}))
        out.update(shim_env)
    return out


def _inherited(inherit: Mapping[str, str] | None) -> dict[str, str]:
    """The variables the run takes from the console's environment, where set there."""
    return {k: inherit[k] for k in INHERITED_ENV if inherit and inherit.get(k)}


FR_DIR = "flight_recorder"
FR_DUMP_WAIT_MS = 30000  # the first dump with stacks took 4-12 s (lazy imports); the watchdog waits this long


def flight_recorder_env(spec: RunSpec, run_id: str) -> dict[str, str]:
    """PyTorch Flight Recorder settings for every rank, so an NCCL timeout leaves one dump per rank under
    the run's output dir (`<run>/flight_recorder/rank_<r>`) and a byte written to `pipe_rank_<r>.pipe`
    dumps a rank that hangs (read by `ultra-console collectives`)."""
    prefix = f"{_run_dir(spec, run_id)}/{FR_DIR}"
    return {
        "TORCH_FR_BUFFER_SIZE": "2000",
        "TORCH_NCCL_DUMP_ON_TIMEOUT": "1",
        "TORCH_FR_DUMP_TEMP_FILE": f"{prefix}/rank_",
        "TORCH_NCCL_DEBUG_INFO_PIPE_FILE": f"{prefix}/pipe_rank_",
        "TORCH_NCCL_WAIT_TIMEOUT_DUMP_MILSEC": str(FR_DUMP_WAIT_MS),
    }


def _with_flight_recorder(env: dict[str, Any], spec: RunSpec, run_id: str) -> dict[str, Any]:
    """The flight recorder's variables added where the operator's extra_env did not set them."""
    env_vars = env.setdefault("env_vars", {})
    for key, value in flight_recorder_env(spec, run_id).items():
        env_vars.setdefault(key, value)
    return env


# A resumed attempt's metadata: its chain (attempt 1's run id), its number, the job before it, what that one
# died of, the checkpoint it loads, and the work the failure lost (s): backend/cluster/resume.py writes them.
LINK_KEYS = ("chain", "attempt", "resume_of", "resumed_cause", "resumed_from", "resumed_lost_s")
SPEC_KEY = "spec"  # the whole spec as JSON, so a resume starts from what ran, not from the preset


def spec_metadata(spec: RunSpec) -> str:
    """The spec as compact JSON for the job's metadata; an extra_env variable whose name looks secret is
    left out (its value would be in Ray's job list for anyone to read)."""
    data = spec.model_dump(mode="json")
    env = data["run"]["extra_env"]
    data["run"]["extra_env"] = {k: v for k, v in env.items() if not SECRET_ENV.search(k)}
    return json.dumps(data, separators=(",", ":"), sort_keys=True)


def build_submission(
    spec: RunSpec,
    *,
    run_id: str | None = None,
    secrets: Mapping[str, str] | None = None,
    nvlink: bool | None = None,
    inherit: Mapping[str, str] | None = None,
    with_shim: bool = True,
    links: Mapping[str, str] | None = None,
) -> Submission:
    """The job for `spec`. `secrets` (e.g. {"WANDB_API_KEY": ...}) go only into the runtime env. `links`: more
    metadata (a resumed attempt's chain: its first run's id, the attempt number, the job before)."""
    run_id = run_id or spec.run.id or new_run_id()
    secrets = dict(secrets or {})
    wandb = bool(secrets.get("WANDB_API_KEY"))
    argv = ["python3", spec.paths.resolved_train_script, *train_argv(spec, run_id, wandb=wandb)]
    t, r = spec.train, spec.rollout
    metadata = {
        "ultra_console": "1",
        "run_id": run_id,
        "preset": spec.preset,
        "model": spec.model.name,
        "mode": spec.run.mode,
        "nodes": str(spec.cluster.nodes),
        "gpus": str(spec.cluster.total_gpus),
        "layout": f"tp{t.tp} pp{t.pp} cp{t.cp} ep{t.ep} etp{t.etp if t.etp is not None else '-'}"
        f" | engine {r.gpus_per_engine} ep{r.ep} dp{r.dp}",
        "num_rollout": str(spec.batch.num_rollout),
        "save_interval": str(spec.checkpoint.save_interval),
        SPEC_KEY: spec_metadata(spec),
        **dict(links or {}),
    }
    if spec.paths.train_script:
        metadata["train_script"] = spec.paths.train_script
    if is_simulated(spec.paths.train_script):
        metadata["simulated"] = "1"  # labelled as a simulation wherever the run appears
    return Submission(
        entrypoint=shlex.join(argv),
        argv=argv,
        runtime_env=_with_flight_recorder(
            runtime_env(spec, nvlink=nvlink, secrets=secrets, inherit=inherit, with_shim=with_shim),
            spec,
            run_id,
        ),
        submission_id=submission_id_for(run_id),
        metadata=metadata,
        secret_env=sorted(secrets),
    )


def secrets_from_env(environ: Mapping[str, str]) -> dict[str, str]:
    """The secrets a launch forwards from the operator's environment (only into the runtime env)."""
    return {name: environ[name] for name in SECRET_NAMES if environ.get(name)}


def redact(text: str, secrets: Mapping[str, str] | None = None) -> str:
    """Replace every secret value (and `--wandb-key X`) in free text by ***."""
    for value in (secrets or {}).values():
        if value:
            text = text.replace(value, REDACTED)
    return re.sub(r"(--wandb-key[ =])(\S+)", rf"\1{REDACTED}", text)
