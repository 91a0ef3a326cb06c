"""Reusable widgets of the app; each carries its own DEFAULT_CSS."""
