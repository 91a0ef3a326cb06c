"""Raw dashboard reads only the tests make (to pin Ray's own answers; the console never needs them)."""

from __future__ import annotations

from typing import Any, cast

from backend.cluster.dashboard import RayClient


async def raw_data(client: RayClient, path: str, key: str) -> dict[str, Any]:
    """`data[key]` of Ray's answer at `path`, as Ray sent it."""
    payload = cast(dict[str, Any], await client.get_json(path, what=path))
    return cast(dict[str, Any], payload["data"][key])
