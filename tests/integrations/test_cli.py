"""The command line end to end: pack, compare, and one clean line for every bad input."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow.parquet as pq
import pytest

import packing._cli as cli
from packing import plan
from packing._cli import main
from packing.strategies import STRATEGIES

ROOT = Path(__file__).resolve().parents[2]
SQUAD = ROOT / "packing" / "_workloads" / "squad_1_1_bert_384.json"
TINY = [[1, 2, 3], {"prompt": [4, 5], "completion": [6]}, [7, 8, 9, 10, 11]]


def write_jsonl(path: Path, rows: list[Any]) -> Path:
    path.write_text("".join(json.dumps(row) + "\n" for row in rows))
    return path


def run(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    code = main(list(argv))
    captured = capsys.readouterr()
    return code, captured.out, captured.err


def summary(out: str) -> dict[str, str]:
    """The pack summary as {name: value}: names and values are two or more spaces apart."""
    pairs = [line.split("  ", 1) for line in out.splitlines() if "  " in line]
    return {name.strip(): value.strip() for name, value in pairs}


def rows(path: Path) -> list[dict[str, list[int]]]:
    if path.suffix == ".jsonl":
        return [json.loads(line) for line in path.read_text().splitlines()]
    result: list[dict[str, list[int]]] = pq.read_table(path).to_pylist()
    return result


def random_samples(count: int, seed: int = 1) -> list[list[int]]:
    rng = np.random.default_rng(seed)
    return [rng.integers(1, 1000, size=int(n)).tolist() for n in rng.integers(1, 60, size=count)]


# ---------------------------------------------------------------- pack


# TINY with max_seq_length 4 and ffd, worked out by hand: lengths after truncation are 3, 3, 4;
# longest first puts [7, 8, 9, 10] alone, [1, 2, 3] in a second block whose last slot is too small
# for the 3-token prompt/completion sample, which opens a third. Labels are -100 on padding, on the
# prompt, and on the first token of every document.
HAND_BLOCKS = [
    ([7, 8, 9, 10], [-100, 8, 9, 10], [1, 1, 1, 1], [0, 1, 2, 3], [4]),
    ([1, 2, 3, 0], [-100, 2, 3, -100], [1, 1, 1, 0], [0, 1, 2, 0], [3]),
    ([4, 5, 6, 0], [-100, -100, 6, -100], [0, 0, 1, 0], [0, 1, 2, 0], [3]),
]


def test_pack_tiny_input_matches_hand_computed_blocks(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    source = write_jsonl(tmp_path / "tiny.jsonl", TINY)
    output = tmp_path / "out.parquet"
    code, out, err = run(
        capsys,
        "pack",
        str(source),
        "--max-seq-length",
        "4",
        "--strategy",
        "ffd",
        "--no-shuffle",
        "--output",
        str(output),
    )
    assert code == 0
    assert err.startswith("packing: warning: 1 of 11 tokens (9.09 %) lost") and len(err.splitlines()) == 1
    got = [(r["input_ids"], r["labels"], r["loss_mask"], r["position_ids"], r["seq_lengths"]) for r in rows(output)]
    assert got == HAND_BLOCKS
    table = summary(out)
    assert table["blocks"] == "3"
    assert table["lower bound"] == "3"
    assert table["efficiency"] == "83.33 %"
    assert table["padding tokens"] == "2"
    assert table["tokens lost"] == "1"
    assert table["sequences truncated"] == "1"
    assert table["sequences split"] == "0"
    assert table["sequences dropped"] == "0"
    assert table["trainable tokens"].startswith("8 ")
    assert "ms" in table["time"] or " s" in table["time"]
    assert table["output"].endswith("in plan order")


def test_pack_loss_all_trains_on_the_prompt(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    source = write_jsonl(tmp_path / "tiny.jsonl", TINY)
    output = tmp_path / "out.parquet"
    args = ["pack", str(source), "--max-seq-length", "4", "--strategy", "ffd", "--no-shuffle", "-o", str(output)]
    code, out, _ = run(capsys, *args, "--loss", "all")
    assert code == 0
    assert rows(output)[2]["labels"] == [-100, 5, 6, -100]
    assert summary(out)["trainable tokens"].startswith("10 ")


def test_pack_pad_token_and_jsonl_output(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    source = write_jsonl(tmp_path / "tiny.jsonl", TINY)
    output = tmp_path / "out.jsonl"
    code, _, _ = run(
        capsys, "pack", str(source), "--max-seq-length", "4", "--strategy", "ffd", "--no-shuffle",
        "--pad-token-id", "99", "--output", str(output),
    )  # fmt: skip
    assert code == 0
    assert [r["input_ids"] for r in rows(output)] == [[7, 8, 9, 10], [1, 2, 3, 99], [4, 5, 6, 99]]


def test_shuffle_is_a_seeded_permutation_of_plan_order(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    source = write_jsonl(tmp_path / "many.jsonl", random_samples(200))
    base = ["pack", str(source), "--max-seq-length", "64", "--strategy", "bfd"]
    assert run(capsys, *base, "--no-shuffle", "-o", str(tmp_path / "plain.parquet"))[0] == 0
    assert run(capsys, *base, "-o", str(tmp_path / "shuffled.parquet"))[0] == 0
    assert run(capsys, *base, "--seed", "3", "-o", str(tmp_path / "seed3.parquet"))[0] == 0
    plain = [r["input_ids"] for r in rows(tmp_path / "plain.parquet")]
    shuffled = [r["input_ids"] for r in rows(tmp_path / "shuffled.parquet")]
    seed3 = [r["input_ids"] for r in rows(tmp_path / "seed3.parquet")]
    assert len(plain) > 20
    assert shuffled != plain
    assert sorted(shuffled) == sorted(plain)
    assert shuffled == [plain[i] for i in np.random.default_rng(0).permutation(len(plain))]
    assert seed3 == [plain[i] for i in np.random.default_rng(3).permutation(len(plain))]
    assert seed3 != shuffled


def test_no_shuffle_keeps_plan_order(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    samples = random_samples(100, seed=4)
    source = write_jsonl(tmp_path / "many.jsonl", samples)
    output = tmp_path / "out.parquet"
    args = ["pack", str(source), "--max-seq-length", "64", "--strategy", "ffd", "--no-shuffle", "-o", str(output)]
    assert run(capsys, *args)[0] == 0
    layout = plan([len(s) for s in samples], 64, strategy="ffd")
    assert [r["seq_lengths"] for r in rows(output)] == [
        layout.seq_lengths(b).tolist() for b in range(layout.num_blocks)
    ]
    # decreasing strategies start with the longest documents: plan order is a length curriculum
    firsts = [r["seq_lengths"][0] for r in rows(output)]
    assert firsts == sorted(firsts, reverse=True)


def test_pack_csv_prompt_completion(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    source = tmp_path / "pc.csv"
    source.write_text("prompt,completion\n1 2,3 4\n5,6\n")
    output = tmp_path / "out.parquet"
    args = ["pack", str(source), "--max-seq-length", "6", "--strategy", "split", "--no-shuffle", "-o", str(output)]
    assert run(capsys, *args)[0] == 0
    (block,) = rows(output)
    assert block["input_ids"] == [1, 2, 3, 4, 5, 6]
    assert block["labels"] == [-100, -100, 3, 4, -100, 6]
    assert block["seq_lengths"] == [4, 2]


def test_pack_overflow_split(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    source = write_jsonl(tmp_path / "long.jsonl", [[1, 2, 3, 4, 5, 6]])
    output = tmp_path / "out.parquet"
    args = ["pack", str(source), "--max-seq-length", "4", "--strategy", "bfd", "--overflow", "split", "--no-shuffle"]
    code, out, _ = run(capsys, *args, "-o", str(output))
    assert code == 0
    assert [r["input_ids"] for r in rows(output)] == [[1, 2, 3, 4], [5, 6, 0, 0]]
    assert summary(out)["sequences split"] == "1"
    assert summary(out)["tokens lost"] == "0"


def test_progress_messages_only_on_a_terminal(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    source = write_jsonl(tmp_path / "tiny.jsonl", TINY)
    args = ["pack", str(source), "--max-seq-length", "4", "--strategy", "ffd", "-o", str(tmp_path / "o.parquet")]
    monkeypatch.setattr(cli, "_stderr_is_terminal", lambda: True)
    _, _, err = run(capsys, *args)
    assert "reading" in err
    assert "packing 3 sequences with ffd ... done in" in err
    assert "writing 3 blocks" in err
    _, _, err = run(capsys, *args, "--quiet")
    assert err.startswith("packing: warning: 1 of 11 tokens") and len(err.splitlines()) == 1  # no progress


# ---------------------------------------------------------------- compare


def compare_rows(out: str) -> dict[str, list[str]]:
    """Strategy name -> its cells, from the comparison table."""
    lines = out.splitlines()
    start = next(i for i, line in enumerate(lines) if line.startswith("strategy"))
    table = {}
    for line in lines[start + 1 :]:
        if not line.strip():
            break
        cells = [cell.strip() for cell in line.split("  ") if cell.strip()]
        table[cells[0]] = cells[1:]
    return table


def test_compare_histogram_json(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    source = tmp_path / "h.json"
    # lengths 2, 3, 5, 6 with max_seq_length 8: split needs ceil(16 / 8) = 2 blocks, 6 and 5 cannot share,
    # so any no-split packing needs 2 (6+2, 5+3); next-fit in input order 2, 3, 5, 6 makes 2+3 | 5 | 6.
    source.write_text(json.dumps({"histogram": [0, 1, 1, 0, 1, 1]}))
    code, out, err = run(capsys, "compare", str(source), "--max-seq-length", "8")
    assert (code, err) == (0, "")
    table = compare_rows(out)
    kept = [name for name, entry in STRATEGIES.items() if entry.keeps_boundaries]  # not wrapped: split's blocks
    assert list(table) == [*kept, "bfd, windows of 1,000 (TRL's default)"]
    assert table["split"][:4] == ["2", "2", "0", "100.00 %"]
    assert table["next_fit"][:4] == ["3", "2", "1", "66.67 %"]
    assert table["bfd"][:2] == ["2", "2"]
    assert table["optimal"][:2] == ["2", "2"]
    assert table["none"][:1] == ["4"]
    assert "4 sequences, 16 tokens, longest 6" in out


def test_compare_proves_the_optimum_of_a_bundled_workload(capsys: pytest.CaptureFixture[str]) -> None:
    argv = ["compare", str(SQUAD), "--max-seq-length", "384", "--strategies", "bfd,optimal,bfd/1000"]
    code, out, _ = run(capsys, *argv)
    assert code == 0
    table = compare_rows(out)
    assert table["optimal"][:3] == ["40,195", "40,195", "0"]  # blocks, the proven bound, gap
    assert table["bfd"][:3] == ["40,631", "40,195", "436"]
    windowed = int(table["bfd, windows of 1,000"][0].replace(",", ""))
    assert windowed > 40_631  # per-window packing (TRL's default) needs more blocks than global bfd
    assert "no packing without splitting can use fewer than 40,195 blocks (proof: dual prices)" in out
    assert "(proven optimal)" in out
    assert "bfd uses 436 more" in out


def test_compare_on_token_file_and_length_column_agree(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    samples = random_samples(30, seed=2)
    tokens = write_jsonl(tmp_path / "t.jsonl", samples)
    lengths = tmp_path / "l.csv"
    lengths.write_text("length\n" + "".join(f"{len(s)}\n" for s in samples))
    args = ["--max-seq-length", "50", "--overflow", "drop", "--strategies", "ffd,split"]
    code_t, out_t, _ = run(capsys, "compare", str(tokens), *args)
    code_l, out_l, _ = run(capsys, "compare", str(lengths), *args)
    assert code_t == code_l == 0
    strip_time = lambda table: {name: cells[:-1] for name, cells in table.items()}  # noqa: E731
    assert strip_time(compare_rows(out_t)) == strip_time(compare_rows(out_l))
    expected = plan([len(s) for s in samples], 50, strategy="ffd", overflow="drop").stats
    assert compare_rows(out_t)["ffd"][0] == str(expected.num_blocks)
    assert compare_rows(out_t)["ffd"][7] == str(expected.sequences_dropped)
    assert list(compare_rows(out_t)) == ["ffd", "split"]


# ---------------------------------------------------------------- bad input


def assert_clean_failure(code: int, out: str, err: str, expected: str) -> None:
    assert code == 2
    assert out == ""
    assert "Traceback" not in err
    lines = err.splitlines()
    assert len(lines) == 1, err
    assert lines[0].startswith("packing: error: ")
    assert expected in lines[0]


@pytest.fixture
def tiny(tmp_path: Path) -> Path:
    return write_jsonl(tmp_path / "tiny.jsonl", TINY)


@pytest.mark.parametrize(
    ("make_input", "extra", "expected"),
    [
        (lambda d: d / "missing.jsonl", [], "missing.jsonl: no such file"),
        (lambda d: write_jsonl(d / "cols.jsonl", [{"note": [1]}]), [], "no usable columns; found 'note'"),
        (
            lambda d: write_jsonl(d / "text.jsonl", [{"text": "hello"}]),
            [],
            "line 1, 'text': expected token ids (a text row needs a tokenizer: --tokenizer)",
        ),
        (
            lambda d: write_jsonl(d / "tok.jsonl", [[1], [2, "x"]]),
            [],
            "tok.jsonl, line 2, position 1: expected a non-negative integer token id, got 'x' (str)",
        ),
        (
            lambda d: write_jsonl(d / "bad.jsonl", [[1]]).parent / "bad.jsonl",
            ["--max-seq-length", "0"],
            "--max-seq-length: expected an integer >= 1, got 0",
        ),
        (
            lambda d: write_jsonl(d / "bad.jsonl", [[1]]),
            ["--max-seq-length", "ten"],
            "argument --max-seq-length: expected an integer, got 'ten'",
        ),
        (
            lambda d: write_jsonl(d / "bad.jsonl", [[1]]),
            ["--strategy", "fastest"],
            "argument --strategy: invalid choice: 'fastest'",
        ),
        (
            lambda d: write_jsonl(d / "bad.jsonl", [[1]]),
            ["--overflow", "wrap"],
            "argument --overflow: invalid choice: 'wrap'",
        ),
        (
            lambda d: write_jsonl(d / "len.jsonl", [{"length": 3}]),
            [],
            "holds sequence lengths only; 'pack' needs token ids",
        ),
        (
            lambda d: write_jsonl(d / "many.jsonl", [[1]] * 50),
            ["--strategy", "optimal", "--max-sequences-per-block", "2"],
            "--max-sequences-per-block: expected no value with strategy 'optimal' (it applies to spfhp), got 2",
        ),
        (
            lambda d: write_jsonl(d / "bad.jsonl", [[1]]),
            ["--max-sequences-per-block", "2"],
            "--max-sequences-per-block: expected no value with strategy 'bfd' (it applies to spfhp), got 2",
        ),
    ],
)
def test_pack_bad_input_one_line_and_no_output(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], make_input: Any, extra: list[str], expected: str
) -> None:
    source = make_input(tmp_path)
    output = tmp_path / "out.parquet"
    options = {"--max-seq-length": "4", "--strategy": "bfd"}
    for flag, value in zip(extra[::2], extra[1::2], strict=True):
        options[flag] = value
    argv = ["pack", str(source), *[item for pair in options.items() for item in pair], "--output", str(output)]
    assert_clean_failure(*run(capsys, *argv), expected)
    assert not output.exists()
    assert not [p for p in tmp_path.iterdir() if p.name.startswith(".out.parquet")]


@pytest.mark.parametrize(
    ("output", "expected"),
    [
        ("no/such/dir/out.parquet", "no such directory"),
        ("out.txt", "--output must end in .parquet or .jsonl"),
        ("folder.parquet", "it is a directory"),
    ],
)
def test_pack_unwritable_output(
    tmp_path: Path, tiny: Path, capsys: pytest.CaptureFixture[str], output: str, expected: str
) -> None:
    (tmp_path / "folder.parquet").mkdir()
    before = sorted(p.name for p in tmp_path.iterdir())
    target = tmp_path / output
    argv = ["pack", str(tiny), "--max-seq-length", "4", "--strategy", "bfd", "-o", str(target)]
    assert_clean_failure(*run(capsys, *argv), expected)
    assert sorted(p.name for p in tmp_path.iterdir()) == before


def test_write_failure_keeps_previous_output_and_leaves_no_temporary(
    tmp_path: Path, tiny: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    output = tmp_path / "out.parquet"
    output.write_bytes(b"previous run")

    def disk_full(self: Any, *args: Any, **kwargs: Any) -> None:
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(pq.ParquetWriter, "write_table", disk_full)
    argv = ["pack", str(tiny), "--max-seq-length", "4", "--strategy", "bfd", "-o", str(output)]
    assert_clean_failure(*run(capsys, *argv), f"cannot write {output}: No space left on device")
    assert output.read_bytes() == b"previous run"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["out.parquet", "tiny.jsonl"]


def test_missing_required_options(tiny: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert_clean_failure(*run(capsys, "pack", str(tiny), "--max-seq-length", "4"), "--output")
    assert_clean_failure(*run(capsys, "unpack"), "invalid choice: 'unpack'")


def test_a_bare_command_line_lists_its_commands(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, err = run(capsys)
    assert (code, err) == (2, "")
    assert out.startswith("usage: packing [-h] COMMAND ...")
    commands = [line.split()[0] for line in out.splitlines() if line.startswith("    ")]
    assert commands == ["pack", "compare", "audit"]


@pytest.mark.parametrize(
    ("flag", "expected"),
    [
        ("--max-len", "unrecognized option --max-len (did you mean --max-seq-length?)"),
        ("--max_seq_length", "unrecognized option --max_seq_length (did you mean --max-seq-length?)"),
        ("--max-length", "unrecognized option --max-length: expected --max-seq-length (TRL's max_length)"),
        ("--max-seq-len", "unrecognized option --max-seq-len: expected --max-seq-length (torchtune's max_seq_len)"),
        ("--max-seq", "unrecognized option --max-seq (did you mean --max-seq-length?)"),  # no abbreviations
    ],
)
def test_an_unknown_flag_is_named_before_a_missing_one(
    tiny: Path, capsys: pytest.CaptureFixture[str], flag: str, expected: str
) -> None:
    """``--max-len 8`` is not "the following arguments are required: --max-seq-length": the flag is named."""
    assert_clean_failure(*run(capsys, "pack", str(tiny), flag, "8", "-o", "out.parquet"), expected)
    assert_clean_failure(*run(capsys, "compare", str(tiny), flag, "8"), expected)


def test_compare_takes_no_strategy_option(tiny: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """An abbreviation would have read ``--strategy`` as ``--strategies``: compare names the option it has."""
    argv = ["compare", str(tiny), "--max-seq-length", "4", "--strategy", "bfd"]
    assert_clean_failure(*run(capsys, *argv), "unrecognized option --strategy (did you mean --strategies?)")


def test_truncated_tokens_are_said_on_stderr_with_their_share(
    tmp_path: Path, tiny: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """TINY at 4 tokens loses 1 of its 11 tokens: one warning line with the count and the share, even with
    --quiet, and the summary's line stays; nothing is said when nothing is lost."""
    output = tmp_path / "out.parquet"
    code, out, err = run(capsys, "pack", str(tiny), "--max-seq-length", "4", "-q", "-o", str(output))
    assert code == 0
    assert err.splitlines() == [
        "packing: warning: 1 of 11 tokens (9.09 %) lost: 1 sequence longer than --max-seq-length 4 truncated "
        "(--overflow split keeps every token)"
    ]
    assert summary(out)["tokens lost"] == "1"
    _, _, err = run(capsys, "pack", str(tiny), "--max-seq-length", "4", "--overflow", "drop", "-q", "-o", str(output))
    assert err.startswith("packing: warning: 5 of 11 tokens (45.45 %) lost: 1 sequence longer than --max-seq-length")
    assert "dropped" in err
    assert run(capsys, "pack", str(tiny), "--max-seq-length", "8", "-q", "-o", str(output))[2] == ""


