"""One node name everywhere (issue 35): a cause that names a node by the IP or id the log gave says the name
the GPU pane gives that node, with the IP beside it; what no single node has stays as the log wrote it."""

from __future__ import annotations

from miles_log_shapes import OOM_TRACEBACK

from backend.cluster.telemetry import ClusterSnapshot, NodeSnapshot, parse_nodes_summary
from backend.demo.sample_run import snapshot
from backend.node_names import NodeNames, display_name
from backend.signals.dead_run import diagnosis_panel
from backend.signals.monitor import RunMonitor
from console.commands._cause import cause_lines
from console.widgets.gpu_fleet import fleet_rows, gpu_holders

NODE3_ID = "03" + "ab" * 27  # the sample cluster's node-03, at 10.0.0.3


def _names() -> NodeNames:
    return snapshot(16, 8).names


def test_an_ip_says_the_nodes_name_with_the_ip_beside_it() -> None:
    names = _names()
    assert names.shown("10.0.0.3") == "node-03 (10.0.0.3)"
    assert names.in_text("OOM on 10.0.0.3: asked for 2 GiB") == "OOM on node-03 (10.0.0.3): asked for 2 GiB"
    assert (
        names.in_text("at the end of a sentence: 10.0.0.3.")
        == "at the end of a sentence: node-03 (10.0.0.3)."
    )
    # an address with its port stays whole, the name after it
    assert names.in_text("store at 10.0.0.3:29500 timed out") == "store at 10.0.0.3:29500 (node-03) timed out"


def test_a_node_id_or_its_prefix_says_the_name() -> None:
    names = _names()
    assert names.in_text(f"node {NODE3_ID} died") == "node node-03 (10.0.0.3) died"
    assert names.in_text(f"node {NODE3_ID[:8]} died") == "node node-03 (10.0.0.3) died"
    assert names.in_text(f"node {NODE3_ID.upper()} died") == "node node-03 (10.0.0.3) died"
    # the IP and the id of one node, side by side, are one mention
    assert names.in_text(f"node 10.0.0.3 ({NODE3_ID}) died") == "node node-03 (10.0.0.3) died"


def test_what_no_single_node_has_stays_as_written() -> None:
    names = _names()
    for text in (
        "10.0.9.9 is no node of this cluster",
        "step 12345678 of 99999999",  # numbers are not ids, even where an id starts with their digits
        "a commit deadbeefcafe and a version 1.2.3.4.5",
        "10.0.0.30 and 110.0.0.3 are other addresses",
    ):
        assert names.in_text(text) == text
    shared = ClusterSnapshot(
        nodes=[NodeSnapshot(node_id=f"{i}a" * 28, name=f"sim-{i}", ip="127.0.0.1") for i in range(3)]
    ).names
    assert shared.in_text("on 127.0.0.1") == "on 127.0.0.1"  # three nodes on one host: which one is unknown
    assert shared.in_text("node " + "1a" * 28) == "node sim-1 (127.0.0.1)"  # the id still names one
    unnamed = ClusterSnapshot(nodes=[NodeSnapshot(node_id=f"{i}b" * 28, ip="127.0.0.1") for i in range(2)])
    once = unnamed.names.in_text(f"node {'1b' * 28} died")
    assert once == "node 127.0.0.1 (1b1b1b1b) died" and unnamed.names.in_text(once) == once
    assert NodeNames().in_text("on 10.0.0.3") == "on 10.0.0.3"


def test_naming_twice_names_once() -> None:
    names = _names()
    once = names.in_text("OOM on 10.0.0.3 and store 10.0.0.3:29500")
    assert names.in_text(once) == once


def test_rays_default_name_is_the_ip_itself() -> None:
    snap = ClusterSnapshot(nodes=[NodeSnapshot(node_id="cd" * 28, name="10.0.0.7", ip="10.0.0.7")])
    assert snap.names.in_text("OOM on 10.0.0.7") == "OOM on 10.0.0.7"
    assert snap.nodes[0].label == "10.0.0.7 (cdcdcdcd)"  # the id tells apart what one IP cannot
    assert snap.names.in_text("node " + "cd" * 28) == "node 10.0.0.7 (cdcdcdcd)"


def test_one_display_name_for_the_pane_the_label_and_the_cause() -> None:
    snap = snapshot(16, 8)
    node3 = snap.node(NODE3_ID)
    assert node3 is not None
    assert node3.display_name == "node-03" and node3.label == "node-03 (10.0.0.3)"
    assert [row.label for row in fleet_rows(snap)] == [n.display_name for n in snap.nodes]
    assert display_name(NodeSnapshot(node_id="ef" * 28, hostname="gpu-host-9", ip="10.1.0.9")) == "gpu-host-9"
    assert display_name(NodeSnapshot(node_id="ef" * 28, ip="10.1.0.9")) == "10.1.0.9"
    assert display_name(NodeSnapshot(node_id="ef" * 28)) == "efefefef"


def test_the_gpu_holders_line_names_nodes_as_the_rows_do() -> None:
    node = NodeSnapshot.model_validate(
        {
            "node_id": NODE3_ID,
            "name": "node-03",
            "ip": "10.0.0.3",
            "gpu_source": "probe",
            "gpus": [{"index": 0, "processes": [{"pid": 41, "mem_mb": 4096}]}],
        }
    )
    assert gpu_holders(ClusterSnapshot(nodes=[node])) == ("node-03 g0 pid 41 4G",)


