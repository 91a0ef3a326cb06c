"""Property tests: over random layouts, the engine's verdicts equal the catalog arithmetic written out here
independently (each rule's condition, and per-layer parameter counts of Ultra's blocks), and every fix it
names is legal for the rule it fixes."""

from __future__ import annotations

import json
import re
from functools import cache
from typing import Any

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from backend.plan.checks import check
from backend.plan.derived import LayoutFigures, layout_figures
from backend.plan.spec import RunSpec, load_preset

FULL = "nemotron-3-ultra-550b-a55b"
SLICE = "nemotron-3-ultra-550b-a55b-4layer"

# parameters per block, unsharded, at Ultra's dimensions
MAMBA, ATTN, NORM = 421_645_056, 138_420_224, 8192
ROUTER, LATENT, EXPERT, SHARED = 4_194_304, 33_554_432, 20_971_520, 167_772_160
HEADS, GROUPS, M_HEADS, M_GROUPS, EXPERTS, MOE_FFN, VOCAB, HIDDEN = 64, 2, 256, 8, 512, 5120, 131072, 8192


@cache
def preset(name: str) -> RunSpec:
    return load_preset(name)


def with_updates(spec: RunSpec, updates: dict[str, dict[str, Any]]) -> RunSpec:
    return spec.model_copy(
        update={sec: getattr(spec, sec).model_copy(update=vals) for sec, vals in updates.items()}
    )


layouts = st.fixed_dictionaries(
    {
        "preset": st.sampled_from([FULL, SLICE]),
        "cluster": st.fixed_dictionaries(
            {
                "nodes": st.integers(1, 32),
                "gpus_per_node": st.sampled_from([4, 8]),
                "gpu_memory_gb": st.sampled_from([80.0, 141.0]),
                "host_memory_gb": st.sampled_from([512.0, 2048.0]),
            }
        ),
        "train": st.fixed_dictionaries(
            {
                "tp": st.sampled_from([1, 2, 3, 4, 6, 8, 16]),
                "pp": st.integers(1, 9),
                "cp": st.sampled_from([1, 1, 2]),
                "ep": st.sampled_from([1, 2, 3, 4, 8, 16, 32, 64, 128]),
                "etp": st.sampled_from([None, 1, 1, 2, 4, 8]),
                "vpp": st.sampled_from([None, None, None, 1, 2, 3]),
                "sequence_parallel": st.sampled_from([None, None, True, False]),
                "micro_batch_size": st.sampled_from([1, 1, 2, 3]),
                "decoder_first_pipeline_num_layers": st.sampled_from([None] * 6 + [0, 1, 26, 27]),
                "decoder_last_pipeline_num_layers": st.sampled_from([None] * 6 + [1, 3, 27]),
            }
        ),
        "rollout": st.fixed_dictionaries(
            {
                "gpus_per_engine": st.sampled_from([1, 2, 3, 4, 8, 12, 16, 20, 24, 32, 64]),
                "ep": st.sampled_from([1, 2, 4, 8, 16, 32, 64]),
                "dp": st.sampled_from([1, 2, 3, 4, 8]),
                "enable_dp_attention": st.sampled_from([True, True, False]),
                "mem_fraction": st.sampled_from([0.4, 0.7, 0.9]),
                "colocate": st.sampled_from([True, True, False]),
                "num_gpus": st.sampled_from([None, 8, 16, 64, 128]),
            }
        ),
        "batch": st.fixed_dictionaries(
            {
                "global_batch_size": st.sampled_from([16, 64, 96, 128, 130, 256, 512]),
                "rollout_batch_size": st.sampled_from([8, 32, 33]),
                "n_samples_per_prompt": st.sampled_from([4, 8]),
                "num_steps_per_rollout": st.sampled_from([None, None, 1, 2, 4]),
                "over_sampling_batch_size": st.sampled_from([None, None, 16, 64]),
            }
        ),
    }
)


def build(layout: dict[str, Any]) -> RunSpec:
    base = preset(layout["preset"])
    return with_updates(base, {k: v for k, v in layout.items() if k != "preset"})


def _stages(pattern: str, layers: int, pp: int) -> list[str]:
    per = layers // pp
    return [pattern[r * per : (r + 1) * per] for r in range(pp)]


