"""The packaged wheel installs into a fresh venv and runs with no project checkout (README: On your cluster).

Nothing is downloaded: the wheel is built without build isolation, installed with --no-deps and --no-index,
and the venv finds the dependencies through a .pth file naming the test venv's site-packages."""

from __future__ import annotations

import os
import subprocess
import sys
import sysconfig
import zipfile
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]


def _run(cmd: list[str], cwd: Path) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    return subprocess.run(cmd, cwd=cwd, env=env, capture_output=True, text=True, timeout=300, check=False)


def test_wheel_installs_and_runs_without_a_checkout(tmp_path: Path) -> None:
    dist = tmp_path / "dist"
    built = _run(
        [
            sys.executable,
            "-m",
            "pip",
            "wheel",
            "-q",
            "--no-deps",
            "--no-build-isolation",
            "-w",
            str(dist),
            ".",
        ],
        REPO,
    )
    assert built.returncode == 0, built.stderr
    (wheel,) = dist.glob("ultra_console-*.whl")
    names = zipfile.ZipFile(wheel).namelist()
    assert "configs/nemotron-3-ultra-550b-a55b.toml" in names and "configs/miles/args.toml" in names
    assert "console/app.tcss" in names
    venv = tmp_path / "venv"
    # No pip of its own (ensurepip was most of the test's time): the test venv's pip installs into it
    assert _run([sys.executable, "-m", "venv", "--without-pip", str(venv)], tmp_path).returncode == 0
    py = venv / "bin" / "python"
    site = _run([str(py), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"], tmp_path)
    Path(site.stdout.strip(), "deps.pth").write_text(sysconfig.get_paths()["purelib"] + "\n")
    pip = [sys.executable, "-m", "pip", "--python", str(py)]
    inst = _run([*pip, "install", "-q", "--no-deps", "--no-index", str(wheel)], tmp_path)
    assert inst.returncode == 0, inst.stderr
    where = _run([str(py), "-c", "import backend; print(backend.__file__)"], tmp_path)
    assert str(venv) in where.stdout and str(REPO) not in where.stdout
    helped = _run([str(venv / "bin" / "ultra-console"), "--help"], tmp_path)
    assert helped.returncode == 0 and "usage: ultra-console" in helped.stdout
    plan = _run([str(venv / "bin" / "ultra-console"), "plan"], tmp_path)
    assert plan.returncode == 0, plan.stderr
    assert "nemotron-3-ultra-550b-a55b" in plan.stdout and "128 GPUs" in plan.stdout
