"""Which files a source stands for: each real file once (links, a folder and a file in it, a path given twice), a
symbolic link to a folder not followed by ``**`` (no cycle to walk), the output of ``packing pack`` never read back as its
input, and a warning for an input that looks like packed blocks."""

from __future__ import annotations

import glob
import io
import json
import os
from pathlib import Path

import pyarrow.parquet as pq
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import packing
from explorer.core.sources import Upload
from packing._cli import main
from packing.errors import DatasetError
from packing.reading._files import resolve

# ---------------------------------------------------------------- layouts of files and links

FOLDERS = ["", "a", "a/b", "c"]


@st.composite
def _layouts(draw: st.DrawFn) -> tuple[list[str], list[tuple[str, str]]]:
    """Files (at least one at the top) and links to files or folders (``(link, target)``, paths from the top)."""
    names = [f"{f}/{n}.jsonl" for f in FOLDERS[1:] for n in "xy"]
    files = ["top.jsonl", *draw(st.lists(st.sampled_from(names), unique=True, max_size=4))]
    links: list[tuple[str, str]] = []
    for index in range(draw(st.integers(0, 3))):
        folder = draw(st.sampled_from(FOLDERS))
        target = draw(st.sampled_from([*files, *FOLDERS]))
        links.append((os.path.join(folder, f"link{index}" + (".jsonl" if target.endswith(".jsonl") else "")), target))
    return files, links


def _build(root: Path, files: list[str], links: list[tuple[str, str]]) -> None:
    for name in files:
        path = root / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps([len(name)]) + "\n")
    for folder in FOLDERS[1:]:
        (root / folder).mkdir(parents=True, exist_ok=True)
    for link, target in links:
        os.symlink(os.path.relpath(root / target, (root / link).parent), root / link)


