"""The reaper in a PID namespace (`unshare -p`), as inside the recipe's container: NVML reports host PIDs.

A holder whose PID this namespace cannot see, and a visible process that merely has the same PID number but
no job id in its environment, are reported and never signalled; the job's own process (its environment
carries the Ray job id) is killed; the reaper's own ancestor is exempt. The real reaper script and Ray's
real GPU provider run; only the GPUs are fake (backend/demo/simtrainer/fakegpu).
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from backend.demo.local_cluster import FAKEGPU_DIR, REPO

pytestmark = [
    pytest.mark.ray,
    pytest.mark.timeout(120),
    pytest.mark.skipif(
        shutil.which("unshare") is None or os.geteuid() != 0, reason="needs unshare -p (root)"
    ),
]

JOB_HEX = "05000000"
REAPER = REPO / "backend" / "cluster" / "reaper_job.py"
MARK = "ULTRA_CONSOLE_REAP "

# Inside the namespace: bash is PID 1 (the reaper's ancestor); a bystander `sleep` and a job process start
# there; NVML (the fake) says host PIDs hold GPUs 0, 1 and 3 and the job process holds GPU 2.
NAMESPACE_SCRIPT = textwrap.dedent("""\
    set -e
    hold() { printf '%s' "$3" > "$FAKE_GPU_DIR/nsnode/gpu$1-$2.json"; }
    sleep 300 & BYSTANDER=$!
    RAY_JOB_ID=JOBHEX "$PY" -c 'import time; time.sleep(300)' & JOBPROC=$!
    hold 1 $BYSTANDER '{"mem": 9000, "host": true}'
    hold 2 $JOBPROC '{"mem": 11000}'
    hold 3 1 '{"mem": 500, "host": true}'
    echo "PIDS $BYSTANDER $JOBPROC"
    REAP=(-c "$(cat "$REAPER")" --gpu-reaper --node-id=nsnode --job-id JOBHEX --submission-id sid-ns)
    "$PY" "${REAP[@]}" --list
    echo LISTED
    "$PY" "${REAP[@]}" --grace 2 --pid "$HOSTPID" --pid $BYSTANDER --pid $JOBPROC --pid 1
    kill -0 $BYSTANDER && echo "BYSTANDER ALIVE"
    kill $BYSTANDER
""").replace("JOBHEX", JOB_HEX)


def _results(lines: list[str]) -> list[dict[str, object]]:
    return [json.loads(line[len(MARK) :]) for line in lines if line.startswith(MARK)]


def test_unidentifiable_holders_in_a_pid_namespace_are_reported_never_signalled(tmp_path: Path) -> None:
    fake = tmp_path / "fakegpu"
    (fake / "nsnode").mkdir(parents=True)
    # a host process that even carries the job's id: invisible from the namespace, so not provably the job's
    host = subprocess.Popen(
        [sys.executable, "-c", "import time; time.sleep(120)"], env={**os.environ, "RAY_JOB_ID": JOB_HEX}
    )
    try:
        (fake / "nsnode" / f"gpu0-{host.pid}.json").write_text(json.dumps({"mem": 7000, "host": True}))
        env = {
            **os.environ,
            "FAKE_GPU_DIR": str(fake),
            "PY": sys.executable,
            "REAPER": str(REAPER),
            "HOSTPID": str(host.pid),
            "PYTHONPATH": os.pathsep.join([str(FAKEGPU_DIR), str(REPO), os.environ.get("PYTHONPATH", "")]),
        }
        env.pop("RAY_JOB_ID", None)
        out = subprocess.run(
            ["unshare", "-p", "-f", "--mount-proc", "bash", "-c", NAMESPACE_SCRIPT],
            env=env,
            capture_output=True,
            text=True,
            timeout=90,
        )
        assert out.returncode == 0, out.stderr[-2000:]
        lines = out.stdout.splitlines()
        bystander, jobproc = (int(x) for x in next(ln for ln in lines if ln.startswith("PIDS ")).split()[1:])
        cut = lines.index("LISTED")
        listed = {r["gpu"]: r for r in _results(lines[:cut]) if int(str(r["pid"])) > 0}
        killed = {r["pid"]: r for r in _results(lines[cut:]) if int(str(r["pid"])) > 0}

        assert listed[0]["pid"] == host.pid and listed[0]["identity"] == "unidentified"
        assert "not visible in this node's PID namespace" in str(listed[0]["reason"])
        assert listed[1]["pid"] == bystander and listed[1]["identity"] == "unidentified"
        assert (
            "held by a process this node cannot identify as the job's: no job id in its environment"
            == listed[1]["reason"]
        )
        assert listed[2]["pid"] == jobproc and listed[2]["identity"] == "job"
        assert JOB_HEX in str(listed[2]["reason"])
        assert listed[3]["pid"] == 1 and listed[3]["identity"] == "exempt"

        assert killed[host.pid]["action"] == "skipped" and killed[bystander]["action"] == "skipped"
        assert killed[1]["action"] == "skipped" and "parents" in str(killed[1]["reason"])
        assert killed[jobproc]["action"] == "killed" and killed[jobproc]["signal"] == "SIGTERM"
        assert "BYSTANDER ALIVE" in lines  # never signalled
        assert host.poll() is None  # the host process too
    finally:
        host.kill()
        host.wait(10)
