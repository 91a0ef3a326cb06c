"""`ultra-console doctor` on the real 3-node Ray test cluster: a doctor job pinned to every node, one planted
problem per check, each named with its node and its fix.

The nodes share this machine's filesystem, so the paths name the node (`{node_id}`, expanded by the job on its
node): `<tmp>/n/<node id>/out` is a link to one shared directory on every node but the one whose output
directory is planted as not shared (a real directory of its own there), and `<tmp>/n/<node id>/miles` is
missing on the node whose miles is planted as missing. No py-spy and a skewed clock are planted through the
doctor's per-node job environment (backend.cluster.doctor.NODE_ENV).
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from runhelp import PRESET, cli, cli_env, one_line_error

from backend.cluster.doctor import NODE_ENV
from backend.cluster.doctor_job import CLOCK_OFFSET_ENV, TOOL_PATH_ENV
from backend.demo.local_cluster import free_port
from backend.demo.simtrainer import SIM_TRAIN_SCRIPT
from backend.plan.spec import build_spec

pytestmark = [pytest.mark.ray, pytest.mark.timeout(300)]


def layout(tmp: Path, nodes: list[str], *, not_shared: str = "", no_miles: str = "") -> list[str]:
    """Per-node directories (see the module's docstring) and the --preset/--set arguments naming them."""
    spec = build_spec(PRESET)
    (tmp / "models" / spec.model.name).mkdir(parents=True)
    data = tmp / "data" / spec.data.prompt_data
    data.parent.mkdir(parents=True)
    data.write_text('{"prompt": "1+1?", "label": "2"}\n')
    (tmp / "shared").mkdir()
    for node in nodes:
        root = tmp / "n" / node
        root.mkdir(parents=True)
        if node == not_shared:
            (root / "out").mkdir()
        else:
            (root / "out").symlink_to(tmp / "shared")
        if node != no_miles:
            (root / "miles").mkdir()
    base = f"{tmp}/n/{{node_id}}"
    sets = {
        "paths.miles_root": f"{base}/miles",
        "paths.train_script": SIM_TRAIN_SCRIPT,
        "paths.model_dir": f"{tmp}/models",
        "paths.data_dir": f"{tmp}/data",
        "paths.output_dir": f"{base}/out",
        "cluster.nodes": "1",
    }
    return ["--preset", PRESET, *(a for k, v in sets.items() for a in ("--set", f"{k}={v}"))]


def alive(ray_cluster) -> list[str]:
    return [n for i, n in enumerate(ray_cluster.node_ids) if i not in ray_cluster.dead]


def results(proc) -> list[dict]:
    return json.loads(proc.stdout)["results"]


NAMES: dict[str, str] = {}  # node id -> the name the test cluster gave it (the lines name nodes by it)


def line_of(text: str, check: str, node: str) -> str:
    found = [ln for ln in text.splitlines() if ln.split()[1:2] == [check] and f"[{NAMES[node]} (" in ln]
    assert len(found) == 1, text
    return found[0]


def test_a_healthy_cluster_passes_every_check_on_every_node(ray_cluster, tmp_path):
    nodes = alive(ray_cluster)
    args = layout(tmp_path, nodes)
    proc = cli(
        ray_cluster.address,
        tmp_path / "state",
        "doctor",
        *args,
        "--json",
        "--wait",
        "15",
        "--disk-gb",
        "0.001",
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    res = results(proc)
    assert {r["verdict"] for r in res} == {"ok"}, [r for r in res if r["verdict"] != "ok"]
    per_node = {r["check"] for r in res if r["node_id"]}
    assert per_node == {
        "clock",
        "miles",
        "model",
        "data",
        "output",
        "shared",
        "disk",
        "py-spy",
        "ptrace",
        "nvml",
    }
    for check in per_node:
        assert sorted(r["node_id"] for r in res if r["check"] == check) == sorted(nodes), check
    shared = [r["detail"] for r in res if r["check"] == "shared"]
    assert all(f"same directory on all {len(nodes)} node(s)" in d for d in shared), shared
    nvml = [r["detail"] for r in res if r["check"] == "nvml"]
    assert all(d == "8 GPU(s)" for d in nvml), nvml  # the fake NVML, through Ray's own provider
    version = next(r for r in res if r["check"] == "ray-version")
    assert version["detail"].startswith("Ray 2.60"), version


def test_each_planted_problem_is_named_with_its_node_and_fix(ray_cluster, tmp_path):
    head, odd, broken = alive(ray_cluster)[:3]
    NAMES.update({n: f"sim-node-{ray_cluster.node_ids.index(n)}" for n in (head, odd, broken)})
    args = layout(tmp_path, alive(ray_cluster), not_shared=odd, no_miles=broken)
    (tmp_path / "empty-bin").mkdir()
    plants = {broken: {TOOL_PATH_ENV: str(tmp_path / "empty-bin"), CLOCK_OFFSET_ENV: "120"}}
    env = cli_env(tmp_path / "state", **{NODE_ENV: json.dumps(plants)})
    proc = cli(
        ray_cluster.address, tmp_path / "state", "doctor", *args, "--wait", "6", "--disk-gb", "1e9", env=env
    )
    out = proc.stdout
    assert proc.returncode == 3, out + proc.stderr
    assert "Traceback" not in out + proc.stderr

    shared = line_of(out, "shared", odd)
    assert shared.lstrip().startswith("FIX") and "not the directory the other nodes share" in shared
    assert "fix: mount the same shared filesystem at paths.output_dir" in shared
    for good in (head, broken):
        assert line_of(out, "shared", good).lstrip().startswith("OK"), out

    miles = line_of(out, "miles", broken)
    assert miles.lstrip().startswith("FIX") and f"{tmp_path}/n/{broken}/miles does not exist" in miles
    assert "fix: check out miles at paths.miles_root on that node" in miles
    assert line_of(out, "miles", head).lstrip().startswith("OK")

    py_spy = line_of(out, "py-spy", broken)
    assert (
        py_spy.lstrip().startswith("WARN")
        and "py-spy not found" in py_spy
        and "fix: install py-spy" in py_spy
    )
    assert "not checked: py-spy did not pass" in line_of(out, "ptrace", broken)
    assert line_of(out, "py-spy", head).lstrip().startswith("OK")

    clock = line_of(out, "clock", broken)
    assert clock.lstrip().startswith("FIX") and "ahead of the head's" in clock and "fix: run chrony" in clock
    ahead = float(clock.split("at least ")[1].split(" s")[0])
    assert 100 < ahead <= 120, clock
    assert line_of(out, "clock", head).lstrip().startswith("OK")

    disk = line_of(out, "disk", head)
    assert disk.lstrip().startswith("FIX") and "free at" in disk and "--disk-gb asks for" in disk
    assert out.splitlines()[-1].startswith("verdict: ")


def test_an_unreachable_dashboard_is_one_line_with_its_fix_and_bad_input_exits_1(ray_cluster, tmp_path):
    args = layout(tmp_path, alive(ray_cluster))
    dead = f"http://127.0.0.1:{free_port()}"
    proc = cli(dead, tmp_path / "state", "doctor", *args)
    assert proc.returncode == 3, proc.stdout + proc.stderr
    line = next(ln for ln in proc.stdout.splitlines() if ln.split()[1:2] == ["dashboard"])
    assert (
        line.lstrip().startswith("FIX")
        and "unreachable" in line
        and "fix: start Ray with its dashboard" in line
    )
    assert "SKIP clock       not checked: no node job could run" in proc.stdout
    bad = cli(ray_cluster.address, tmp_path / "state", "doctor", "--set", "no.such=1")
    assert bad.returncode == 1 and "no.such" in one_line_error(bad)
