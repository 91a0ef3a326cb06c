"""Interpreter start-up for the oracle venv only (put on sys.path by a .pth file that build_env.sh writes).

Why each piece exists:
- ``typing.override`` is 3.12-only; megatron.training uses it, and the oracle venv runs Python 3.11.
- Transformer Engine and torchvision have no usable CPU build here; cpu_stubs answers their imports.
"""

import typing

import typing_extensions

if not hasattr(typing, "override"):
    typing.override = typing_extensions.override

import cpu_stubs

cpu_stubs.install()
