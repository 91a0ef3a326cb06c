"""The doctor's verdicts, pure over facts (backend.cluster.doctor.evaluate): the clock's bracket, the shared
directory's groups, skips after a failed need, a warn's exit status."""

from __future__ import annotations

from backend.cluster.doctor import (
    HeadFacts,
    Inputs,
    Limits,
    NodeFacts,
    check_clock,
    check_shared,
    evaluate,
    load_table,
)
from backend.json_fields import Fields
from backend.plan.spec import build_spec

PRESET = "nemotron-3-ultra-550b-a55b-4layer"


def node(node_id: str, **probes: dict) -> NodeFacts:
    return NodeFacts(node_id, f"n-{node_id}", 8.0, {k: Fields(v) for k, v in probes.items()}, 100.0, 102.0)


def test_clock_is_a_skew_only_when_the_bracket_is_beyond_the_limit():
    spec = build_spec(PRESET)
    i = Inputs(spec, HeadFacts(), limits=Limits(clock_skew_s=5.0))
    assert check_clock(node("a", clock={"t": 101.0}), i).verdict == "ok"
    assert check_clock(node("a", clock={"t": 104.0}), i).verdict == "ok"  # may be the job's start time
    ahead = check_clock(node("a", clock={"t": 130.0}), i)
    assert ahead.verdict == "fail" and "28.0 s ahead" in ahead.detail
    behind = check_clock(node("a", clock={"t": 80.0}), i)
    assert behind.verdict == "fail" and "20.0 s behind" in behind.detail


def test_the_node_outside_the_largest_group_is_the_one_not_shared():
    spec = build_spec(PRESET)
    nodes = (
        node("a", shared={"seen": ["a", "c"], "tried": True}),
        node("b", shared={"seen": ["b"], "tried": True, "waited_s": 6}),
        node("c", shared={"seen": ["a", "c"], "tried": True}),
    )
    i = Inputs(spec, HeadFacts(), nodes)
    assert check_shared(nodes[0], i).verdict == "ok"
    odd = check_shared(nodes[1], i)
    assert odd.verdict == "fail" and "n-a, n-c did not appear" in odd.detail
    alone = Inputs(spec, HeadFacts(), nodes[1:2])
    assert check_shared(nodes[1], alone).verdict == "ok"


def test_an_unreachable_dashboard_skips_what_needs_it_and_a_warning_exits_3():
    from backend.cluster.doctor import DoctorReport

    checks, limits = load_table()
    spec = build_spec(PRESET)
    res = evaluate(checks, Inputs(spec, HeadFacts(config="c", version_error="unreachable"), limits=limits))
    by = {(r.check, r.node): r for r in res}
    assert by[("dashboard", "")].verdict == "fail" and by[("dashboard", "")].fix.startswith("start Ray")
    assert by[("auth", "")].verdict == "skip" and by[("clock", "")].verdict == "skip"
    assert DoctorReport("p", "a", tuple(res)).exit_code == 3
    py_spy = next(c for c in checks if c.id == "py-spy")
    assert py_spy.severity == "warn"
    ok = DoctorReport("p", "a", tuple(r for r in res if r.verdict == "ok"))
    assert ok.exit_code == 0 and ok.summary().startswith("verdict: all good")


def test_the_node_job_reads_its_request_strictly():
    """`--doctor-job`'s JSON: every field without a default required (the first missing one named), lists as
    tuples, keys a newer console adds ignored, anything but an object refused."""
    import json

    import pytest

    from backend.cluster.doctor_job import DoctorRequest

    full = {
        "node_id": "n1",
        "node_ip": "10.0.0.1",
        "token": "t",
        "nodes": ["n1", "n2"],
        "paths": ["/a"],
        "arguments_file": "/m/arguments.py",
        "output_dir": "/out",
        "marker_wait_s": 5.0,
        "from_a_newer_console": 1,
    }
    req = DoctorRequest.parse(json.dumps(full))
    assert req.nodes == ("n1", "n2") and req.paths == ("/a",) and req.marker_wait_s == 5.0
    assert req.py_spy_timeout_s == 10.0  # defaulted
    with pytest.raises(KeyError, match="node_ip"):
        DoctorRequest.parse(json.dumps({k: v for k, v in full.items() if k not in ("node_ip", "token")}))
    with pytest.raises(ValueError, match="not a JSON object"):
        DoctorRequest.parse("[1, 2]")