@pytest.mark.parametrize(
    ("extra", "expected"),
    [
        (["--strategies", "bfd,fastest"], "unknown strategy 'fastest'; expected one of: split"),
        (["--strategies", ","], "expected at least one strategy name"),
        (["--max-seq-length", "-3"], "--max-seq-length: expected an integer >= 1, got -3"),
    ],
)
def test_compare_bad_options(tiny: Path, capsys: pytest.CaptureFixture[str], extra: list[str], expected: str) -> None:
    argv = ["compare", str(tiny), "--max-seq-length", "4", *extra]
    assert_clean_failure(*run(capsys, *argv), expected)


@pytest.mark.parametrize("command", ["pack", "compare", "audit"])
@pytest.mark.parametrize(
    ("value", "expected"),
    [
        ("0", "--max-seq-length: expected an integer >= 1, got 0"),
        ("-3", "--max-seq-length: expected an integer >= 1, got -3"),
        ("ten", "argument --max-seq-length: expected an integer, got 'ten'"),
    ],
)
def test_every_command_words_a_bad_max_seq_length_alike(
    tiny: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str], command: str, value: str, expected: str
) -> None:
    """One rule for a block length, worded once: audit's capacity is refused as pack's and compare's are."""
    output = ["-o", str(tmp_path / "out.parquet")] if command == "pack" else []
    assert_clean_failure(*run(capsys, command, str(tiny), "--max-seq-length", value, *output), expected)
    assert not (tmp_path / "out.parquet").exists()


