"""A cluster whose node names carry numbers past 9 (`node-1` .. `node-12`), listed by Ray in shuffled order:
the shape that shows whether a listing counts (`node-2` before
`node-10`) or spells (`node-10` before `node-2`)."""

from __future__ import annotations

import copy
import json
from pathlib import Path
from typing import Any

SAMPLES = Path(__file__).parents[1] / "data" / "ray_samples"
COUNTED = [f"node-{i}" for i in range(1, 13)]


def counted_nodes_summary() -> dict[str, Any]:
    """The fake-GPU sample's dashboard summary with twelve
    worker nodes, node-1..node-12, in Ray's own order."""
    raw = json.loads((SAMPLES / "nodes_summary_fakegpu.json").read_text())
    template = raw["data"]["summary"][1]
    summary = []
    for i in (7, 12, 2, 10, 1, 11, 3, 9, 4, 8, 5, 6):
        node = copy.deepcopy(template)
        node["raylet"]["nodeId"] = f"{i:02x}" * 28
        node["raylet"]["nodeName"] = f"node-{i}"
        node["raylet"]["isHeadNode"] = False
        summary.append(node)
    raw["data"]["summary"] = summary
    return raw
