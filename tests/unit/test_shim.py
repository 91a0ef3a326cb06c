"""The shim's pure parts in the main venv (no megatron): mapping, log line, Ray package, setup hook, CLI."""

from __future__ import annotations

import json
import subprocess
import sys
import zipfile
from io import BytesIO
from pathlib import Path

import pytest
from inproc_cli import run_cli

import shim
from shim import logline, ray_hook
from shim.mapping import ShimConfigError, expected_provider_fields, mismatches, read_config
from shim.ray_hook import CHECKPOINT_ENV, mapping_only_line

REPO = Path(__file__).resolve().parents[2]
ULTRA_PATTERN = (
    "MEMEMEM*EMEMEM*EMEMEMEM*EMEMEMEM*EMEMEM*EMEMEMEM*EMEMEMEM*EMEMEM*EMEMEMEM*EMEMEMEM*EMEMEM*"
    "EMEMEMEM*EMEMEMEME"
)


def _parsed(line: str) -> logline.ShimLine:
    parsed = logline.parse(line)
    assert parsed is not None, line
    return parsed


def ultra_config(**changes) -> dict:
    """config.json of Nemotron-3-Ultra-550B-A55B as its Hugging Face checkpoint ships it."""
    cfg = {
        "architectures": ["NemotronHForCausalLM"],
        "model_type": "nemotron_h",
        "hidden_size": 8192,
        "num_hidden_layers": 108,
        "hybrid_override_pattern": ULTRA_PATTERN,
        "num_attention_heads": 64,
        "num_key_value_heads": 2,
        "head_dim": 128,
        "intermediate_size": 5120,
        "moe_intermediate_size": 5120,
        "n_routed_experts": 512,
        "num_experts_per_tok": 22,
        "n_shared_experts": 1,
        "moe_shared_expert_intermediate_size": 10240,
        "moe_latent_size": 2048,
        "routed_scaling_factor": 5.0,
        "n_group": 1,
        "topk_group": 1,
        "mamba_num_heads": 256,
        "mamba_head_dim": 64,
        "n_groups": 8,
        "vocab_size": 131072,
        "num_nextn_predict_layers": 1,
        "mtp_hybrid_override_pattern": "*E",
    }
    cfg.update(changes)
    return cfg


def write_checkpoint(tmp_path: Path, config: dict | str) -> Path:
    tmp_path.mkdir(parents=True, exist_ok=True)
    text = config if isinstance(config, str) else json.dumps(config)
    (tmp_path / "config.json").write_text(text)
    return tmp_path


# --------------------------------------------------------------------------- mapping


def test_ultra_fields_carry_scaling_groups_latent_and_drop_mtp():
    fields = expected_provider_fields(ultra_config(), keep_mtp=False)
    assert fields["num_moe_experts"] == 512 and fields["moe_router_topk"] == 22
    assert (
        fields["moe_router_score_function"] == "sigmoid" and fields["moe_router_enable_expert_bias"] is True
    )
    assert fields["moe_router_topk_scaling_factor"] == 5.0
    assert (fields["moe_router_num_groups"], fields["moe_router_group_topk"]) == (1, 1)
    assert fields["moe_latent_size"] == 2048 and fields["moe_shared_expert_overlap"] is False
    assert fields["moe_shared_expert_intermediate_size"] == 10240 and fields["moe_ffn_hidden_size"] == 5120
    freq = fields["moe_layer_freq"]
    assert isinstance(freq, list)
    assert len(freq) == 108 and sum(freq) == 48 and freq[:3] == [0, 1, 0]
    assert fields["mtp_num_layers"] is None and fields["mtp_hybrid_override_pattern"] is None
    json.dumps(fields)  # JSON-able: it travels in the log line


def test_mtp_kept_only_when_asked(monkeypatch):
    kept = expected_provider_fields(ultra_config(), keep_mtp=True)
    assert kept["mtp_num_layers"] == 1 and kept["mtp_hybrid_override_pattern"] == "*E"
    monkeypatch.setenv("MILES_NEMOTRONH_KEEP_MTP", "1")
    assert expected_provider_fields(ultra_config())["mtp_num_layers"] == 1
    monkeypatch.setenv("MILES_NEMOTRONH_KEEP_MTP", "")
    assert expected_provider_fields(ultra_config())["mtp_num_layers"] is None


