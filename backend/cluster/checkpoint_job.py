"""The checkpoint reader: a tiny Ray job pinned to a node that reads a run's save directory there (stdlib
only; sent as `python3 -c <source> DIR...` through backend/cluster/node_job.py). One result line per
directory: `ULTRA_CONSOLE_CKPT {...}` (backend/cluster/checkpoint_read.py's report)."""

from __future__ import annotations

import json
import sys

from backend.cluster.checkpoint_read import read_save_dir  # inlined on the node

MARK = "ULTRA_CONSOLE_CKPT "


def main(dirs: list[str]) -> int:
    for root in dirs:
        try:
            report = read_save_dir(root)
        except OSError as err:
            report = {"root": root, "exists": False, "problem": str(err.strerror or err)}
        print(MARK + json.dumps(report), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
