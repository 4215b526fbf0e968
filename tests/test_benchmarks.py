"""Smoke test of the benchmark entry point: `python benchmarks/run.py --quick` runs and prints the full table.

Speed targets are judged by the benchmark itself on full sizes, never here.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.slow  # the benchmark scripts run end to end: the full suite only

ROOT = Path(__file__).resolve().parent.parent
SCRIPT = ROOT / "benchmarks" / "run.py"

COLUMNS = [
    "workload",
    "strategy",
    "sequences",
    "blocks",
    "lower bound",
    "L2 bound",
    "efficiency",
    "max eff. (L2)",
    "time (median, min–max)",
    "baseline (median)",
    "ratio",
    "target",
    "met",
]
NO_SPLIT = ["next_fit", "first_fit", "ffd", "bfd", "spfhp", "none"]
EXPECTED = {
    "log-normal 20,000": ["bfd", "ffd", "first_fit", "next_fit", "spfhp", "split"],
    "log-normal subsample 1,000": ["next_fit", "first_fit", "ffd", "bfd"],
    "wikipedia_bert_512": ["bfd", "bfd (input sorted)", "spfhp"],
    "squad_1_1_bert_384": NO_SPLIT,
    "openchat_v1_2048": NO_SPLIT,
    "pack split": ["split"],
}


def run_benchmark(*args: str) -> subprocess.CompletedProcess[str]:
    # run from another directory: the script must find the package on its own
    return subprocess.run(
        [sys.executable, str(SCRIPT), *args], capture_output=True, text=True, cwd=ROOT / "tests", timeout=240
    )


def table(stdout: str) -> tuple[list[str], list[dict[str, str]]]:
    lines = [line for line in stdout.splitlines() if line.startswith("|")]
    split = [[cell.strip() for cell in line.strip("|").split("|")] for line in lines]
    header, rule, body = split[0], split[1], split[2:]
    assert all(set(cell) == {"-"} for cell in rule)
    return header, [dict(zip(header, row, strict=True)) for row in body]


@pytest.fixture(scope="module")
def quick() -> subprocess.CompletedProcess[str]:
    return run_benchmark("--quick", "--repeat", "1")


def test_quick_run_prints_every_row_and_column(quick: subprocess.CompletedProcess[str]) -> None:
    assert quick.returncode == 0, quick.stderr
    header, rows = table(quick.stdout)
    assert header == COLUMNS
    got: dict[str, list[str]] = {}
    for row in rows:
        prefix = next(p for p in EXPECTED if row["workload"].startswith(p))
        got.setdefault(prefix, []).append(row["strategy"])
    assert got == EXPECTED
    for row in rows:
        assert int(row["blocks"].replace(",", "")) >= int(row["lower bound"].replace(",", ""))
        assert row["efficiency"].endswith("%")
        assert row["time (median, min–max)"] != ""
    # the fast paths give exactly the blocks of the plain-Python references
    assert [r["met"] for r in rows if r["workload"].startswith("log-normal subsample")] == ["same blocks: yes"] * 4
    assert "followed by padding: yes" in quick.stdout
    assert "nproc" in quick.stdout and "CPU" in quick.stdout


def test_only_runs_the_chosen_section_and_writes_the_report(tmp_path: Path) -> None:
    out = tmp_path / "report.md"
    result = run_benchmark("--quick", "--repeat", "1", "--only", "openchat", "--output", str(out))
    assert result.returncode == 0, result.stderr
    _, rows = table(result.stdout)
    assert [row["strategy"] for row in rows] == NO_SPLIT
    assert all(row["target"] == "published Multipack 99.64 %" for row in rows)
    assert out.read_text(encoding="utf-8").strip() == result.stdout.strip()


def test_unknown_section_is_refused() -> None:
    result = run_benchmark("--only", "nope")
    assert result.returncode == 2
    assert "unknown section 'nope'" in result.stderr


FORMS_COLUMNS = ["case", "layout", "rows", "tokens", "file", "Arrow size", "peak RSS", "bound (Arrow + 1 GiB)",
                 "ratio", "within", "wall", "blocks", "note"]  # fmt: skip


def test_forms_quick_measures_each_case_as_a_file_and_as_shards(tmp_path: Path) -> None:
    out = tmp_path / "forms.md"
    result = subprocess.run(
        [sys.executable, str(ROOT / "benchmarks" / "forms.py"), "--quick", "--only", "ids/parquet,text/jsonl/bytes",
         "--workdir", str(tmp_path), "--output", str(out)],
        capture_output=True, text=True, cwd=ROOT / "tests", timeout=240,
    )  # fmt: skip
    assert result.returncode == 0, result.stderr
    header, rows = table(result.stdout)
    assert header == FORMS_COLUMNS
    assert [(row["case"], row["layout"]) for row in rows] == [
        ("ids/parquet", "file"), ("ids/parquet", "shards"), ("text/jsonl/bytes", "file"), ("text/jsonl/bytes", "shards")
    ]  # fmt: skip
    for row in rows:
        assert int(row["tokens"].replace(",", "")) > 0 and int(row["blocks"].replace(",", "")) > 0, row
        assert row["note"] == "" and float(row["ratio"]) > 0, row
    assert "load average" in result.stdout and "git commit" in result.stdout
    assert out.read_text(encoding="utf-8").strip() == result.stdout.strip()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["forms.md"]  # the inputs are deleted


def test_vision_quick_compares_packing_with_padding_and_checks_the_logits() -> None:
    result = subprocess.run(
        [sys.executable, str(ROOT / "benchmarks" / "vision.py"), "--quick", "--lengths", "2048"],
        capture_output=True, text=True, cwd=ROOT / "tests", timeout=240,
    )  # fmt: skip
    assert result.returncode == 0, result.stderr
    header, rows = table(result.stdout.split("\n\n| L | pack")[0])
    assert header[:3] == ["L", "way", "rows"] and len(rows) == 4
    tokens = [int(row["tokens processed"].replace(",", "")) for row in rows]
    assert tokens[0] == min(tokens) and rows[0]["padding"] == "0.0%"  # packing processes no padding
    assert "pack / to longest" in result.stdout and "load average" in result.stdout
    assert ": equal within 1e-5" in result.stdout


def test_trees_quick_compares_the_tree_layout_with_unshared_rows_and_checks_the_logps() -> None:
    result = subprocess.run(
        [sys.executable, str(ROOT / "benchmarks" / "trees.py"), "--quick", "--lengths", "4096"],
        capture_output=True, text=True, cwd=ROOT / "tests", timeout=240,
    )  # fmt: skip
    assert result.returncode == 0, result.stderr
    header, rows = table(result.stdout.split("\n\n- conversations, L")[0])
    assert header[:3] == ["workload", "L", "layout"] and len(rows) == 6
    for first in (0, 3):  # per workload: the trees store fewest tokens, padding most
        tokens = [int(row["tokens processed"].replace(",", "")) for row in rows[first : first + 3]]
        assert tokens[0] < tokens[1] < tokens[2], tokens
    assert "share of the masks" in result.stdout and "load average" in result.stdout
    assert "mask memory, L = 4,096" in result.stdout
    assert ": equal within 1e-6" in result.stdout