def test_newer_spelling_and_defaults():
    cfg = ultra_config(
        layers_block_type=["mamba", "moe", "attention", "moe"],
        mtp_layers_block_type=["attention", "moe"],
        num_hidden_layers=4,
    )
    del cfg["hybrid_override_pattern"], cfg["routed_scaling_factor"], cfg["n_group"], cfg["topk_group"]
    del cfg["moe_shared_expert_intermediate_size"], cfg["moe_latent_size"]
    fields = expected_provider_fields(cfg, keep_mtp=True)
    assert fields["moe_layer_freq"] == [0, 1, 0, 1]
    assert fields["moe_router_topk_scaling_factor"] == 1.0  # HF's default when the key is absent
    assert fields["moe_shared_expert_intermediate_size"] == 5120  # n_shared_experts x moe_intermediate_size
    assert "moe_latent_size" not in fields and "moe_shared_expert_overlap" not in fields
    assert fields["mtp_hybrid_override_pattern"] == "*E"


def test_dense_needs_nothing_and_bad_configs_are_one_sentence():
    assert expected_provider_fields(ultra_config(n_routed_experts=0)) == {}
    with pytest.raises(ShimConfigError, match="not a NemotronH"):
        expected_provider_fields({"model_type": "llama", "architectures": ["LlamaForCausalLM"]})
    with pytest.raises(ShimConfigError, match="routed_scaling_factor must be a number"):
        expected_provider_fields(ultra_config(routed_scaling_factor="5"))
    with pytest.raises(ShimConfigError, match="n_group must be an integer"):
        expected_provider_fields(ultra_config(n_group=1.5))
    with pytest.raises(ShimConfigError, match="unknown layer type 'ssm'"):
        expected_provider_fields(ultra_config(hybrid_override_pattern=None, layers_block_type=["ssm"]))


def test_read_config_errors(tmp_path):
    with pytest.raises(ShimConfigError, match="does not exist"):
        read_config(tmp_path / "nope")
    with pytest.raises(ShimConfigError, match="not valid JSON"):
        read_config(write_checkpoint(tmp_path / "a", "{nope"))
    with pytest.raises(ShimConfigError, match="JSON object"):
        read_config(write_checkpoint(tmp_path / "b", "[1]"))


def test_mismatches_catch_a_one_point_zero_scaling_factor():
    want = expected_provider_fields(ultra_config(), keep_mtp=False)
    assert mismatches(want, dict(want)) == []
    wrong = {**want, "moe_router_topk_scaling_factor": 1.0, "moe_layer_freq": (0, 1)}
    got = {m["field"]: m for m in mismatches(want, wrong)}
    assert set(got) == {"moe_router_topk_scaling_factor", "moe_layer_freq"}
    assert got["moe_router_topk_scaling_factor"]["actual"] == 1.0
    assert mismatches(want, {**want, "moe_router_topk_scaling_factor": 5.0 + 1e-12}) == []
    missing = {k: v for k, v in want.items() if k != "moe_router_num_groups"}
    assert [m["field"] for m in mismatches(want, missing)] == ["moe_router_num_groups"]


# --------------------------------------------------------------------------- log line


def test_log_line_forms_round_trip():
    fields: dict[str, object] = {"moe_router_topk_scaling_factor": 5.0, "num_moe_experts": 512}
    line = logline.applied(fields)
    assert line == (
        "ultra-console shim: applied NemotronH provider fields "
        '{"moe_router_topk_scaling_factor":5.0,"num_moe_experts":512}'
    )
    assert logline.parse(f"(MegatronTrainRayActor pid=12, ip=127.0.0.1) {line}") == logline.ShimLine(
        "applied", fields
    )
    mapped = logline.applied(fields, mapping_only=True)
    assert mapped.startswith(shim.APPLIED_PREFIX + "(mapping only; megatron.bridge not importable) {")
    assert _parsed(mapped).status == "mapping_only"
    bad = logline.not_applied("bridge\nregistration failed")
    assert bad == "ultra-console shim: NOT applied: bridge registration failed"
    assert logline.parse(bad) == logline.ShimLine("not_applied", reason="bridge registration failed")
    assert _parsed(shim.APPLIED_PREFIX + "{truncated").status == "not_applied"
    assert logline.parse("step 3: {'train/loss': 0.1}") is None


