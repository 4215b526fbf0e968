"""Hostile links, tokenizer names and sizes (issue 24): every refusal is one plain line, no traceback, no server
path, no filesystem oracle, and nothing is allocated past the page's bounds. Each test here failed before."""

from __future__ import annotations

import ast
import io
import json
import os
import re
import subprocess
import sys
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from streamlit.testing.v1 import AppTest

import packing
from explorer.core import audit as inspect_view
from explorer.core import links, model
from explorer.core.parsing import InputError
from explorer.core.sources import Synthetic, Upload
from explorer.core.text import TOKENIZERS_ENV, choose_tokenizer, tokenizer_path
from tests.helpers.apptest import errors_of, no_leak, open_link, page_of, plain

ROOT = Path(__file__).resolve().parents[2]
APP = str(ROOT / "app.py")
TIMEOUT = 120
CHATS = b'{"messages": [{"role": "user", "content": "Hi"}, {"role": "assistant", "content": "Hello!"}]}\n'


# ---------------------------------------------------------------- the tokenizer box


@pytest.mark.parametrize("name", ["a" * 300, "~nosuchuser", "~root/.ssh", "/etc/passwd", "../../etc/passwd"])
def test_a_hostile_tokenizer_in_a_link_is_the_one_refusal(name: str) -> None:
    at = open_link({"source": "text", "tokenizer": name})
    no_leak(at, name)
    errors = errors_of(at)
    assert len(errors) == 1 and "Cannot load the tokenizer" in errors[0], errors
    assert "root:" not in page_of(at)  # /etc/passwd is never opened nor parsed


def test_a_hostile_tokenizer_for_an_uploaded_text_file_is_one_line() -> None:
    at = open_link({"source": "upload", "tokenizer": "~nosuchuser"})
    at.sidebar.get("file_uploader")[0].upload("chats.jsonl", CHATS).run()
    no_leak(at, "~nosuchuser")
    errors = errors_of(at)
    assert len(errors) == 1 and "chats.jsonl holds text rows. Cannot load the tokenizer" in errors[0], errors


def test_no_path_a_visitor_types_is_read() -> None:
    for name in ("/root/.ssh", "/root/no-such-folder", "/etc/passwd", "~", "~nosuchuser", "a/../../etc", "x" * 300):
        assert tokenizer_path(name) is None, name
    # a missing folder, a folder that is not a tokenizer, a file: the same sentence (only the name quoted differs)
    messages = {choose_tokenizer(n)[1].replace(repr(n), "NAME") for n in ("/root/.ssh", "/root/nothing", "/etc/passwd")}  # type: ignore[union-attr]
    assert len(messages) == 1, messages


def test_the_page_is_no_filesystem_oracle(tmp_path: Path) -> None:
    """A folder that is not a tokenizer, a missing one beside it, and a system file (read and parsed before):
    the same line on the page, whatever the name's kind."""
    (tmp_path / "private").mkdir()
    names = [str(tmp_path / "private"), str(tmp_path / "missing"), "/etc/passwd"]
    lines = set()
    for name in names:
        at = open_link({"source": "text", "tokenizer": name})
        no_leak(at, name)
        (error,) = errors_of(at)
        lines.add(error.replace(repr(name)[:39] + "…" if len(repr(name)) > 40 else repr(name), "NAME"))
    assert len(lines) == 1, lines


