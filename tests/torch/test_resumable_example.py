"""The resumable training example, for real: 2 gloo ranks killed (SIGKILL) at a random step, resumed on 1 rank and
killed again, then finished on 3 ranks; every epoch trains every sample exactly once, as the uninterrupted run."""

from __future__ import annotations

import importlib.util
import json
import os
import re
import signal
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = ROOT / "examples" / "train_resumable.py"
ARGS = ["--epochs", "2", "--samples", "160", "--max-seq-length", "128"]


def launch(checkpoint: Path, nproc: int, ids: Path, kill_at: int | None) -> tuple[str, bool]:
    """Run the example on ``nproc`` ranks, resuming from ``checkpoint``; with ``kill_at``, SIGKILL the whole process
    group as soon as ``kill_at`` steps were printed. Returns the output and whether it was killed."""
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    command = [sys.executable, str(SCRIPT), "--checkpoint", str(checkpoint), "--resume", "--nproc", str(nproc)]
    process = subprocess.Popen(
        [*command, *ARGS, "--ids", str(ids)],
        cwd=ROOT,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        start_new_session=True,  # its own process group: the kill takes the spawned ranks too
    )
    assert process.stdout is not None
    lines, steps, killed = [], 0, False
    for line in process.stdout:
        lines.append(line)
        steps += line.startswith("step ")
        if kill_at is not None and steps >= kill_at and not killed:
            os.killpg(process.pid, signal.SIGKILL)
            killed = True
    process.wait(timeout=300)
    return "".join(lines), killed


@pytest.mark.slow
@pytest.mark.timeout(900)  # four runs of up to three ranks, each importing torch: 245 s next to two busy loops
def test_killed_and_resumed_on_1_then_3_ranks_trains_every_sample_once(tmp_path: Path) -> None:
    if importlib.util.find_spec("transformers") is None:
        pytest.skip("transformers is not installed")
    reference, _ = launch(tmp_path / "reference.pt", 2, tmp_path / "reference.json", None)
    assert "done 2 epochs: 160 samples trained once each" in reference, reference[-2000:]
    steps_per_epoch = len(re.findall(r"^step \d+ epoch 0 ", reference, flags=re.M))

    seed = int.from_bytes(os.urandom(4), "little")
    rng = np.random.default_rng(seed)
    first_kill = int(rng.integers(3, 2 * steps_per_epoch - 3))  # anywhere in the two epochs on 2 ranks
    out, killed = launch(tmp_path / "run.pt", 2, tmp_path / "run.json", first_kill)
    assert killed, out[-2000:]
    second_kill = int(rng.integers(1, 3))  # 1 rank, soon after the resume: 3 ranks then have work left
    out1, killed1 = launch(tmp_path / "run.pt", 1, tmp_path / "run.json", second_kill)
    assert killed1 and re.search(r"^step \d+ epoch \d ranks 1 ", out1, flags=re.M), (seed, out1[-2000:])
    out3, _ = launch(tmp_path / "run.pt", 3, tmp_path / "run.json", None)
    assert "done 2 epochs: 160 samples trained once each" in out3, (seed, out3[-2000:])
    first_step = re.search(r"^step (\d+) epoch \d ranks 3 ", out3, flags=re.M)
    assert first_step and int(first_step.group(1)) > 1, (seed, out3[-2000:])  # went on from the checkpoint

    ours = json.loads((tmp_path / "run.json").read_text())
    theirs = json.loads((tmp_path / "reference.json").read_text())
    for epoch in ("0", "1"):
        assert sorted(ours[epoch]) == sorted(theirs[epoch]) == list(range(160))  # every sample once, as uninterrupted