def _oom() -> RunMonitor:
    monitor = RunMonitor()
    monitor.feed_text("\n".join(OOM_TRACEBACK) + "\n")
    monitor.on_job_status("FAILED", "exit code 1")
    return monitor


def test_the_diagnosis_panel_and_status_name_the_node_as_the_pane_does() -> None:
    found = _oom().diagnosis()
    assert found is not None and found.cause.node == "10.0.0.3"
    panel = diagnosis_panel(found, None, _names()).text()
    assert "pid=4101 on node-03 (10.0.0.3):" in panel
    assert "· node node-03 (10.0.0.3) ·" in panel
    lines = cause_lines(found, names=_names())
    assert "on node-03 (10.0.0.3):" in lines[0]
    assert any(line.startswith("  where ") and "node node-03 (10.0.0.3)" in line for line in lines)
    assert any(line.startswith("  then ") and "node-03 (10.0.0.3)" in line for line in lines)
    # without the cluster's list (a replay, `metrics --from-log`) the log's own words stay
    assert "node 10.0.0.3" in diagnosis_panel(found).text()
    assert found.cause.line in panel  # the log's line itself is never rewritten


# ------------------------------------------------------------------ nodes on one host (issue 26 follow-ups)

SHARED_IDS = [f"{i}c" * 28 for i in range(3)]  # three nodes of one machine: one hostname, one IP


def _shared_host(*, names: bool) -> ClusterSnapshot:
    """Ray's answers for a loopback test cluster whose node 2 died: the summary's entry of a dead node has
    lost its node name (Ray's death notice carries none); the state API lists it (unless `names` is off)."""
    summary = {
        "summary": [
            {
                "ip": "127.0.0.1",
                "hostname": "vm",
                "raylet": {"nodeId": nid, "state": "DEAD" if i == 2 else "ALIVE"}
                | ({"nodeName": f"sim-node-{i}"} if names and i != 2 else {}),
            }
            for i, nid in enumerate(SHARED_IDS)
        ]
    }
    state = [
        {
            "node_id": nid,
            "node_ip": "127.0.0.1",
            "state": "DEAD" if i == 2 else "ALIVE",
            "state_message": "health check failed due to missing too many heartbeats" if i == 2 else "",
        }
        | ({"node_name": f"sim-node-{i}"} if names else {})
        for i, nid in enumerate(SHARED_IDS)
    ]
    return parse_nodes_summary(summary, state, taken_at=1.0)


def test_a_dead_node_keeps_its_cluster_name() -> None:
    snap = _shared_host(names=True)
    dead = snap.node(SHARED_IDS[2])
    assert dead is not None and not dead.alive
    assert dead.label == "sim-node-2 (127.0.0.1)"  # was "vm (127.0.0.1)": the host every node is on
    assert snap.names.in_text(f"node {SHARED_IDS[2]} died") == "node sim-node-2 (127.0.0.1) died"


def test_a_hostname_every_node_has_carries_the_nodes_short_id() -> None:
    snap = _shared_host(names=False)
    labels = [n.label for n in snap.nodes]
    assert sorted(labels) == sorted(f"vm {nid[:8]} (127.0.0.1)" for nid in SHARED_IDS), labels
    said = snap.names.in_text(f"node {SHARED_IDS[1]} died")
    assert said == f"node vm {SHARED_IDS[1][:8]} (127.0.0.1) died" and snap.names.in_text(said) == said
    # one node on its own host: its hostname names it, as before
    alone = NodeSnapshot(node_id="ef" * 28, hostname="gpu-host-9", ip="10.1.0.9")
    assert ClusterSnapshot(nodes=[alone]).nodes[0].label == "gpu-host-9 (10.1.0.9)"


def test_a_name_that_holds_its_address_is_not_given_it_again() -> None:
    """The catalog words a node death `node {ip} ({node_id}) died`: on a shared IP the id names the node,
    whose label already holds the IP."""
    shared = _shared_host(names=True).names
    said = shared.in_text(f"node 127.0.0.1 ({SHARED_IDS[1]}) died: Ray missed its heartbeats")
    assert said == "node sim-node-1 (127.0.0.1) died: Ray missed its heartbeats", said
    assert shared.in_text(said) == said
    names = _names()  # an address with its port, and the node's id beside it: one node, named once
    assert names.in_text(f"store 10.0.0.3:29500 ({NODE3_ID})") == "store 10.0.0.3:29500 (node-03)"
    assert names.in_text(f"node {NODE3_ID} (10.0.0.3:29500)") == "node 10.0.0.3:29500 (node-03)"


def test_the_panel_and_status_name_a_dead_node_on_a_shared_host_once() -> None:
    monitor = RunMonitor()
    monitor.feed_text(
        f"(raylet) The node with node id: {SHARED_IDS[2]} and address: 127.0.0.1 and node name: sim-node-2 "
        "has been marked dead because the detector has missed too many heartbeats from it.\n"
    )
    monitor.on_job_status("FAILED", "exit code 1")
    found = monitor.diagnosis()
    assert found is not None and found.cause.id == "node-dead", found
    names = _shared_host(names=True).names
    panel = diagnosis_panel(found, None, names).text()
    lines = "\n".join(cause_lines(found, names=names))
    for text in (panel, lines):
        assert "sim-node-2 (127.0.0.1) died" in text and "(127.0.0.1))" not in text, text
