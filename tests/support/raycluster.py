"""The loopback-only multi-node Ray test cluster: the code lives in backend/demo/local_cluster.py (the
`ultra-console demo` starts the same cluster); this module keeps the tests' import path."""

from backend.demo.local_cluster import (  # noqa: F401
    FAKEGPU_DIR,
    LOOPBACK,
    REPO,
    LocalRayCluster,
    cluster_env,
    free_port,
)

if __name__ == "__main__":
    import runpy

    runpy.run_module("backend.demo.local_cluster", run_name="__main__")
