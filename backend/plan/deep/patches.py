"""Process-local patches the real checks run under, each restored on exit: a fake torch.distributed world,
an H200's answers to torch.cuda's probes (and the env vars validate_args reads), and Megatron's
argument parser built once instead of on every parse."""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterator
from typing import Any


@contextlib.contextmanager
def hopper_gpu(env: dict[str, str]) -> Iterator[None]:
    """validate_args asks torch.cuda about the GPU and reads env vars: answer as an H200 node would."""
    # only in miles' image: imported when --deep runs
    import torch

    class _Props:
        major, minor, name = 9, 0, "NVIDIA H200"
        total_memory = 141 * 1024**3

    saved = (torch.cuda.get_device_capability, torch.cuda.get_device_properties)
    saved_env = {k: os.environ.get(k) for k in env}
    torch.cuda.get_device_capability = lambda *a, **k: (9, 0)
    torch.cuda.get_device_properties = lambda *a, **k: _Props()  # type: ignore[assignment,unused-ignore]
    os.environ.update(env)
    try:
        yield
    finally:
        torch.cuda.get_device_capability, torch.cuda.get_device_properties = saved
        for key, value in saved_env.items():
            if value is None:
                os.environ.pop(key, None)
            else:
                os.environ[key] = value


@contextlib.contextmanager
def fake_world(world: int, rank: int = 0) -> Iterator[None]:
    """A fake torch.distributed world of `world` ranks in this process (no communication happens)."""
    # only in miles' image: imported when --deep runs
    import torch.distributed as dist
    from torch.testing._internal.distributed.fake_pg import FakeStore

    if dist.is_initialized():
        dist.destroy_process_group()
    dist.init_process_group("fake", store=FakeStore(), rank=rank, world_size=world)
    try:
        yield
    finally:
        dist.destroy_process_group()


_PARSERS: dict[str, Any] = {}


@contextlib.contextmanager
def reused_parser(arguments: Any) -> Iterator[None]:
    """Megatron rebuilds its ~1000-option parser (re-reading its own source for help texts) on every
    parse_args, about 0.2 s; the parser is stateless between parses, so build it once."""
    original = arguments.add_megatron_arguments

    def cached(parser: Any) -> Any:
        if "megatron" not in _PARSERS:
            _PARSERS["megatron"] = original(parser)
        return _PARSERS["megatron"]

    arguments.add_megatron_arguments = cached
    try:
        yield
    finally:
        arguments.add_megatron_arguments = original
