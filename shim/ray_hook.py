"""Ray `worker_process_setup_hook`: puts the shim into every worker of a console-launched run.

Ray runs `setup()` in each worker process of the job, on every node, before the worker executes any
task or builds any actor -- so before miles builds the model. It must never raise (that would kill
the worker), so every failure becomes the NOT-applied shim line instead.

- megatron.bridge importable (miles' image): the bridge registration is made as soon as
  `megatron.bridge` is imported in that process, and made again after miles' own
  `miles_plugins.megatron_bridge` loads (which registers its bridge over ours), so the shim ends up on
  top whichever loads first. The shim line is logged when the provider is finalized, i.e. only in
  processes that build a model: the train actors.
- megatron.bridge not importable (the simulated trainer): logs the fields computed from the checkpoint
  config.json named by ULTRA_CONSOLE_SHIM_CHECKPOINT, marked "mapping only".
"""

from __future__ import annotations

import importlib.abc
import importlib.util
import os
import sys
from collections.abc import Callable, Sequence
from importlib.machinery import ModuleSpec
from types import ModuleType

from shim import logline
from shim.mapping import ShimConfigError, expected_provider_fields, read_config

CHECKPOINT_ENV = "ULTRA_CONSOLE_SHIM_CHECKPOINT"
FR_PREFIX_ENV = (
    "TORCH_FR_DUMP_TEMP_FILE"  # `<run>/flight_recorder/rank_`: torch writes there, never creates it
)
WATCHED = ("megatron.bridge", "miles_plugins.megatron_bridge")


def _emit(line: str) -> None:
    print(line, file=sys.stdout, flush=True)


class _AfterImport(importlib.abc.MetaPathFinder):
    """Runs a callback right after one of the watched modules finishes executing."""

    def __init__(self, names: tuple[str, ...], callback: Callable[[], None]) -> None:
        self.names = names
        self.callback = callback

    def find_spec(
        self, fullname: str, path: Sequence[str] | None = None, target: ModuleType | None = None
    ) -> ModuleSpec | None:
        if fullname not in self.names:
            return None
        for finder in sys.meta_path:
            if finder is self or not hasattr(finder, "find_spec"):
                continue
            spec = finder.find_spec(fullname, path, target)
            if spec is not None:
                break
        else:
            return None
        loader = spec.loader
        if loader is None or not hasattr(loader, "exec_module"):
            return spec
        original = loader.exec_module
        callback = self.callback

        wrapped: importlib.abc.Loader = loader

        class _Loader(importlib.abc.Loader):
            def create_module(self, spec: ModuleSpec) -> ModuleType | None:
                return wrapped.create_module(spec)

            def exec_module(self, module: ModuleType) -> None:
                original(module)
                callback()

        spec.loader = _Loader()
        return spec


def _install_bridge() -> None:
    try:
        # shim.bridge imports megatron.bridge at its top: only where it exists
        from shim import bridge

        bridge.install()
    except Exception as err:  # never let the shim break the worker; say so in the line instead
        _emit(logline.not_applied(f"bridge registration failed: {type(err).__name__}: {err}"))


def _bridge_importable() -> bool:
    try:
        return importlib.util.find_spec("megatron.bridge") is not None
    except (ImportError, ValueError):
        return False


def mapping_only_line(environ: dict[str, str] | os._Environ[str] | None = None) -> str:
    """The line a worker without megatron.bridge logs: fields from the checkpoint config, or why not."""
    env = os.environ if environ is None else environ
    checkpoint = env.get(CHECKPOINT_ENV)
    if not checkpoint:
        return logline.not_applied(f"{CHECKPOINT_ENV} is not set, so the checkpoint config is unknown")
    try:
        fields = expected_provider_fields(
            read_config(checkpoint), keep_mtp=bool(env.get("MILES_NEMOTRONH_KEEP_MTP"))
        )
    except ShimConfigError as err:
        return logline.not_applied(str(err))
    return logline.applied(fields, mapping_only=True)


def make_dump_dir(environ: dict[str, str] | os._Environ[str] | None = None) -> str | None:
    """The flight recorder's dump folder on this node, made before any rank starts: torch writes a dump
    (NCCL timeout, pipe trigger) into `<prefix><rank>` and silently writes nothing when the folder is
    missing. Returns the folder, or None when none is set or it cannot be made (the line says why)."""
    prefix = (os.environ if environ is None else environ).get(FR_PREFIX_ENV, "")
    folder = os.path.dirname(prefix)
    if not folder:
        return None
    try:
        os.makedirs(folder, mode=0o755, exist_ok=True)
    except OSError as err:
        _emit(f"ultra-console flight recorder: cannot make {folder}: {err.strerror or err}")
        return None
    return folder


def setup() -> None:
    """The hook Ray calls in every worker process (runtime_env worker_process_setup_hook)."""
    make_dump_dir()
    try:
        if not _bridge_importable():
            _emit(mapping_only_line())
            return
        if not any(isinstance(f, _AfterImport) for f in sys.meta_path):
            sys.meta_path.insert(0, _AfterImport(WATCHED, _install_bridge))
        if any(name in sys.modules for name in WATCHED):
            _install_bridge()
    except Exception as err:
        _emit(logline.not_applied(f"setup hook failed: {type(err).__name__}: {err}"))
