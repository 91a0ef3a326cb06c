"""On a real GPU: the reaper's list and kill modes against real NVML through Ray 2.60's own GPU provider.

Run on a machine with a GPU, torch, psutil and Ray: `python3 bench/h200_reaper_check.py` (writes
`$OUT/h200_reaper.json`). The capture from an H200 (2026-12-01) is
tests/data/ray_samples/h200_reaper_identity.json; that machine had no Ray installed, so it ran Ray 2.60's own
`gpu_providers.py` and its pynvml copy alone (the two helpers they
import from the rest of Ray, `env_bool` and `log_once`, stubbed).

A job-like orphan (its environment carries a Ray job id, re-parented to init, as an SGLang scheduler is
once its engine actor dies) and a bystander (no job id) each hold GPU memory through torch. The reaper
must list both with their real NVML memory, identify only the orphan as the job's, kill it and spare the
bystander. Also measured: the reaper's whole run (python start + NVML read + identity), and how long NVML
keeps listing the orphan after the reaper reports it killed.
"""

import json
import os
import subprocess
import sys
import time

OUT = os.environ.get("OUT", "/tmp")
HERE = os.path.dirname(os.path.abspath(__file__))
REAPER = open(os.path.join(HERE, "..", "backend", "cluster", "reaper_job.py")).read()
MARK = "ULTRA_CONSOLE_REAP "
JOB = "0a000000"
HOLD = (
    "import torch, time, os, sys\n"
    "x = torch.empty(int(sys.argv[1]) * 2**20, dtype=torch.uint8, device='cuda'); torch.cuda.synchronize()\n"
    "open(sys.argv[2], 'w').write(str(os.getpid())); time.sleep(600)\n"
)
clean = {k: v for k, v in os.environ.items() if k != "RAY_JOB_ID"}
env = clean
result = {}


def reaper(*args):
    t0 = time.perf_counter()
    out = subprocess.run(
        [sys.executable, "-c", REAPER, "--gpu-reaper", "--node-id=h200", *args],
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    lines = [json.loads(ln[len(MARK) :]) for ln in out.stdout.splitlines() if ln.startswith(MARK)]
    return lines, time.perf_counter() - t0, out.stderr[-1500:]


def wait_file(path, timeout=120):
    deadline = time.time() + timeout
    while time.time() < deadline:
        if os.path.exists(path) and open(path).read().strip():
            return int(open(path).read())
        time.sleep(0.2)
    raise SystemExit(f"{path} never written")


for p in ("/tmp/orphan.pid", "/tmp/bystander.pid"):
    if os.path.exists(p):
        os.remove(p)
# the orphan: started by a shell that exits at once (double fork), its environment carrying the job id
subprocess.run(
    [
        "setsid",
        "bash",
        "-c",
        f'RAY_JOB_ID={JOB} "{sys.executable}" -c "$0" 3000 /tmp/orphan.pid >/dev/null 2>&1 &',
        HOLD,
    ],
    env=clean,
    check=True,
)
bystander = subprocess.Popen([sys.executable, "-c", HOLD, "1000", "/tmp/bystander.pid"], env=clean)
orphan = wait_file("/tmp/orphan.pid")
wait_file("/tmp/bystander.pid")
result["orphan_pid"], result["bystander_pid"] = orphan, bystander.pid
with open(f"/proc/{orphan}/stat") as fh:
    result["orphan_ppid"] = int(fh.read().rsplit(")", 1)[1].split()[1])

raw = subprocess.run(
    [
        sys.executable,
        "-c",
        "import json; from ray.dashboard.modules.reporter.gpu_providers import "
        "GpuMetricProvider as G; p = G(); p.initialize(); u = p.get_gpu_usage(); "
        "print(json.dumps([{k: (v if k != 'processes_pids' else {str(a): b for a, b in (v or {}).items()}) "
        "for k, v in g.items()} for g in u], default=str))",
    ],
    env=env,
    capture_output=True,
    text=True,
)
result["ray_provider_reading"] = raw.stdout.strip()[:4000] or raw.stderr[-1500:]

listed, list_s, err = reaper("--list", "--job-id", JOB, "--submission-id", "sid-h200")
result["list"], result["list_wall_s"], result["list_stderr"] = listed, round(list_s, 3), err
killed, kill_s, err = reaper(
    "--pid", str(orphan), "--pid", str(bystander.pid), "--grace", "5", "--job-id", JOB
)
done_at = time.perf_counter()
result["kill"], result["kill_wall_s"], result["kill_stderr"] = killed, round(kill_s, 3), err

import pynvml  # noqa: E402  (the image's)

pynvml.nvmlInit()
handle = pynvml.nvmlDeviceGetHandleByIndex(0)
while time.perf_counter() - done_at < 20:
    pids = {p.pid for p in pynvml.nvmlDeviceGetComputeRunningProcesses(handle)}
    if orphan not in pids:
        break
    time.sleep(0.05)
result["nvml_still_listed_orphan_s_after_kill"] = round(time.perf_counter() - done_at, 3)
result["nvml_pids_after"] = sorted(pids)
result["bystander_alive_after"] = bystander.poll() is None
bystander.kill()
bystander.wait(10)
print(json.dumps(result, indent=1, default=str))
with open(os.path.join(OUT, "h200_reaper.json"), "w") as fh:
    json.dump(result, fh, indent=1, default=str)