def test_compare_missing_and_invalid_files(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert_clean_failure(*run(capsys, "compare", str(tmp_path / "x.csv"), "--max-seq-length", "4"), "no such file")
    broken = tmp_path / "broken.json"
    broken.write_text('{"histogram": [1, 2,')
    assert_clean_failure(
        *run(capsys, "compare", str(broken), "--max-seq-length", "4"), "broken.json, line 1, character 21: invalid JSON"
    )


def test_help_exits_zero(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = run(capsys, "pack", "--help")
    assert code == 0
    assert "--max-seq-length" in out
    assert "--no-shuffle" in out


# ---------------------------------------------------------------- as a process


def python_m_packing(*argv: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")]))}
    return subprocess.run(
        [sys.executable, "-m", "packing", *argv], cwd=cwd, env=env, capture_output=True, text=True, timeout=240
    )


@pytest.mark.slow
def test_python_m_packing_end_to_end(tmp_path: Path) -> None:
    write_jsonl(tmp_path / "tiny.jsonl", TINY)
    done = python_m_packing(
        "pack", "tiny.jsonl", "--max-seq-length", "4", "--strategy", "ffd", "--no-shuffle", "-o", "out.parquet",
        cwd=tmp_path,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert summary(done.stdout)["blocks"] == "3"
    assert [r["input_ids"] for r in rows(tmp_path / "out.parquet")] == [b[0] for b in HAND_BLOCKS]
    failed = python_m_packing("compare", "nope.jsonl", "--max-seq-length", "4", cwd=tmp_path)
    assert failed.returncode == 2
    assert failed.stdout == ""
    assert failed.stderr == "packing: error: nope.jsonl: no such file\n"


def test_absurd_sizes_and_deep_json_are_one_line_errors(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    lengths = tmp_path / "l.json"
    lengths.write_text('{"lengths": [3, 4]}')
    assert main(["compare", str(lengths), "--max-seq-length", "100000000000000000000"]) == 2
    assert "--max-seq-length: expected at most 16,777,216" in capsys.readouterr().err
    deep = tmp_path / "deep.json"
    deep.write_text("[" * 100_000 + "]" * 100_000)
    assert main(["compare", str(deep), "--max-seq-length", "8"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("packing: error:") and "nested too deeply" in err and "Traceback" not in err
