"""The export writers hold one chunk of the output, not the whole table: the resident peak of writing a
mid-size plan in another layout (or with loss weights) through the command line's writer, measured in a fresh
process, stays under half of what the output weighs as Arrow columns. Building the whole table first (the
writer before it was chunked) needs more than all of it."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]

CHILD = r"""
import json, sys
import numpy as np
import pyarrow.parquet as pq
from pathlib import Path
import packing.batches._packed as packed
from packing import read_rows
from packing.batches._packed import PackedBatch
from packing._cli import _writer
from packing.planning._plans import plan

layout, mode, output = sys.argv[1], sys.argv[2] or None, Path(sys.argv[3])
packed.CHUNK_TOKENS = 1 << 18  # chunks of 256 K token slots: about a hundredth of this output
rng = np.random.default_rng(0)
lengths = np.maximum(rng.lognormal(5.0, 0.8, 120_000).astype(np.int64), 1)  # about 24 M tokens
values = rng.integers(0, 50_000, int(lengths.sum())).astype(np.int32)
rows = np.split(values, np.cumsum(lengths)[:-1])
samples = read_rows(rows)
del rows, values
lazy = PackedBatch.of(plan(samples.lengths, 1024, strategy="bfd"), samples)
writer = _writer(output, layout, mode)
if mode is None and layout != "packing":
    writer(PackedBatch.of(plan([1], 1024, strategy="bfd"), read_rows([[1]])), output)  # imports and compiles first
def status(key):
    return int([line for line in open("/proc/self/status") if line.startswith(key)][0].split()[1]) * 1024
before = status("VmRSS")
with open("/proc/self/clear_refs", "w") as handle:
    handle.write("5")  # the peak from here on
writer(lazy, output)
peak = status("VmHWM")
table = pq.read_table(output)
print(json.dumps({"before": before, "peak": peak, "output": table.nbytes, "rows": table.num_rows,
                  "tokens": int(samples.lengths.sum())}))
"""


def _resettable_peak() -> bool:
    try:
        with open("/proc/self/clear_refs", "w") as handle:
            handle.write("5")
        return True
    except OSError:
        return False


@pytest.mark.slow
@pytest.mark.skipif(not sys.platform.startswith("linux") or not _resettable_peak(), reason="needs Linux's VmHWM reset")
@pytest.mark.parametrize(
    ("layout", "mode"), [("trl", ""), ("flattening", ""), ("packing", "token"), ("trl", "sequence")]
)
def test_export_writes_one_chunk_at_a_time(tmp_path: Path, layout: str, mode: str) -> None:
    output = tmp_path / "out.parquet"
    done = subprocess.run(
        [sys.executable, "-c", CHILD, layout, mode, str(output)],
        cwd=ROOT,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
        capture_output=True,
        text=True,
        check=False,
    )
    assert done.returncode == 0, done.stderr[-2000:]
    found = json.loads(done.stdout.strip().splitlines()[-1])
    assert found["tokens"] > 20_000_000 and found["rows"] > 20_000
    grown = found["peak"] - found["before"]
    assert grown < found["output"] / 2, (
        f"the write grew the resident set by {grown:,} bytes; the output is {found['output']:,}"
    )
