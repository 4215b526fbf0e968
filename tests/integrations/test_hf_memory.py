"""``packing.hf.pack_dataset`` on a dataset loaded from disk holds the input and one chunk, not the output: its peak
resident memory (the child's own ``VmHWM``, as ``benchmarks/hf_datasets.py`` measures it) on 16 M tokens stays
within a tiny dataset's peak plus a few bytes a token.

Measured (2 shared cores; RSS does not depend on load), over the tiny dataset's peak (270 MiB): with the blocks
made in memory (commit c837814) 469 MiB; written chunk by chunk to the cache file, 244 MiB. At 80 M tokens
(``benchmarks/hf_datasets_results.md``): 2.20 GiB before, against a bound of the input's Arrow size + 1 GiB =
1.30 GiB; within it after.
"""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path
from types import ModuleType

import pytest

pytest.importorskip("datasets")
pytestmark = pytest.mark.slow  # datasets of millions of tokens written and packed in a child process

ROOT = Path(__file__).resolve().parents[2]
TOKENS = 16e6
FIXED = 100 * 2**20
"""What a mid-size dataset's peak may hold over a tiny one's whatever its size: a chunk of blocks, kernels, arenas."""
PER_TOKEN = 14
"""Bytes a token beyond ``FIXED``: the input's pages (4-byte ids), the samples read from them (4), the plan; the
blocks made in memory took 17 more."""


def _bench() -> ModuleType:
    """``benchmarks/hf_datasets.py``: its dataset writer and its measured child."""
    if "packing_bench_hf" in sys.modules:
        return sys.modules["packing_bench_hf"]
    spec = importlib.util.spec_from_file_location("packing_bench_hf", ROOT / "benchmarks" / "hf_datasets.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules["packing_bench_hf"] = module
    spec.loader.exec_module(module)
    return module


def _peak(tokens: float, folder: Path) -> tuple[int, str]:
    bench = _bench()
    bench.write_dataset(folder, tokens)
    peak, _seconds, summary = bench.memory(folder, 4096, ROOT)
    return peak, summary


def test_pack_dataset_holds_the_input_and_a_chunk_not_the_output(tmp_path: Path) -> None:
    tiny, _ = _peak(2e4, tmp_path / "tiny")
    mid, summary = _peak(TOKENS, tmp_path / "mid")
    assert "cached True" in summary  # written to the cache file next to the dataset's, read back from it
    assert mid - tiny <= FIXED + PER_TOKEN * TOKENS, (mid >> 20, tiny >> 20)
