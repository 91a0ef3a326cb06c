"""A CUDA out-of-memory death as PyTorch and torch_memory_saver print it (miles-log-formats.md §3).

Why: the console must name the GPU, the actor and asked-vs-free from the real text of a real OOM, so the
simulator dies the same way: `[torch_memory_saver.cpp] TorchMemorySaver::malloc return OOM` lines from
every train process (Ray folds the copies into `[repeated Nx across cluster]`), then a
`torch.OutOfMemoryError` with PyTorch's exact message, which reaches the driver inside Ray's
`RayTaskError(OutOfMemoryError)` and ends the job FAILED. No torch is imported.
"""

from __future__ import annotations

from collections.abc import Callable

from backend.demo.simtrainer.fakegpu.fakenvml import IDLE_MIB, total_mib

GIB = 1024**3
MIB = 1024**2


class OutOfMemoryError(RuntimeError):
    """Prints as `torch.OutOfMemoryError: ...` in a traceback, like PyTorch's own class."""

    __module__ = "torch"

    def __reduce__(self) -> tuple[Callable[[str], OutOfMemoryError], tuple[str]]:
        # by this module's function, not by the class's name (there is no `torch` to import it from)
        return (_rebuild, (str(self.args[0]) if self.args else "",))


def _rebuild(message: str) -> OutOfMemoryError:
    return OutOfMemoryError(message)


def capacity_bytes() -> int:
    """What `torch.cuda.get_device_properties().total_memory` says for the fake GPU (NVML total minus
    the driver's reservation): 139.80 GiB on an H200."""
    return (total_mib() - IDLE_MIB) * MIB


def malloc_oom_line(size: int, device: int) -> str:
    return f"[torch_memory_saver.cpp] TorchMemorySaver::malloc return OOM size={size} device={device}"


def oom_message(gpu: int, pid: int, asked: int, free: int) -> str:
    """PyTorch's CUDACachingAllocator message, numbers in GiB with two decimals."""
    total = capacity_bytes()
    in_use = total - free
    allocated = int(in_use * 0.94)
    reserved = in_use - allocated - 2 * GIB
    return (
        f"CUDA out of memory. Tried to allocate {asked / GIB:.2f} GiB. GPU {gpu} has a total capacity of "
        f"{total / GIB:.2f} GiB of which {free / GIB:.2f} GiB is free. Process {pid} has {in_use / GIB:.2f} "
        f"GiB memory in use. Of the allocated memory {allocated / GIB:.2f} GiB is allocated by PyTorch, and "
        f"{max(reserved, 0) / GIB:.2f} GiB is reserved by PyTorch but unallocated. If reserved but "
        "unallocated memory is large try setting PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True to avoid "
        "fragmentation.  See documentation for Memory Management  "
        "(https://pytorch.org/docs/stable/notes/cuda.html#environment-variables)"
    )


ASKED = int(2.10 * GIB)
FREE = int(1.02 * GIB)
