"""Fake NVIDIA GPUs for the loopback cluster: `fakenvml`
(the hardware) and `sitecustomize` (its install in Ray)."""
