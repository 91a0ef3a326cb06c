"""The shim against the real megatron-bridge 0.6.2 (oracle venv): provider fields, tensor mappings,
the per-actor line, delivery through the Ray setup hook, and `shim-check` with megatron-bridge."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
from megatron.bridge import AutoBridge
from megatron.bridge.models.nemotronh.nemotron_h_bridge import NemotronHBridge
from synth import write_checkpoint
from transformers import AutoConfig

from shim import bridge, logline
from shim.check import run_check

REPO = Path(__file__).resolve().parents[2]
ROUTING_KEYS = {"routed_scaling_factor", "n_group", "topk_group"}


@pytest.fixture
def ckpt(tmp_path: Path) -> Path:
    return write_checkpoint(tmp_path / "ckpt")


@pytest.fixture
def pre_04_bridge(monkeypatch):
    """megatron-bridge as it was before 0.4 (and the radixark fork miles pins, built on it): the
    NemotronH bridge did not map routed_scaling_factor / n_group / topk_group onto the provider.
    0.6.2 maps them through its base CONFIG_MAPPING; removing those three entries reproduces the old
    behaviour on the real code, which is the drift the shim exists for."""
    kept = [pair for pair in NemotronHBridge.CONFIG_MAPPING if pair[0] not in ROUTING_KEYS]
    assert len(kept) == len(NemotronHBridge.CONFIG_MAPPING) - 3
    monkeypatch.setattr(NemotronHBridge, "CONFIG_MAPPING", kept)


def provider_for(ckpt: Path):
    config = AutoConfig.from_pretrained(ckpt, trust_remote_code=False, local_files_only=True)
    return AutoBridge.from_hf_config(config).to_megatron_provider(load_weights=False)


def test_shim_gives_the_provider_every_field(ckpt):
    result = run_check(ckpt, with_shim=True, keep_mtp=False)
    assert result.ok, result.mismatches
    actual = result.actual
    assert actual["moe_router_topk_scaling_factor"] == 5.0
    assert (actual["moe_router_num_groups"], actual["moe_router_group_topk"]) == (1, 1)
    assert actual["num_moe_experts"] == 16 and actual["moe_router_topk"] == 4
    assert actual["moe_latent_size"] == 64 and actual["moe_shared_expert_overlap"] is False
    assert actual["moe_layer_freq"] == [0, 1, 0, 1]
    assert actual["mtp_num_layers"] is None
    assert bridge.installed()
    first = bridge.install()
    assert bridge.install() is first  # idempotent: one registration however often it is called


def test_without_shim_upstream_provider_is_caught(ckpt):
    """megatron-bridge 0.6.2 alone keeps shared-expert overlap on next to the latent MoE, builds the MTP
    head miles does not train, and gives a scalar moe_layer_freq: each is a mismatch."""
    result = run_check(ckpt, with_shim=False, keep_mtp=False)
    assert not result.ok and not bridge.installed()
    wrong = {m["field"]: m["actual"] for m in result.mismatches}
    assert wrong["moe_shared_expert_overlap"] is True
    assert wrong["mtp_num_layers"] == 1
    assert "moe_layer_freq" in wrong


def test_scaling_factor_one_point_zero_without_shim_five_with_it(ckpt, pre_04_bridge):
    without = run_check(ckpt, with_shim=False, keep_mtp=False)
    wrong = {m["field"]: m for m in without.mismatches}
    assert wrong["moe_router_topk_scaling_factor"]["expected"] == 5.0
    assert wrong["moe_router_topk_scaling_factor"]["actual"] in (None, 1.0)  # Megatron reads None as 1.0
    with_shim = run_check(ckpt, with_shim=True, keep_mtp=False)
    assert with_shim.ok and with_shim.actual["moe_router_topk_scaling_factor"] == 5.0


def test_a_config_the_bridge_refuses_is_one_sentence(tmp_path):
    from shim.mapping import ShimConfigError

    bad = write_checkpoint(tmp_path / "bad", num_nextn_predict_layers=-1)
    with pytest.raises(ShimConfigError, match="megatron-bridge cannot build a provider"):
        run_check(bad, with_shim=True)


def test_keep_mtp_env_keeps_the_head(ckpt):
    result = run_check(ckpt, with_shim=True, keep_mtp=True)
    assert (
        result.ok
        and result.actual["mtp_num_layers"] == 1
        and result.actual["mtp_hybrid_override_pattern"] == "*E"
    )


def test_moe_tensor_mappings_added_when_the_base_lacks_them(ckpt, monkeypatch):
    moe_names = set(bridge.MOE_TENSOR_MAPPINGS)
    original = NemotronHBridge.mapping_registry

    def dense_only(self):  # the dense-only upstream registry miles' plugin was written against
        registry = original(self)
        registry.mappings = [m for m in registry.mappings if m.megatron_param not in moe_names]
        return registry

    monkeypatch.setattr(NemotronHBridge, "mapping_registry", dense_only)
    bridge.uninstall()
    base = AutoBridge.from_hf_config(AutoConfig.from_pretrained(ckpt, local_files_only=True))._model_bridge
    assert not moe_names & {m.megatron_param for m in base.mapping_registry().mappings}
    bridge.install()
    ours = AutoBridge.from_hf_config(AutoConfig.from_pretrained(ckpt, local_files_only=True))._model_bridge
    by_name = {m.megatron_param: m.hf_param for m in ours.mapping_registry().mappings}
    assert moe_names <= set(by_name)
    assert (
        by_name["decoder.layers.*.mlp.router.expert_bias"]
        == "backbone.layers.*.mixer.gate.e_score_correction_bias"
    )
    assert (
        by_name["decoder.layers.*.mlp.fc1_latent_proj.weight"]
        == "backbone.layers.*.mixer.fc1_latent_proj.weight"
    )


def test_finalize_logs_one_line_with_the_final_fields(ckpt, capsys):
    bridge.install()
    bridge._logged.clear()
    provider = provider_for(ckpt)
    provider.finalize()
    provider.finalize()
    lines = [line for line in capsys.readouterr().out.splitlines() if line.startswith(logline.LINE_PREFIX)]
    assert len(lines) == 1
    parsed = logline.parse(lines[0])
    assert parsed.status == "applied" and parsed.fields["moe_router_topk_scaling_factor"] == 5.0


def test_a_later_overwrite_is_reported_not_applied(ckpt, capsys):
    bridge.install()
    bridge._logged.clear()
    provider = provider_for(ckpt)
    provider.moe_router_topk_scaling_factor = 1.0  # as if a later step copied a default over it
    provider.finalize()
    parsed = logline.parse(capsys.readouterr().out.strip().splitlines()[-1])
    assert parsed.status == "not_applied"
    assert "moe_router_topk_scaling_factor=1.0 (want 5.0)" in parsed.reason


BUILD_AND_FINALIZE = """
from transformers import AutoConfig
from megatron.bridge import AutoBridge
cfg = AutoConfig.from_pretrained({ckpt!r}, local_files_only=True)
provider = AutoBridge.from_hf_config(cfg).to_megatron_provider(load_weights=False)
provider.finalize()
print("registered:", type(AutoBridge.from_hf_config(cfg)._model_bridge).__mro__[1].__name__)
print("marker:", getattr(provider, "miles_plugin_marker", None))
"""


def run_worker(code: str, tmp_path: Path, ckpt: Path, pythonpath: list[str] | None = None) -> list[str]:
    """A fresh interpreter standing in for a Ray worker: the setup hook runs first, then user code."""
    env = {
        **os.environ,
        "ULTRA_CONSOLE_SHIM_CHECKPOINT": str(ckpt),
        "HF_HUB_OFFLINE": "1",
        "PYTHONPATH": os.pathsep.join([*(pythonpath or []), str(REPO)]),
    }
    script = tmp_path / "worker.py"
    script.write_text("import shim.ray_hook\nshim.ray_hook.setup()\n" + textwrap.dedent(code))
    out = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, env=env, timeout=300)
    assert out.returncode == 0, out.stderr[-3000:]
    return out.stdout.splitlines()


def test_setup_hook_installs_the_shim_when_megatron_bridge_loads(ckpt, tmp_path):
    lines = run_worker(BUILD_AND_FINALIZE.format(ckpt=str(ckpt)), tmp_path, ckpt)
    shim_lines = [logline.parse(line) for line in lines if line.startswith(logline.LINE_PREFIX)]
    assert (
        len(shim_lines) == 1 and shim_lines[0].status == "applied"
    )  # not "mapping only": the bridge is here
    assert shim_lines[0].fields["moe_router_topk_scaling_factor"] == 5.0
    assert "registered: NemotronHBridge" in lines


def test_setup_hook_layers_over_a_plugin_registered_later(ckpt, tmp_path):
    """miles imports its own plugin after megatron.bridge and registers its bridge over ours; the hook
    re-installs on top, so both the plugin's changes and the shim's fields reach the provider."""
    plugin = tmp_path / "plugins" / "miles_plugins" / "megatron_bridge"
    plugin.mkdir(parents=True)
    (plugin.parent / "__init__.py").write_text("")
    (plugin / "__init__.py").write_text(
        textwrap.dedent("""
        from megatron.bridge.models.conversion.model_bridge import MegatronModelBridge
        from megatron.bridge.models.nemotronh.nemotron_h_bridge import NemotronHBridge
        from megatron.core.models.hybrid.hybrid_model import HybridModel

        @MegatronModelBridge.register_bridge(source="NemotronHForCausalLM", target=HybridModel)
        class PluginBridge(NemotronHBridge):
            def provider_bridge(self, hf_pretrained):
                provider = super().provider_bridge(hf_pretrained)
                provider.miles_plugin_marker = True
                provider.moe_router_topk_scaling_factor = 1.0  # the bug the shim must win over
                return provider
    """)
    )
    code = "import megatron.bridge\nimport miles_plugins.megatron_bridge\n" + BUILD_AND_FINALIZE.format(
        ckpt=str(ckpt)
    )
    lines = run_worker(code, tmp_path, ckpt, pythonpath=[str(tmp_path / "plugins")])
    assert "registered: PluginBridge" in lines and "marker: True" in lines
    shim_lines = [logline.parse(line) for line in lines if line.startswith(logline.LINE_PREFIX)]
    assert len(shim_lines) == 1 and shim_lines[0].status == "applied"
    assert shim_lines[0].fields["moe_router_topk_scaling_factor"] == 5.0


def test_shim_check_cli_with_megatron_bridge(ckpt, capsys):
    """The real CLI entry point, in this process (megatron is already imported: no 20 s start-up)."""
    from console.cli import main

    assert main(["shim-check", "--checkpoint", str(ckpt), "--json"]) == 0
    payload = json.loads(capsys.readouterr().out)
    assert payload["ok"] is True and payload["mismatches"] == [] and payload["shim_installed"] is True
    assert (
        payload["actual"]["moe_router_topk_scaling_factor"]
        == payload["expected"]["moe_router_topk_scaling_factor"]
        == 5.0
    )
    assert main(["shim-check", "--checkpoint", str(ckpt), "--without-shim"]) == 2
    out = capsys.readouterr().out
    assert "MISMATCH" in out and "moe_shared_expert_overlap" in out and "WITHOUT the shim" in out
    assert main(["shim-check", "--checkpoint", str(ckpt)]) == 0
    assert "provider built on CPU with the shim: ok" in capsys.readouterr().out
