"""A typed package (PEP 561): the wheel ships ``packing/py.typed``, so a user's ``mypy --strict`` reads the
library's own annotations instead of seeing every name as ``Any``."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]

USER_SCRIPT = """\
import packing

batch = packing.pack([[1, 2], [3]], 4)
reveal_type(batch)
reveal_type(packing.Recipe(8).strategy)
blocks: int = batch.num_blocks
wrong: str = batch.num_blocks
"""


def _installed(tmp_path: Path) -> Path:
    """The package as a user installs it: a wheel built from a copy of the sources, unpacked into a folder."""
    source = tmp_path / "source"
    source.mkdir()
    shutil.copytree(ROOT / "packing", source / "packing", ignore=shutil.ignore_patterns("__pycache__"))
    for name in ("pyproject.toml", "README.md"):
        shutil.copy(ROOT / name, source / name)
    wheels = tmp_path / "wheels"
    build = [sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "-q", "-w", str(wheels)]
    subprocess.run([*build, str(source)], check=True, capture_output=True, timeout=300)
    site = tmp_path / "site"
    (wheel,) = wheels.glob("packing-*.whl")
    with zipfile.ZipFile(wheel) as archive:
        assert "packing/py.typed" in archive.namelist()
        archive.extractall(site)
    return site


def _mypy(site: Path, folder: Path) -> str:
    """``mypy --strict`` on the user's script, with the unpacked wheel on the path as an installed package."""
    (folder / "user.py").write_text(USER_SCRIPT)
    environment = {**os.environ, "PYTHONPATH": str(site)}
    command = [sys.executable, "-m", "mypy", "--strict", "--no-incremental", "--cache-dir", os.devnull, "user.py"]
    done = subprocess.run(command, cwd=folder, env=environment, capture_output=True, text=True, timeout=300)
    return done.stdout


@pytest.mark.slow
def test_a_users_mypy_strict_sees_the_librarys_types(tmp_path: Path) -> None:
    site = _installed(tmp_path)
    report = _mypy(site, tmp_path)
    assert 'user.py:4: note: Revealed type is "packing.batches._packed.PackedBatch"' in report, report
    assert "user.py:5: note: Revealed type is" in report and "'bfd'" in report, report  # the strategies' Literal
    assert "user.py:7: error: Incompatible types in assignment" in report, report  # a real type, not Any
    assert "py.typed" not in report and "import-untyped" not in report, report
    (site / "packing" / "py.typed").unlink()  # without the marker: the same script sees an untyped module
    assert "import-untyped" in _mypy(site, tmp_path)
