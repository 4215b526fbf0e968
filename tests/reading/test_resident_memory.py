"""``python -m packing pack`` keeps every row form on the bounded path: its peak resident memory (the child's own
``VmHWM``, as ``benchmarks/forms.py`` measures it) on a mid-size file stays within a tiny file's peak plus a few
bytes a token, where reading the rows whole (Python lists of every row, int64 ids, then a join) took about 55.

Measured at 12 M tokens (2 shared cores; RSS does not depend on load), peak over the tiny file's (254 MiB): before
the chunked reader (commit f83815f) ids/jsonl 564 MiB, ids/csv 575, mask/jsonl 693, pc_ids/jsonl 596, all over the
434 MiB this test allows; after, 230, 249, 238 and 258. Text through a tokenizer is left out: read whole it took 350
MiB over the tiny file's at this size and 286 read in chunks, too close to tell apart here (at 60 M characters
1.33 GiB before, 0.76 after: ``benchmarks/forms_results.md``).
"""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path
from types import ModuleType

import pytest

pytestmark = pytest.mark.slow  # files of millions of tokens written and packed in a child process

ROOT = Path(__file__).resolve().parents[2]
TOKENS = 12e6
FIXED = 160 * 2**20
"""What a mid-size file's peak holds over a tiny file's whatever its size: kernels compiled or loaded, the
allocators' arenas, a chunk of rows and a batch of blocks (about 160 MiB measured, read whole or in chunks)."""
PER_TOKEN = 24
"""Bytes a token allowed beyond ``FIXED``: the samples (4-byte ids, offsets), the plan, the blocks in flight."""


def _forms() -> ModuleType:
    """``benchmarks/forms.py``, the benchmark of every input form: its writers and its measured child."""
    if "packing_bench_forms" in sys.modules:
        return sys.modules["packing_bench_forms"]
    spec = importlib.util.spec_from_file_location("packing_bench_forms", ROOT / "benchmarks" / "forms.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules["packing_bench_forms"] = module
    spec.loader.exec_module(module)
    return module


def _peak(case: str, tokens: float, folder: Path) -> tuple[int, int]:
    """The command's peak RSS (bytes) and the tokens it packed, for ``case`` written with about ``tokens``."""
    forms = _forms()
    folder.mkdir()
    path, _rows, _size, _arrow = forms.make_input(case, "file", tokens, 4, folder, 0)
    tokenizer = "bytes" if case.split("/")[0] in forms.TEXT_FORMS else None
    peak, _seconds, count, blocks, note = forms.run_pack(path, folder / "out.parquet", tokenizer, 4096)
    assert peak and count and blocks, note
    return peak, count


@pytest.fixture(scope="module")
def tiny_peak(tmp_path_factory: pytest.TempPathFactory) -> int:
    """The peak of the command on a file of 20,000 tokens: what it holds whatever the input."""
    return _peak("ids/jsonl", 2e4, tmp_path_factory.mktemp("tiny") / "case")[0]


@pytest.mark.parametrize("case", ["ids/jsonl", "ids/csv", "mask/jsonl", "pc_ids/jsonl"])
def test_row_files_pack_within_a_few_bytes_a_token(case: str, tiny_peak: int, tmp_path: Path) -> None:
    peak, tokens = _peak(case, TOKENS, tmp_path / "case")
    over = (peak - tiny_peak - FIXED) / tokens
    assert peak <= tiny_peak + FIXED + PER_TOKEN * tokens, f"{case}: {over:.1f} bytes a token over the fixed part"
