"""`ultra-console prepare` on the real 3-node Ray test cluster: one pinned job per node checks that node's own
checkpoint directory and dataset, and `--fetch` completes them from a loopback fake of the hub.

The nodes share this machine's filesystem, so the paths name the node (`{node_id}`, expanded by the job on
its node): each node gets its own directory, and "a shard missing on one node" is a real missing file that
only that node's job can see. One test uses a path without the node's name: all three nodes share it.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from fake_hub import (
    DATASET_FILE,
    DATASET_REPO,
    MODEL_REPO,
    SHARDS,
    FakeHub,
    dataset_files,
    model_files,
    write_files,
)
from runhelp import PRESET, cli, cli_env, one_line_error

pytestmark = pytest.mark.ray

MODEL_NAME = MODEL_REPO.split("/")[1]


def spec_args(root: Path, *, per_node: bool = True) -> list[str]:
    base = f"{root}/{{node_id}}" if per_node else str(root)
    return [
        "--preset",
        PRESET,
        "--set",
        f"paths.model_dir={base}/models",
        "--set",
        f"paths.data_dir={base}/data",
        "--set",
        f"model.name={MODEL_NAME}",
        "--set",
        "model.org=nvidia",
        "--set",
        f"data.prompt_data=tiny-math/{DATASET_FILE}",
        "--set",
        f"data.repo={DATASET_REPO}",
    ]


def ckpt_dir(root: Path, node: str) -> Path:
    return root / node / "models" / MODEL_NAME


def data_file(root: Path, node: str) -> Path:
    return root / node / "data" / "tiny-math" / DATASET_FILE


def complete(root: Path, node: str) -> None:
    write_files(ckpt_dir(root, node), model_files())
    write_files(data_file(root, node).parent, dataset_files())


def report(proc) -> dict:
    return json.loads(proc.stdout)


def by_node(rep: dict) -> dict[str, dict]:
    return {n["node_id"]: n for n in rep["nodes"]}


def problems(node: dict) -> list[tuple[str, str]]:
    out = []
    for part in ("checkpoint", "dataset"):
        for p in (node.get(part) or {}).get("problems") or []:
            out.append((p["kind"], Path(p["path"]).name))
    return sorted(out)


def test_complete_checkpoint_on_every_node_is_ready(ray_cluster, tmp_path):
    alive = [
        n for i, n in enumerate(ray_cluster.node_ids) if i not in ray_cluster.dead
    ]  # earlier tests kill nodes
    for node in alive:
        complete(tmp_path, node)
    proc = cli(ray_cluster.address, tmp_path / "state", "prepare", *spec_args(tmp_path), "--json")
    assert proc.returncode == 0, proc.stderr
    rep = report(proc)
    assert rep["ready"] is True
    assert sorted(by_node(rep)) == sorted(alive)
    for node_id, node in by_node(rep).items():
        assert node["ready"] and node["checkpoint"]["files"] == 2, node
        assert node["checkpoint"]["path"] == str(
            ckpt_dir(tmp_path, node_id)
        )  # `{node_id}` expanded on the node
    text = cli(ray_cluster.address, tmp_path / "state", "prepare", *spec_args(tmp_path))
    assert text.returncode == 0
    assert "verdict: READY (3 of 3 node(s) ready)" in text.stdout
    assert text.stdout.count(" READY") >= 4  # three node rows and the verdict


def test_missing_and_truncated_shard_and_wrong_keys_are_named_per_node(ray_cluster, tmp_path):
    good, no_shard, damaged = ray_cluster.node_ids[:3]
    for node in (good, no_shard, damaged):
        complete(tmp_path, node)
    (ckpt_dir(tmp_path, no_shard) / SHARDS[1]).unlink()
    shard = ckpt_dir(tmp_path, damaged) / SHARDS[0]
    shard.write_bytes(shard.read_bytes()[:40000])
    write_files(data_file(tmp_path, damaged).parent, dataset_files(keys=("question", "answer")))

    proc = cli(ray_cluster.address, tmp_path / "state", "prepare", *spec_args(tmp_path), "--json")
    assert proc.returncode == 3, proc.stderr
    nodes = by_node(report(proc))
    assert nodes[good]["ready"] and problems(nodes[good]) == []
    assert not nodes[no_shard]["ready"]
    assert problems(nodes[no_shard]) == [("missing", SHARDS[1])]
    assert problems(nodes[damaged]) == [("keys", DATASET_FILE), ("short", SHARDS[0])]
    short = nodes[damaged]["checkpoint"]["problems"][0]
    assert short["detail"].startswith("40000 of ") and "header" in short["detail"]

    text = cli(ray_cluster.address, tmp_path / "state", "prepare", *spec_args(tmp_path))
    assert text.returncode == 3
    lines = text.stdout.splitlines()
    assert any(no_shard[:8] in ln and "missing:" in ln and ln.endswith(SHARDS[1]) for ln in lines), (
        text.stdout
    )
    assert any(damaged[:8] in ln and "short:" in ln and SHARDS[0] in ln for ln in lines), text.stdout
    assert any(damaged[:8] in ln and "wrong keys:" in ln and "lacks prompt, label" in ln for ln in lines), (
        text.stdout
    )
    assert not any(good[:8] in ln and ":" in ln.split(good[:8])[1][:3] for ln in lines if "problem" in ln)
    assert lines[-1] == "verdict: NOT READY (1 of 3 node(s) ready)"


def test_bad_input_is_one_line_per_node(ray_cluster, tmp_path):
    nodes = ray_cluster.node_ids[:3]
    write_files(ckpt_dir(tmp_path, nodes[0]), {"config.json": b"{}"})  # no index
    ckpt_dir(tmp_path, nodes[1]).mkdir(parents=True)
    (ckpt_dir(tmp_path, nodes[1]) / "config.json").write_text("{not json")
    # nodes[2]: nothing at all
    proc = cli(ray_cluster.address, tmp_path / "state", "prepare", *spec_args(tmp_path))
    assert proc.returncode == 3 and "Traceback" not in proc.stdout + proc.stderr
    lines = proc.stdout.splitlines()

    def said(node: str, what: str, tail: str) -> bool:
        """One line for `node` (its label is the node's name now; its paths carry its id) saying `what`."""
        return any(f"): {what}: " in ln and node in ln and tail in ln for ln in lines)

    assert said(nodes[0], "missing", "(no index: the shards cannot be checked)"), proc.stdout
    assert said(nodes[1], "unreadable", "config.json (does not parse"), proc.stdout
    assert said(
        nodes[2], "missing", f"{ckpt_dir(tmp_path, nodes[2])} (the checkpoint directory does not exist)"
    ), proc.stdout
    bad = one_line_error(
        cli(ray_cluster.address, tmp_path / "state", "prepare", "--preset", "no-such-preset")
    )
    assert "unknown preset" in bad


@pytest.fixture
def hub():
    repos = {("model", MODEL_REPO): model_files(), ("dataset", DATASET_REPO): dataset_files()}
    server = FakeHub(repos, chunk_delay_s=0.02).start()
    yield server
    server.stop()


def test_fetch_completes_each_node_and_resumes_partial_downloads(ray_cluster, tmp_path, hub):
    done, empty, partial = ray_cluster.node_ids[:3]
    complete(tmp_path, done)
    files = model_files()
    ckpt = ckpt_dir(tmp_path, partial)
    write_files(
        ckpt,
        {
            "config.json": files["config.json"],
            "model.safetensors.index.json": files["model.safetensors.index.json"],
        },
    )
    (ckpt / SHARDS[0]).write_bytes(files[SHARDS[0]][:30000])  # a truncated shard: resumed, not discarded
    (ckpt / (SHARDS[1] + ".part")).write_bytes(files[SHARDS[1]][:50000])  # an interrupted download
    config_before = (ckpt / "config.json").stat().st_mtime_ns

    env = cli_env(tmp_path / "state", HF_ENDPOINT=hub.endpoint)
    proc = cli(
        ray_cluster.address,
        tmp_path / "state",
        "prepare",
        *spec_args(tmp_path),
        "--fetch",
        env=env,
        timeout=240,
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "verdict: READY (3 of 3 node(s) ready)" in proc.stdout
    for node in (done, empty, partial):
        for name, data in files.items():
            assert (ckpt_dir(tmp_path, node) / name).read_bytes() == data, (node, name)
        assert data_file(tmp_path, node).read_bytes() == dataset_files()[DATASET_FILE]
    assert (ckpt / "config.json").stat().st_mtime_ns == config_before  # a complete file is never rewritten
    assert not list(ckpt.glob("*.part"))
    # resumed where the partial files ended, each from its own byte
    ranges = sorted(r.range for r in hub.downloads(SHARDS[0]) + hub.downloads(SHARDS[1]) if r.range)
    assert ranges == ["bytes=30000-", "bytes=50000-"]
    # the complete node downloaded nothing; the empty one everything; the partial one only two shard tails
    assert len(hub.downloads(SHARDS[0])) == 2 and len(hub.downloads("config.json")) == 1
    lines = proc.stdout.splitlines()

    def tag(node: str) -> str:
        """How a line names the node: the local cluster's node name, with the IP all its nodes share."""
        return f"[sim-node-{ray_cluster.node_ids.index(node)} (127.0.0.1)]"

    assert any(f"{tag(empty)} checkpoint: fetching {SHARDS[1]}" in ln for ln in lines), proc.stdout
    assert any(f"{tag(partial)} checkpoint: resuming {SHARDS[1]} 48.8 KiB of" in ln for ln in lines), (
        proc.stdout
    )
    assert any(f"{tag(empty)} dataset: {DATASET_FILE} complete" in ln for ln in lines), proc.stdout
    assert any(f"{tag(done)} checkpoint: fetched 0 file(s)" in ln for ln in lines), proc.stdout


def test_fetch_of_a_shared_directory_happens_once(ray_cluster, tmp_path, hub):
    env = cli_env(tmp_path / "state", HF_ENDPOINT=hub.endpoint)
    proc = cli(
        ray_cluster.address,
        tmp_path / "state",
        "prepare",
        *spec_args(tmp_path, per_node=False),
        "--fetch",
        "--json",
        env=env,
        timeout=240,
    )
    assert proc.returncode == 0, proc.stderr
    rep = report(proc)
    assert rep["ready"] and len(rep["nodes"]) == 3
    for name in model_files():
        assert len(hub.downloads(name)) == 1, name  # three nodes, one download
    shared = [n for n in rep["nodes"] if any("shares" in f for f in n["fetched"])]
    assert len(shared) == 2, rep["nodes"]
    assert "] checkpoint: shares " in proc.stderr  # progress goes to stderr with --json


def test_fetch_without_a_hub_is_one_line_per_node(ray_cluster, tmp_path):
    env = cli_env(tmp_path / "state", HF_ENDPOINT="http://127.0.0.1:9")
    proc = cli(
        ray_cluster.address,
        tmp_path / "state",
        "prepare",
        *spec_args(tmp_path),
        "--fetch",
        env=env,
        timeout=300,
    )
    assert proc.returncode == 3 and "Traceback" not in proc.stdout + proc.stderr
    failed = [
        ln
        for ln in proc.stdout.splitlines()
        if "checkpoint: fetch failed: cannot reach the hub at http://127.0.0.1:9" in ln
    ]
    assert len(failed) == 3, proc.stdout
