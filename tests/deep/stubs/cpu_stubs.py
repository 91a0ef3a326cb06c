"""Test-only stand-ins for packages with no usable CPU build in the oracle venv.

- Transformer Engine: megatron-bridge imports ``transformer_engine.pytorch`` at module top level (its
  LoRA layers), so ``megatron.bridge`` cannot be imported without something answering that name.
  ``transformer_engine_torch`` stays absent, so Megatron still sees no TE kernels.
- torchvision: its PyPI wheel fails to load next to the CPU torch (``torchvision::nms does not
  exist``), and sglang's config registry needs transformers to believe it is there.

The finder serves each root and every submodule as a module whose attributes are inert placeholder
classes: enough to import, never enough to run (nothing in the deep checks builds a layer or decodes
an image).
"""

from __future__ import annotations

import importlib
import importlib.abc
import importlib.machinery
import sys
import types

VERSIONS = {"transformer_engine": "0.0.0", "torchvision": "0.28.0"}


class _PlaceholderMeta(type):
    """Class attributes of a placeholder (``Foo.apply``, ``Foo.Bar``) are placeholders too."""

    def __getattr__(cls, name: str):
        if name.startswith("__"):
            raise AttributeError(name)
        return _PlaceholderMeta(name, (_Placeholder,), {"__module__": cls.__module__})


class _Placeholder(metaclass=_PlaceholderMeta):
    """Stands for any TE class or function; constructing or calling one says why it cannot work."""

    def __init__(self, *args, **kwargs):
        raise RuntimeError("transformer_engine is a test stub in this environment")


class _StubModule(types.ModuleType):
    def __getattr__(self, name: str):
        if name.startswith("__"):
            raise AttributeError(name)
        if name[:1].islower():  # TE's namespaces (pytorch, common.recipe, ...) are lower-case
            value = importlib.import_module(f"{self.__name__}.{name}")
        else:
            value = _PlaceholderMeta(name, (_Placeholder,), {"__module__": self.__name__})
        setattr(self, name, value)
        return value


class _Finder(importlib.abc.MetaPathFinder, importlib.abc.Loader):
    def find_spec(self, fullname, path=None, target=None):
        if fullname.split(".")[0] in VERSIONS:
            return importlib.machinery.ModuleSpec(fullname, self, is_package=True)
        return None

    def create_module(self, spec):
        module = _StubModule(spec.name)
        module.__path__ = []
        module.__version__ = VERSIONS[spec.name.split(".")[0]]
        return module

    def exec_module(self, module):
        return None


def install() -> None:
    """Put the finder first on ``sys.meta_path`` (idempotent)."""
    if not any(isinstance(f, _Finder) for f in sys.meta_path):
        sys.meta_path.insert(0, _Finder())
