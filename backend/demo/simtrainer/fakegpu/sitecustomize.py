"""Fake NVIDIA GPUs inside Ray's own dashboard agent (a simulation aid; see ray.md §4.4).

Put this directory on PYTHONPATH of a Ray node: every Python process imports it at start-up,
but it only acts inside the dashboard agent (`ray/dashboard/agent.py`), where it replaces the
NVML calls of `NvidiaGpuProvider`, so the real reporter, GCS, `/nodes?view=summary` and the
Prometheus gauges all carry GPUs that do not exist. Labelled "(fake)" in the device name.

The fake hardware itself (holding files, overrides, GPU count and size) is `fakenvml.py`, re-read at
every report (every 5 s); the simulated trainer's miles-dashboard sampler reads the same module.
"""

import sys
from typing import Any

PROBE_NODE_ENV = "ULTRA_CONSOLE_GPU_PROBE_NODE"  # the console's GPU probe's sampler actors (gpu_probe_job.py)


def _node_id_from_argv(argv: list[str]) -> str:
    # sitecustomize runs in every Python process of a fake-GPU node: imports only where hooked
    import os

    if os.environ.get(PROBE_NODE_ENV):
        return os.environ[PROBE_NODE_ENV]
    for i, arg in enumerate(argv):
        if arg.startswith("--node-id="):
            return arg.split("=", 1)[1]
        if arg == "--node-id" and i + 1 < len(argv):
            return argv[i + 1]
    return "unknown"


def _install() -> None:
    import ray._private.thirdparty.pynvml as pynvml  # the probe's NVML (gpu_probe_job.nvml_module)
    from fakenvml import fake_gpus, pynvml_calls  # this directory is on sys.path
    from ray.dashboard.modules.reporter import gpu_providers

    node_id = _node_id_from_argv(sys.argv)
    cls: Any = gpu_providers.NvidiaGpuProvider  # patched in place: Ray's reporter uses this class

    def _initialize(self: Any) -> bool:
        self._initialized = True
        return True

    cls.is_available = lambda self: True
    cls._initialize = _initialize
    cls._shutdown = lambda self: None
    cls.get_gpu_utilization = lambda self: fake_gpus(node_id)
    for name, fn in pynvml_calls(node_id).items():  # the same fake, for a process that reads NVML itself
        setattr(pynvml, name, fn)


def _reads_nvml() -> bool:
    """The dashboard agent (telemetry), the console's GPU kill job (backend/cluster/reaper_job.py, marked
    `--gpu-reaper`), the doctor's node job (`--doctor-job`) and its GPU probe
    (backend/cluster/gpu_probe_job.py: its job marked `--gpu-probe`, its hub and sampler actors by their
    environment; they call pynvml itself) read NVML: all see one fake."""
    # sitecustomize runs in every Python process of a fake-GPU node: imports only where hooked
    import os

    return bool(sys.argv) and (
        sys.argv[0].replace("\\", "/").endswith("ray/dashboard/agent.py")
        or "--gpu-reaper" in sys.argv
        or "--gpu-probe" in sys.argv
        or "--doctor-job" in sys.argv
        or bool(os.environ.get(PROBE_NODE_ENV))
    )


if _reads_nvml():
    try:
        _install()
    except Exception as err:  # never keep the agent from starting
        sys.stderr.write(f"fake GPU shim not installed: {err!r}\n")