# --------------------------------------------------------------------------- Ray delivery


def test_import_shim_never_imports_megatron_or_torch():
    code = (
        "import sys, shim, shim.ray_hook, shim.check, shim.package; "
        "print(sorted(m for m in sys.modules if m.split('.')[0] in ('megatron', 'torch', 'transformers')))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=REPO, check=True)
    assert out.stdout.strip() == "[]"


def test_package_zip_is_deterministic_and_importable(tmp_path):
    uri, data = shim.package()
    assert uri.startswith("gcs://_ray_pkg_") and uri.endswith(".zip")
    assert shim.package.__wrapped__() == (uri, data)  # same bytes when built again
    names = zipfile.ZipFile(BytesIO(data)).namelist()
    assert {"shim/__init__.py", "shim/ray_hook.py", "shim/bridge.py", "shim/mapping.py"} <= set(names)
    assert not any("__pycache__" in n for n in names)
    zipfile.ZipFile(BytesIO(data)).extractall(tmp_path)
    code = "import shim.ray_hook, sys; print(shim.ray_hook.__file__)"
    out = subprocess.run(
        [sys.executable, "-c", code],
        capture_output=True,
        text=True,
        cwd=tmp_path,
        env={"PYTHONPATH": str(tmp_path)},
        check=True,
    )
    assert out.stdout.strip().startswith(str(tmp_path))
    assert shim.upload_path(uri) == f"/api/packages/gcs/{uri.removeprefix('gcs://')}"


def test_runtime_env_additions_shape():
    env = shim.runtime_env_additions("/models/ultra")
    assert env == {
        "py_modules": [shim.package()[0]],
        "worker_process_setup_hook": "shim.ray_hook.setup",
        "env_vars": {CHECKPOINT_ENV: "/models/ultra"},
    }
    assert shim.runtime_env_additions()["env_vars"] == {}


def test_mapping_only_line(tmp_path):
    ckpt = write_checkpoint(tmp_path, ultra_config())
    parsed = _parsed(mapping_only_line({CHECKPOINT_ENV: str(ckpt)}))
    assert parsed.status == "mapping_only" and parsed.fields["moe_router_topk_scaling_factor"] == 5.0
    assert parsed.fields["mtp_num_layers"] is None
    kept = _parsed(mapping_only_line({CHECKPOINT_ENV: str(ckpt), "MILES_NEMOTRONH_KEEP_MTP": "1"}))
    assert kept.fields["mtp_num_layers"] == 1
    assert "is not set" in _parsed(mapping_only_line({})).reason
    assert "does not exist" in _parsed(mapping_only_line({CHECKPOINT_ENV: str(tmp_path / "x")})).reason


def test_setup_hook_in_a_worker_without_megatron(tmp_path):
    """What Ray runs first in each worker: exactly one line, and a broken config never raises."""
    ckpt = write_checkpoint(tmp_path / "ok", ultra_config())
    run = [sys.executable, "-c", "import shim.ray_hook as h; h.setup(); h.setup.__name__"]
    out = subprocess.run(
        run,
        capture_output=True,
        text=True,
        cwd=REPO,
        check=True,
        env={"PYTHONPATH": str(REPO), CHECKPOINT_ENV: str(ckpt)},
    )
    lines = [line for line in out.stdout.splitlines() if line.startswith(shim.LINE_PREFIX)]
    assert len(lines) == 1 and _parsed(lines[0]).status == "mapping_only"
    broken = write_checkpoint(tmp_path / "bad", "{")
    out = subprocess.run(
        run,
        capture_output=True,
        text=True,
        cwd=REPO,
        env={"PYTHONPATH": str(REPO), CHECKPOINT_ENV: str(broken)},
    )
    assert out.returncode == 0 and out.stdout.startswith(shim.NOT_APPLIED_PREFIX)


def test_setup_hook_makes_the_flight_recorder_folder_before_any_rank(tmp_path):
    """Every worker of the run, on every node, makes `<run>/flight_recorder/` (torch never does); a folder
    that cannot be made is one line, never an exception."""
    folder = tmp_path / "run" / "flight_recorder"
    run = [sys.executable, "-c", "import shim.ray_hook as h; h.setup()"]
    env = {"PYTHONPATH": str(REPO), "TORCH_FR_DUMP_TEMP_FILE": f"{folder}/rank_"}
    subprocess.run(run, capture_output=True, text=True, cwd=REPO, check=True, env=env)
    assert folder.is_dir()
    (tmp_path / "file").write_text("x")
    blocked = {**env, "TORCH_FR_DUMP_TEMP_FILE": f"{tmp_path}/file/fr/rank_"}
    out = subprocess.run(run, capture_output=True, text=True, cwd=REPO, env=blocked)
    assert out.returncode == 0 and "flight recorder: cannot make" in out.stdout
    assert ray_hook.make_dump_dir({}) is None


# ------------------------------------------------------------------------- shim-check without megatron-bridge


def cli(*args: str, real: bool = False) -> subprocess.CompletedProcess[str]:
    """`ultra-console shim-check ARGS`; in this process (support/inproc_cli.py) but for one real subprocess
    (`real`: the exit status and stderr as a shell sees them)."""
    if not real:
        return run_cli(["shim-check", *args])
    return subprocess.run(
        [sys.executable, "-m", "console.cli", "shim-check", *args],
        capture_output=True,
        text=True,
        cwd=REPO,
        timeout=120,
    )


def test_shim_check_without_bridge(tmp_path):
    ckpt = write_checkpoint(tmp_path, ultra_config())
    out = cli("--checkpoint", str(ckpt), "--json")
    assert out.returncode == 0, out.stderr
    payload = json.loads(out.stdout)
    assert payload["ok"] is True and payload["actual"] is None and payload["mismatches"] == []
    assert payload["expected"]["moe_router_topk_scaling_factor"] == 5.0
    text = cli("--checkpoint", str(ckpt))
    assert text.returncode == 0 and "moe_router_topk_scaling_factor" in text.stdout
    assert "megatron.bridge not importable" in text.stdout


@pytest.mark.parametrize(
    "content, message",
    [
        (None, "config.json does not exist"),
        ("{oops", "is not valid JSON"),
        (json.dumps({"model_type": "llama"}), "not a NemotronH checkpoint"),
    ],
)
def test_shim_check_bad_input_is_one_line(tmp_path, content, message):
    if content is not None:
        write_checkpoint(tmp_path, content)
    out = cli("--checkpoint", str(tmp_path), real=content is None)
    assert out.returncode == 1 and out.stdout == ""
    assert out.stderr.count("\n") == 1 and message in out.stderr and "Traceback" not in out.stderr


def test_setup_hook_reports_a_failed_registration(tmp_path):
    """A megatron.bridge the shim cannot register with (here: an empty stand-in) gives the NOT-applied
    line when it is imported -- the worker itself keeps running."""
    fake = tmp_path / "site" / "megatron" / "bridge"
    fake.mkdir(parents=True)
    (fake / "__init__.py").write_text("")
    code = "import shim.ray_hook as h; h.setup(); import megatron.bridge; print('worker alive')"
    out = subprocess.run(
        [sys.executable, "-c", code],
        capture_output=True,
        text=True,
        cwd=REPO,
        timeout=60,
        env={"PYTHONPATH": f"{tmp_path / 'site'}:{REPO}"},
    )
    assert out.returncode == 0, out.stderr
    lines = out.stdout.splitlines()
    assert lines[-1] == "worker alive"
    shim_lines = [_parsed(line) for line in lines if line.startswith(shim.LINE_PREFIX)]
    assert len(shim_lines) == 1 and shim_lines[0].status == "not_applied"
    assert shim_lines[0].reason.startswith("bridge registration failed: ModuleNotFoundError")
