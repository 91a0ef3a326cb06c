"""The loopback-only multi-node Ray test cluster: the code lives in backend/localcluster.py (the
`ultra-console demo` starts the same cluster); this module keeps the tests' import path."""

from backend.localcluster import (  # noqa: F401
    FAKEGPU_DIR,
    LOOPBACK,
    REPO,
    LocalRayCluster,
    cluster_env,
    free_port,
)

if __name__ == "__main__":
    import runpy

    runpy.run_module("backend.localcluster", run_name="__main__")