def expected(spec: RunSpec) -> set[tuple[str, str]]:
    """(rule, severity) pairs the catalog says this layout must produce."""
    c, t, r, b, m = spec.cluster, spec.train, spec.rollout, spec.batch, spec.model
    W, gpn = c.nodes * c.gpus_per_node, c.gpus_per_node
    tp, pp, cp, ep = t.tp, t.pp, t.cp, t.ep
    etp = tp if t.etp is None else t.etp
    L, pattern = m.num_layers, m.hybrid_pattern
    sp = (tp > 1 if t.sequence_parallel is None else t.sequence_parallel) and tp > 1
    g, rep, rdp, dpa = r.gpus_per_engine, r.ep, r.dp, r.enable_dp_attention
    out: set[tuple[str, str]] = set()

    def add(rule: str, sev: str = "error") -> None:
        out.add((rule, sev))

    if W % (tp * pp * cp):
        add("A1")
    if W % (etp * ep * pp):
        add("A2")
    if t.etp is None and tp > 1 and ep > 1:
        add("A3", "warning")
    vpp = t.vpp if t.vpp is not None and t.vpp > 1 else None  # validate_args: 1 means no interleaving
    first, last = t.decoder_first_pipeline_num_layers, t.decoder_last_pipeline_num_layers
    if vpp is not None:
        add("D7")
        if pp == 1:
            add("A8")
            add("C3")
    uneven = first is not None or last is not None or t.vpp is not None  # validate_args skips C2 then
    if (first is not None or last is not None) and pp == 1:
        add("H10")
    if uneven and pp > 1 and L % pp:
        add("D7")
    elif (first is not None or last is not None) and pp > 1:
        add("D7", "warning")
    if first is not None or last is not None:  # TransformerConfig, step for step
        given = [x for x in (first, last) if x is not None]
        mid_layers, mid_stages = L - sum(given), pp - len(given)
        if any(x <= 0 or (vpp is not None and x % vpp) for x in given):
            add("B7")
        elif bool(mid_layers) != bool(mid_stages) or (mid_stages and mid_layers % mid_stages):
            add("B7")
        elif mid_stages and vpp is not None and (mid_layers // mid_stages) % vpp:
            add("B7")
    if HEADS % tp:
        add("B1")
    if GROUPS % tp and tp % GROUPS:
        add("B2")
    if ep > 1 and tp > 1 and not sp:
        add("B4", "warning")
    if tp > 1 and not sp:
        add("E2")
    if L % pp and not uneven:
        add("C2")
    if ep > 1 and EXPERTS % ep:
        add("C4")
    if t.sequence_parallel is True and tp == 1:
        add("C5", "warning")
    mbs = 1 if t.use_dynamic_batch_size else t.micro_batch_size  # miles: ignored under dynamic batching
    if W % (tp * pp * cp) == 0 and b.global_batch_size % (mbs * W // (tp * pp * cp)):
        add("C8")
    if t.use_dynamic_batch_size and t.micro_batch_size != 1:
        add("H15", "warning")
    if M_HEADS % tp:
        add("D1")
    if M_GROUPS % tp:
        add("D2")
    # rollout
    attn: int | None = g
    if dpa and rdp > 1:
        attn = g // rdp if g % rdp == 0 else None
        if g % rdp:
            add("G1")
    if rdp > 1 and not dpa:
        add("H2")
    if g % max(1, g // gpn):
        add("G4")
    if rep not in (1, g):
        add("G6")
    if attn is not None:
        if M_HEADS % attn or M_GROUPS % attn:
            add("G9")
        if HEADS % attn or (GROUPS % attn if GROUPS >= attn else attn % GROUPS):
            add("G10")
    if g % rep or EXPERTS % rep or MOE_FFN % (g // rep):
        add("G11")
    if g > gpn and g % gpn:
        add("G12")
    elif g < gpn and gpn % g:
        add("G12", "warning")
    if r.colocate and r.num_gpus is not None and r.num_gpus != W:
        add("H3", "warning")
    if not r.colocate and r.num_gpus is None:
        add("H3")
    pool = W if r.colocate else r.num_gpus
    if pool is not None:
        if pool < g:
            add("H4")
        elif pool % g:
            add("H4", "warning")
    samples = b.rollout_batch_size * b.n_samples_per_prompt
    if b.num_steps_per_rollout is not None:
        if b.global_batch_size != samples // b.num_steps_per_rollout:
            add("H6")
    elif samples < b.global_batch_size:
        add("H6")
    elif samples % b.global_batch_size:
        add("H6", "warning")
    if b.over_sampling_batch_size is not None and b.over_sampling_batch_size < b.rollout_batch_size:
        add("H7")
    # launcher table (info)
    if "layer" in m.name:
        want = (1, 1, W, 1, gpn, 2, gpn, 0.6)
        have_w = True
    else:
        want = (8, 4, 32, 1, 32, 4, 32, 0.7)
        have_w = W == 128
    if not have_w or (tp, pp, ep, t.etp, g, rdp, rep, r.mem_fraction) != want:
        add("H12", "info")
    # memory
    padded = -(-VOCAB // (128 * tp)) * 128 * tp
    stage_params = []
    for i, part in enumerate(_stages(pattern, L, pp)):
        n_m, n_e, n_a = part.count("M"), part.count("E"), part.count("*")
        dense = (
            n_m * ((MAMBA - NORM) / tp + NORM)
            + n_a * ((ATTN - NORM) / tp + NORM)
            + n_e * (ROUTER + LATENT + SHARED / tp + NORM)
        )
        if i == 0:
            dense += padded / tp * HIDDEN
        if i == pp - 1:
            dense += padded / tp * HIDDEN + NORM
        stage_params.append((n_e * EXPERTS / ep * EXPERT / etp, dense))
    worst = max(e + d for e, d in stage_params)
    hbm_need = 6 * worst / 1e9
    if hbm_need > c.gpu_memory_gb:
        add("M1")
    elif hbm_need > 0.8 * c.gpu_memory_gb:
        add("M1", "warning")
    dp_f, edp_f = max(1.0, W / (tp * pp * cp)), max(1.0, W / (etp * ep * pp))
    host_node = max(e / edp_f + d / (dp_f * cp) for e, d in stage_params) * 16 * gpn / 1e9
    if host_node > c.host_memory_gb:
        add("M2")
    elif host_node > 0.8 * c.host_memory_gb:
        add("M2", "warning")
    if attn is not None:
        n_m, n_e, n_a = pattern.count("M"), pattern.count("E"), pattern.count("*")
        rollout = (
            (
                n_e * EXPERTS * EXPERT / g
                + (n_m * MAMBA + n_a * ATTN + 2 * VOCAB * HIDDEN + n_e * SHARED) / attn
                + n_e * (ROUTER + LATENT + NORM)
            )
            * 2
            / 1e9
        )
        budget = r.mem_fraction * c.gpu_memory_gb
        if rollout > budget:
            add("M3")
        elif rollout > 0.8 * budget:
            add("M3", "warning")
    return out


SETTINGS = settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.too_slow])


@SETTINGS
@given(layouts)
def test_engine_matches_catalog_arithmetic(layout: dict[str, Any]) -> None:
    spec = build(layout)
    got = {(f.rule, f.severity) for f in check(spec)}
    assert got == expected(spec), (got ^ expected(spec), layout)


@SETTINGS
@given(layouts)
def test_findings_are_sorted_and_derive_is_consistent(layout: dict[str, Any]) -> None:
    spec = build(layout)
    findings = check(spec)
    ranks = [{"error": 0, "warning": 1, "info": 2}[f.severity] for f in findings]
    assert ranks == sorted(ranks)
    d = layout_figures(spec)
    assert LayoutFigures.from_json(json.loads(json.dumps(d.to_json()))) == d
    c, t = spec.cluster, spec.train
    W = c.nodes * c.gpus_per_node
    grid = t.tp * t.pp * t.cp
    assert d.training.dp == (W // grid if W % grid == 0 else None)
    assert len(d.training.stages) == t.pp
    assert sum(s.layers for s in d.training.stages) == t.pp * (spec.model.num_layers // t.pp)
    pool = W if spec.rollout.colocate else spec.rollout.num_gpus
    g, gpn = spec.rollout.gpus_per_engine, c.gpus_per_node
    processes = None if pool is None else pool // min(g, gpn)  # miles: one process per node of an engine
    assert d.rollout.engine_processes == processes
    # an engine per nodes_per_engine processes, the last one possibly partial (server_group.py:51,56)
    assert d.rollout.engines == (None if processes is None else -(-processes // max(1, g // gpn)))


FIX_FIELD = re.compile(r"(?:use|set) ((?:train|rollout|batch)\.\w+) (?:= )?((?:\d+(?:, | or )?)+)")
FIX_BARE = re.compile(r"use ((?:\d+(?:, | or )?)+)$")
FIX_NODES = re.compile(r"cluster of ((?:\d+(?:, | or )?)+) nodes")
FIXABLE = {
    "A1",
    "A2",
    "B1",
    "B2",
    "C2",
    "C4",
    "C8",
    "D1",
    "D2",
    "G1",
    "G4",
    "G6",
    "G9",
    "G10",
    "G12",
    "H4",
    "H6",
}


def suggestions(rule: str, fix: str) -> list[tuple[str, int]]:
    out = [(m.group(1), int(v)) for m in FIX_FIELD.finditer(fix) for v in re.findall(r"\d+", m.group(2))]
    out += [
        ("cluster.nodes", int(v)) for m in FIX_NODES.finditer(fix) for v in re.findall(r"\d+", m.group(1))
    ]
    bare = FIX_BARE.search(fix)
    if bare and rule in ("D1", "D2"):
        out += [("train.tp", int(v)) for v in re.findall(r"\d+", bare.group(1))]
    return out


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(layouts)
def test_every_named_fix_value_clears_its_rule(layout: dict[str, Any]) -> None:
    spec = build(layout)
    for f in check(spec):
        if f.rule not in FIXABLE:
            continue
        named = suggestions(f.rule, f.fix)
        assert named, (f.rule, f.fix)
        for field, value in named:
            section, name = field.split(".")
            fixed = with_updates(spec, {section: {name: value}})
            still = [x for x in check(fixed) if x.rule == f.rule and x.severity == f.severity]
            assert not still, (f.rule, f.fix, field, value, [x.message for x in still])
