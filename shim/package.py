"""The shim as a Ray `py_modules` package, and the runtime-env keys that deliver it.

Ray's own client zips a local `py_modules` directory and uploads it before submitting; the console
submits over plain HTTP, so it does the same by hand: `package()` gives the zip (deterministic, so
the same shim gives the same `gcs://_ray_pkg_<sha>.zip` URI and is uploaded once) and
`upload_path()` the dashboard endpoint (`GET` -> 200 if present / 404, `PUT` body = the zip bytes).
"""

from __future__ import annotations

import hashlib
import io
import zipfile
from functools import lru_cache
from pathlib import Path

from shim.ray_hook import CHECKPOINT_ENV

SETUP_HOOK = "shim.ray_hook.setup"
PACKAGE_DIR = Path(__file__).resolve().parent
_EPOCH = (1980, 1, 1, 0, 0, 0)


def _files() -> list[Path]:
    return sorted(p for p in PACKAGE_DIR.rglob("*.py") if "__pycache__" not in p.parts)


@lru_cache(maxsize=1)
def package() -> tuple[str, bytes]:
    """(URI, zip bytes) of the shim package; the zip holds `shim/...` at its top level."""
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w", compression=zipfile.ZIP_DEFLATED) as archive:
        for path in _files():
            info = zipfile.ZipInfo(f"shim/{path.relative_to(PACKAGE_DIR).as_posix()}", date_time=_EPOCH)
            info.external_attr = 0o644 << 16
            info.compress_type = zipfile.ZIP_DEFLATED
            archive.writestr(info, path.read_bytes())
    data = buffer.getvalue()
    digest = hashlib.sha1(data).hexdigest()  # a content address, not a security hash
    return f"gcs://_ray_pkg_{digest}.zip", data


def upload_path(uri: str) -> str:
    """Dashboard path for a `gcs://` package URI: `/api/packages/gcs/<name>`."""
    protocol, _, name = uri.partition("://")
    return f"/api/packages/{protocol}/{name}"


def runtime_env_additions(hf_checkpoint: str | None = None) -> dict[str, object]:
    """Keys to merge into a job's runtime_env (env_vars merged key by key, the rest set as is)."""
    uri, _ = package()
    env_vars = {CHECKPOINT_ENV: hf_checkpoint} if hf_checkpoint else {}
    return {"py_modules": [uri], "worker_process_setup_hook": SETUP_HOOK, "env_vars": env_vars}


def carries_shim(runtime_env: object) -> bool:
    """Whether a job's runtime env (as Ray reports it) runs the shim's setup hook in its workers."""
    return isinstance(runtime_env, dict) and runtime_env.get("worker_process_setup_hook") == SETUP_HOOK