def test_only_folders_under_the_operators_folder_are_offered(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    root, outside = tmp_path / "tokenizers", tmp_path / "outside"
    (root / "empty").mkdir(parents=True)
    (root / "versioned").mkdir()
    (root / "versioned" / "tokenizer.json").write_text(json.dumps({"version": "SECRET-VERSION-42"}))
    outside.mkdir()
    (root / "escape").symlink_to(outside)
    assert tokenizer_path("empty") is None  # off by default
    monkeypatch.setenv(TOKENIZERS_ENV, str(root))
    assert tokenizer_path("empty") == os.path.realpath(root / "empty")
    for name in ("escape", "missing", str(root / "empty"), "../outside", "empty/..", "./empty"):
        assert tokenizer_path(name) is None, name
    messages = {choose_tokenizer(n)[1].replace(repr(n), "NAME") for n in ("empty", "missing", "versioned", "escape")}  # type: ignore[union-attr]
    assert len(messages) == 1, messages
    at = open_link({"source": "text", "tokenizer": "versioned"})
    no_leak(at)
    assert "SECRET" not in page_of(at) and len(errors_of(at)) == 1


def test_the_explorer_runs_with_the_hub_offline() -> None:
    env = {k: v for k, v in os.environ.items() if k not in ("HF_HUB_OFFLINE", "TRANSFORMERS_OFFLINE")}
    # the entry point, as `streamlit run` imports it and as every worker process imports it (``__mp_main__``)
    code = "import app, os; print(os.environ['HF_HUB_OFFLINE'], os.environ['TRANSFORMERS_OFFLINE'])"
    out = subprocess.run([sys.executable, "-c", code], env=env, cwd=ROOT, capture_output=True, text=True, check=True)
    assert out.stdout.split() == ["1", "1"]


def _library_call(node: ast.AST) -> bool:
    """``load_tokenizer(...)`` or ``packing.load_tokenizer(...)`` (not a source's own ``load_tokenizer()`` method)."""
    if not isinstance(node, ast.Call):
        return False
    func = node.func
    if isinstance(func, ast.Name):
        return func.id == "load_tokenizer"
    return (
        isinstance(func, ast.Attribute)
        and func.attr == "load_tokenizer"
        and getattr(func.value, "id", "")
        in (
            "packing",
            "text",
        )
    )


def test_every_load_tokenizer_call_in_the_explorer_is_local_only() -> None:
    calls = []
    for path in [*(ROOT / "explorer").rglob("*.py"), ROOT / "app.py"]:
        for node in ast.walk(ast.parse(path.read_text())):
            if _library_call(node):
                assert isinstance(node, ast.Call)
                local = [k.value for k in node.keywords if k.arg == "local_files_only"]
                calls.append((path.name, node.lineno, bool(local) and getattr(local[0], "value", None) is True))
    assert calls and all(ok for _, _, ok in calls), calls


# ---------------------------------------------------------------- bounds before allocating


@pytest.mark.parametrize(
    "params",
    [
        {"count": "1000000", "max_length": "16777216"},  # 23.9 TiB of pieces before
        {"count": "10", "distribution": "uniform"},  # 671 MiB before, and kept
    ],
)
def test_a_plan_that_expands_past_the_bound_is_refused_before_it_is_built(params: dict[str, str]) -> None:
    link = {"source": "synthetic", "max_length": "16777216", "max_seq_length": "1", "overflow": "split", **params}
    at = open_link(link)  # type: ignore[arg-type]
    no_leak(at)
    page = page_of(at)
    assert ("pieces; the explorer plans up to" in page) or ("stands for" in page), page[:1000]
    assert not at.get("plotly_chart") and not at.code


def test_pieces_are_counted_from_the_lengths() -> None:
    lengths = np.array([2**24] * 10, dtype=np.int64)
    assert model.pieces_of(lengths, 1, "bfd", "split") == 10 * 2**24
    assert model.pieces_of(lengths, 1, "bfd", "truncate") == 10
    assert model.pieces_of(lengths, 2**24, "split", "truncate") == 20
    assert model.plan_problem(lengths, 1, "bfd", "split") and not model.plan_problem(lengths, 2**24, "bfd", "split")


def test_lengths_only_data_is_bounded_by_the_tokens_it_stands_for() -> None:
    # the library's reader refuses it (ReadLimits.max_length_tokens); in-memory sources keep check_lengths
    with pytest.raises(InputError, match="1,000,000,000,000 tokens"):
        Upload.of("one.csv", b"length\n1000000000000\n").load()
    with pytest.raises(InputError, match="stands for"):
        Synthetic(1_000_000, "uniform", 0, 2**24).load()
    at = open_link({"source": "upload"})
    at.sidebar.get("file_uploader")[0].upload("one.csv", b"length\n1000000000000\n").run()
    no_leak(at)
    assert any("1,000,000,000,000 tokens" in e for e in errors_of(at)), errors_of(at)


def _zeros_parquet(rows: int, width: int) -> bytes:
    column = pa.FixedSizeListArray.from_arrays(pa.array(np.zeros(rows * width, dtype=np.int32)), width)
    buffer = io.BytesIO()
    pq.write_table(pa.table({"input_ids": column.cast(pa.list_(pa.int32()))}), buffer, compression="zstd")
    return buffer.getvalue()


def test_a_parquet_bomb_is_refused_from_its_footer() -> None:
    data = _zeros_parquet(4, 5_000_000)  # 20 M zeros in a few KB
    assert len(data) < 2**20
    # the library's reader refuses it from the file's metadata (packing.reading._limits.check_parquet), worded in one line
    with pytest.raises(InputError, match=r"holds 20,000,000 values \(from the file.s metadata\)"):
        Upload.of("bomb.parquet", data).load()


def test_the_inspect_tab_is_bounded_before_it_reads() -> None:
    many = _zeros_parquet(1_000_001, 1)
    with pytest.raises(packing.DatasetError, match="1,000,001 blocks"):
        inspect_view.load_report(many, "many.parquet")
    at = open_link({"tab": "Inspect"})
    at.get("file_uploader")[0].upload("many.parquet", many).run()
    no_leak(at)
    assert any("1,000,001 blocks" in e for e in errors_of(at)), errors_of(at)
    with pytest.raises(
        packing.DatasetError,
        match=r"holds about 64,000,002 values, more than the limit of 64,000,000 \(refused before parsing\)",
    ):
        inspect_view.load_report(b"[" + b"0," * (4 * model.MAX_TOKENS + 1) + b"0]\n", "wide.jsonl")


# ---------------------------------------------------------------- every parameter, every kind of value

KINDS = [
    "",
    "9" * 40,
    "-5",
    "nan",
    "inf",
    "1e400",
    "x" * 300,
    "~nosuchuser",
    "../../etc/passwd",
    "/root/.ssh",
    "<script>alert(1)</script>[x](https://e.x)",
    "ünï€ødé ✓ \u202e",
    "0",
]
NAMES = sorted({*links.PARAMS, "sequences", "tab", "tokenizer", "text_rows"})


def _sweep() -> list[dict[str, str | list[str]]]:
    """Each parameter with two kinds of value (rotating through all), on the source that reads it, and a few
    links that combine them or repeat a parameter."""
    cases: list[dict[str, str | list[str]]] = []
    for index, name in enumerate(NAMES):
        for value in (KINDS[index % len(KINDS)], KINDS[(index + 6) % len(KINDS)]):
            source = {
                "count": "synthetic",
                "distribution": "synthetic",
                "seed": "synthetic",
                "max_length": "synthetic",
                "workload": "workload",
                "sample": "workload",
                "tokenizer": "text",
                "text_rows": "text",
                "train_on_eos": "text",
                "roles_to_train": "text",
            }
            cases.append({"source": source.get(name, "paste"), name: value} if name != "source" else {name: value})
    cases.append({name: "9" * 400 for name in NAMES if name != "sequences"})
    cases += [{"source": "text", "tokenizer": "a" * 300}, {"source": "text", "tokenizer": "~nosuchuser"}]
    cases.append(
        {
            "source": "synthetic",
            "count": "10",
            "distribution": "uniform",
            "max_length": "16777216",
            "max_seq_length": "1",
            "overflow": "split",
        }
    )
    cases.append({"source": ["text", "synthetic"], "tokenizer": ["bytes", "/root/.ssh"], "count": ["1", "-1"]})
    cases.append({"strategy": "optimal", "time_limit": "600", "max_seq_length": "1", "overflow": "split"})
    return cases


@pytest.mark.parametrize("params", _sweep(), ids=lambda p: "&".join(f"{k}={str(v)[:12]}" for k, v in p.items()))
def test_crafted_links_give_plain_lines_only(params: dict[str, str | list[str]]) -> None:
    at = open_link(params)
    no_leak(at, " ".join(str(v) for v in params.values()))
    for kind in ("markdown", "warning", "error", "info", "caption"):
        for element in at.get(kind):
            live = re.sub(r"\\.", "", str(element.value))
            assert "<script" not in live and "](" not in live, (kind, element.value)


def test_the_sweep_leaves_out_sizes_that_expand_past_the_bound() -> None:
    link = {"source": "synthetic", "count": "1000", "max_length": "100000", "overflow": "split", "tab": "Sweep"}
    at = AppTest.from_file(APP, default_timeout=TIMEOUT)
    at.query_params.update(link)
    at.run()
    at.text_input(key="sweep_sizes_100000").set_value("1, 100000").run()
    no_leak(at)
    assert any("Left out max_seq_length 1:" in w for w in (plain(e.value) for e in at.warning))


@pytest.mark.parametrize(
    ("roles", "said"),
    [
        (["<b>x</b>", "assistant"], "roles_to_train='<b>x</b>' is not a role name"),
        ([f"r{i}" for i in range(20)], "roles_to_train names 20 roles; a link may name up to 8"),
    ],
)
def test_every_value_of_a_repeated_roles_parameter_is_checked(roles: list[str], said: str) -> None:
    """Streamlit's ``to_dict`` keeps a repeated parameter's last value only: a bad first role, or twenty roles
    ending in a good one, passed the link's check and reached the multiselect (found by the browser pass)."""
    at = open_link({"source": "text", "roles_to_train": roles})
    no_leak(at, " ".join(roles))
    assert any(said in plain(w.value) for w in at.warning), [plain(w.value) for w in at.warning]
    assert "roles_to_train" not in at.query_params
    chosen = [m for m in at.multiselect if m.key == "roles_to_train"]
    assert all(list(m.value) == ["assistant"] for m in chosen), [m.value for m in chosen]
