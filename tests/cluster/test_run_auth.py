"""Token auth end to end through the CLI: 401 without a token, 403 with a wrong one, works with it
(flag or RAY_AUTH_TOKEN), and the token never shows up in output or the audit log."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from runhelp import cli, cli_env, one_line_error

pytestmark = [pytest.mark.ray, pytest.mark.timeout(180)]


def test_token_auth_on_the_cli(ray_auth_cluster, tmp_path: Path) -> None:
    addr, state, token = ray_auth_cluster.address, tmp_path / "state", ray_auth_cluster.token
    line = one_line_error(cli(addr, state, "nodes"))
    assert "requires a token" in line and "RAY_AUTH_TOKEN" in line
    line = one_line_error(cli(addr, state, "--token", "wrong-token", "status"))
    assert "refused the token" in line
    ok = cli(addr, state, "--token", token, "nodes", "--json")
    assert ok.returncode == 0, ok.stderr
    assert len(json.loads(ok.stdout)["nodes"]) == 1
    via_env = cli(addr, state, "nodes", env=cli_env(state, RAY_AUTH_TOKEN=token))
    assert via_env.returncode == 0 and "1 alive, 0 dead" in via_env.stdout
    assert token not in ok.stdout + ok.stderr + via_env.stdout + via_env.stderr
    # no run exists on this cluster yet: a clear line, not a traceback
    line = one_line_error(cli(addr, state, "--token", token, "status"))
    assert "no training run found" in line