@settings(max_examples=80, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(_layouts(), st.sampled_from(["**/*.jsonl", "*.jsonl", "a/**/*.jsonl", "", "a"]))
def test_every_real_file_once(
    tmp_path_factory: pytest.TempPathFactory, layout: tuple[list[str], list[tuple[str, str]]], pattern: str
) -> None:
    files, links = layout
    root = tmp_path_factory.mktemp("tree")
    _build(root, files, links)
    source = str(root / pattern) if pattern else str(root)
    if "**" in pattern:  # any folders below, links to folders not followed (so no cycle is walked)
        base = os.path.join(str(root), pattern.split("**")[0])
        matches = [os.path.join(at, n) for at, _, found in os.walk(base) for n in found if n.endswith(".jsonl")]
    elif "*" in pattern:
        matches = [m for m in glob.glob(source) if os.path.isfile(m)]
    else:
        matches = [str(p) for p in Path(source).iterdir() if p.is_file() and p.suffix == ".jsonl"]
    if not matches:
        with pytest.raises(DatasetError, match=r"no file matches this pattern|a folder without dataset files"):
            resolve(source)
        return
    found = resolve(source).files
    reals = {os.path.realpath(m) for m in matches}
    resolved = [os.path.realpath(file.label) for file in found]
    assert len(resolved) == len(set(resolved))  # each real file once
    assert set(resolved) == reals  # and every one of them
    labels = [file.label for file in found]
    assert labels == sorted(labels)  # the first name of each, in reading order
    assert len(packing.read_dataset(source)) == len(reals)


def test_a_recursive_glob_through_a_link_to_its_parent(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """``**`` does not follow links to folders: a link back to a parent is no cycle, its files are found once."""
    (tmp_path / "sub").mkdir()
    (tmp_path / "a.jsonl").write_text("[1, 2]\n")
    os.symlink("..", tmp_path / "sub" / "up")
    pattern = str(tmp_path / "**" / "*.jsonl")
    assert [file.label for file in resolve(pattern).files] == [str(tmp_path / "a.jsonl")]
    assert packing.read_dataset(pattern).lengths.tolist() == [2]
    assert main(["compare", pattern, "--max-seq-length", "4"]) == 0
    capsys.readouterr()


def test_a_file_given_twice_is_read_once(tmp_path: Path) -> None:
    (tmp_path / "a.jsonl").write_text("[1, 2]\n")
    os.symlink("a.jsonl", tmp_path / "b.jsonl")
    data = packing.read_dataset([str(tmp_path), str(tmp_path / "a.jsonl"), str(tmp_path / "b.jsonl")])
    assert data.files == (str(tmp_path / "a.jsonl"),) and data.lengths.tolist() == [2]


# ---------------------------------------------------------------- the output of pack is not an input


def test_pack_never_reads_its_own_output(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    (tmp_path / "a.jsonl").write_text("[1, 2]\n[3]\n[4, 5, 6]\n")
    output = tmp_path / "blocks.parquet"
    before = None
    for source in (str(tmp_path / "*"), str(tmp_path), str(output)):
        code = main(["pack", source, "--max-seq-length", "4", "--output", str(output), "-q"])
        err = capsys.readouterr().err
        if before is None:  # the first run: nothing to read back
            assert code == 0 and err == ""
            before = output.read_bytes()
            code = main(["pack", source, "--max-seq-length", "4", "--output", str(output), "-q"])
            err = capsys.readouterr().err
        via = "" if source == str(output) else f" (matched by {source})"
        assert code == 2
        assert err == (
            f"packing: error: {output} is the output and an input{via}: its blocks would be read back as samples; "
            "write the output elsewhere or leave it out of the input\n"
        )
        assert output.read_bytes() == before  # untouched
    assert pq.read_table(output).num_rows == 2  # 3 sequences, not 5 then 7


@pytest.mark.parametrize("layout", ["packing", "trl", "flattening", "megatron"])
def test_an_input_that_looks_packed_is_warned_about(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], layout: str
) -> None:
    blocks = tmp_path / "blocks.parquet"
    (tmp_path / "a.jsonl").write_text("[1, 2]\n[3]\n")
    assert (
        main(
            [
                "pack",
                str(tmp_path / "a.jsonl"),
                "--layout",
                layout,
                "-q",
                "--max-seq-length",
                "4",
                "--output",
                str(blocks),
            ]
        )
        == 0
    )
    assert capsys.readouterr().err == ""
    column = {"packing": "seq_lengths", "trl": "seq_lengths", "flattening": "position_ids", "megatron": "seq_start_id"}
    note = (
        f"{blocks} looks like packed blocks, not samples (it has a '{column[layout]}' column): each of its rows is read "
        "as one sample, its padding as tokens"
    )
    assert packing.read_dataset(str(blocks)).notes == (note,)
    assert main(["compare", str(blocks), "--max-seq-length", "4"]) == 0
    assert capsys.readouterr().err == f"packing: warning: {note}\n"
    assert main(["pack", str(blocks), "-q", "--max-seq-length", "4", "--output", str(tmp_path / "again.parquet")]) == 0
    assert capsys.readouterr().err == f"packing: warning: {note}\n"
    loaded = Upload.of("blocks.parquet", blocks.read_bytes()).load()
    assert "Warning: blocks\\.parquet looks like packed blocks" in loaded.note


@pytest.mark.parametrize(
    ("name", "data"),
    [
        ("rows.jsonl", b'{"input_ids": [1, 2], "seq_lengths": [2]}\n'),
        ("rows.json", b'[{"input_ids": [1, 2], "position_ids": [0, 1]}]'),
        ("rows.csv", b"input_ids,sequence_ids\n1 2,0 0\n"),
    ],
)
def test_rows_of_text_that_look_packed(name: str, data: bytes) -> None:
    notes = packing.read_dataset(io.BytesIO(data), name=name).notes
    assert len(notes) == 1 and notes[0].startswith(f"{name} looks like packed blocks")
    assert packing.read_dataset(io.BytesIO(b'{"input_ids": [1, 2], "note": 1}\n'), name="rows.jsonl").notes == ()
    assert packing.read_dataset(io.BytesIO(b"input_ids\n1 2\n"), name="r.csv").notes == ()
