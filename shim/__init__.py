"""The NemotronH MoE shim for megatron-bridge. Importing this package never imports megatron."""
