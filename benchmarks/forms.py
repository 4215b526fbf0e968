"""Peak resident memory and wall time of ``packing pack`` for every input form, against the bound the
command line promises: the input's Arrow size + 1 GiB.

    python benchmarks/forms.py --workdir /tmp/forms                 # every form, ~60 M tokens (text: 20 M)
    python benchmarks/forms.py --quick                              # tiny files: checks that everything runs
    python benchmarks/forms.py --only ids/parquet,mask/parquet --layouts file --tokens 150e6
    python benchmarks/forms.py --output benchmarks/forms_results.md # also write the report
    python benchmarks/forms.py --only ids/parquet --layouts file --pack-args="--layout trl --loss-weights token"

Each *case* is a form (what the rows hold) in a format (how the file stores them), as one file or a
folder of ``--shards`` files, or (``--layouts line``) one file of one row holding every token (one JSON line, one
CSV cell):

- token forms: ``ids`` (``input_ids``, list<int32>), ``mask`` (and ``loss_mask``, list<int8>), ``labels``
  (and transformers' ``labels``, list<int64>, -100 over the first third of each row), ``pc_ids``
  (``prompt`` and ``completion`` ids, the prompt the first third);
- text forms, through ``--tokenizer``: ``text`` (``bytes``: the built-in byte tokenizer; ``bpe``: a
  byte-level BPE trained here on the same words and saved to a folder, no download), ``pc_text``
  (``prompt``/``completion`` strings) and ``chats`` (``messages``: a user turn then an assistant turn);
- formats: ``parquet`` (row groups of 10,000 rows), ``arrow`` (Arrow IPC file), ``stream`` (Arrow IPC
  stream in record batches of 1,000 rows, what ``save_to_disk`` writes), ``jsonl``, ``json`` (one array of
  row objects) and ``csv`` (ids as space-separated cells).

Lengths are log-normal (mean about 490 tokens, as in issue 30's file: 120,000 rows for 59 M tokens), seed
0; text is random lowercase words, so the byte tokenizer gives one token a character (plus EOS). For each
case the file is written, its bytes counted and its *Arrow size* taken (``nbytes`` of the pyarrow tables
it was written from: what the data weighs decoded), then ``python -m packing pack FILE --output
OUT.parquet --max-seq-length 4096`` (and ``--pack-args``: the output's layout, loss weights) runs in a fresh child which reports its own peak resident memory
(``VmHWM`` from ``/proc/self/status`` as it exits: the child's ``ru_maxrss`` would carry the forking
parent's resident size; see ``read.py``). Tokens and blocks come from the command's summary. ratio = peak
RSS / (Arrow size + 1 GiB): at most 1 is within the bound. Files are deleted after each case; RSS does not
depend on load, wall times do (the report gives the load average before and after).
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shlex
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

# run as a script, this file's folder comes first on the path, where tokenization.py would hide the
# standard library's `tokenize` module: take the folder off before anything else
_HERE = os.path.dirname(os.path.abspath(__file__))
sys.path[:] = [entry for entry in sys.path if os.path.abspath(entry or os.curdir) != _HERE]
ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

import numpy as np  # noqa: E402
import pyarrow as pa  # noqa: E402
import pyarrow.ipc as ipc  # noqa: E402
import pyarrow.parquet as pq  # noqa: E402

GIB = 2**30
MEAN_LOG, SIGMA = 5.8, 0.9  # mean exp(5.8 + 0.9**2 / 2) = 496 tokens a row
ROW_GROUP = 10_000
TOKEN_FORMS = ("ids", "mask", "labels", "pc_ids")
TEXT_FORMS = ("text", "pc_text", "chats")
FORMATS = {"parquet": ".parquet", "arrow": ".arrow", "stream": ".arrow", "jsonl": ".jsonl", "json": ".json",
           "csv": ".csv"}  # fmt: skip
CASES = [
    "ids/parquet", "ids/arrow", "ids/stream", "ids/jsonl", "ids/json", "ids/csv",
    "mask/parquet", "mask/jsonl", "labels/parquet", "labels/stream", "pc_ids/parquet", "pc_ids/jsonl",
    "text/jsonl/bytes", "text/parquet/bytes", "text/jsonl/bpe", "text/parquet/bpe",
    "pc_text/jsonl/bytes", "pc_text/parquet/bytes", "chats/jsonl/bytes", "chats/parquet/bytes",
]  # fmt: skip
"""Every case: form/format, and the tokenizer for text forms."""

_OWN_PEAK = (
    "import atexit, runpy, sys\n"
    "def peak():\n"
    "    print('VmHWM', [l for l in open('/proc/self/status') if l.startswith('VmHWM')][0].split()[1], file=sys.stderr)\n"
    "atexit.register(peak)\n"
    "sys.argv = ['packing', *sys.argv[1:]]\n"
    "runpy.run_module('packing', run_name='__main__', alter_sys=True)\n"
)
"""Runs the command line and prints its own peak resident memory (``VmHWM``, KiB) as it exits."""


def say(text: str) -> None:
    print(text, file=sys.stderr, flush=True)


def load_average() -> str:
    one, five, fifteen = os.getloadavg()
    return f"{one:.2f}, {five:.2f}, {fifteen:.2f}"


# ---------------------------------------------------------------- data


def lengths_for(tokens: float, seed: int = 0) -> np.ndarray:
    """Log-normal row lengths (at least 1) summing to about ``tokens``."""
    rng = np.random.default_rng(seed)
    rows = max(1, int(tokens / np.exp(MEAN_LOG + SIGMA**2 / 2)))
    return np.maximum(rng.lognormal(MEAN_LOG, SIGMA, rows).astype(np.int64), 1)


def _lists(values: np.ndarray, lengths: np.ndarray) -> pa.ListArray:
    offsets = np.zeros(len(lengths) + 1, dtype=np.int32)
    np.cumsum(lengths, out=offsets[1:])
    return pa.ListArray.from_arrays(pa.array(offsets), pa.array(values))


def _words(rng: np.random.Generator, count: int) -> str:
    """``count`` characters of lowercase words (one space after about every sixth letter)."""
    letters = np.frombuffer(b"abcdefghijklmnopqrstuvwxyz     ", dtype=np.uint8)
    return letters[rng.integers(0, len(letters), count)].tobytes().decode("ascii")


def _strings(text: str, lengths: np.ndarray) -> list[str]:
    ends = np.cumsum(lengths).tolist()
    return [text[a:b] for a, b in zip([0, *ends[:-1]], ends, strict=True)]


def chunk_table(form: str, lengths: np.ndarray, rng: np.random.Generator) -> pa.Table:
    """One chunk of rows of ``form`` with these lengths (tokens; characters for text forms)."""
    total = int(lengths.sum())
    if form in TOKEN_FORMS:
        ids = rng.integers(0, 50_000, total, dtype=np.int32)
        if form == "pc_ids":
            first = np.maximum(lengths // 3, 1)
            starts = np.concatenate(([0], np.cumsum(lengths)[:-1]))
            place = np.arange(total) - np.repeat(starts, lengths)
            in_prompt = place < np.repeat(first, lengths)
            rest = np.maximum(lengths - first, 1)  # a completion of at least one token
            completion = ids[~in_prompt]
            short = np.flatnonzero(lengths - first < 1)
            if short.size:  # rows of one token: their completion gets one more
                completion = np.insert(completion, np.cumsum(lengths - first)[short], 7)
            return pa.table({"prompt": _lists(ids[in_prompt], first), "completion": _lists(completion, rest)})
        columns: dict[str, Any] = {"input_ids": _lists(ids, lengths)}
        if form == "mask":
            columns["loss_mask"] = _lists((rng.random(total) < 0.7).astype(np.int8), lengths)
        if form == "labels":
            starts = np.concatenate(([0], np.cumsum(lengths)[:-1]))
            place = np.arange(total) - np.repeat(starts, lengths)
            labels = np.where(place < np.repeat(lengths // 3, lengths), -100, ids).astype(np.int64)
            columns["labels"] = _lists(labels, lengths)
        return pa.table(columns)
    text = _strings(_words(rng, total), lengths)
    if form == "text":
        return pa.table({"text": text})
    cut = [max(1, len(t) // 3) for t in text]
    prompts = [t[:c] for t, c in zip(text, cut, strict=True)]
    answers = [t[c:] or "x" for t, c in zip(text, cut, strict=True)]
    if form == "pc_text":
        return pa.table({"prompt": prompts, "completion": answers})
    messages = [
        [{"role": "user", "content": p}, {"role": "assistant", "content": a}]
        for p, a in zip(prompts, answers, strict=True)
    ]
    kind = pa.list_(pa.struct([("role", pa.string()), ("content", pa.string())]))
    return pa.table({"messages": pa.array(messages, kind)})


def chunks(form: str, lengths: np.ndarray, seed: int) -> Iterator[pa.Table]:
    rng = np.random.default_rng(seed + 1)
    for lo in range(0, len(lengths), ROW_GROUP):
        yield chunk_table(form, lengths[lo : lo + ROW_GROUP], rng)


def _csv_cell(value: Any) -> str:
    if isinstance(value, list):
        return " ".join(map(str, value))
    text = str(value)
    return '"' + text.replace('"', '""') + '"' if any(c in text for c in ',"\n\r') else text


def write(tables: Iterator[pa.Table], path: Path, format: str) -> int:
    """Write the tables to ``path`` in ``format``; their Arrow size (bytes, every chunk's ``nbytes``)."""
    size = 0
    first = next(tables)

    def every() -> Iterator[pa.Table]:
        nonlocal size
        for table in [first]:
            size += table.nbytes
            yield table
        for table in tables:
            size += table.nbytes
            yield table

    if format == "parquet":
        with pq.ParquetWriter(path, first.schema) as writer:
            for table in every():
                writer.write_table(table, row_group_size=ROW_GROUP)
    elif format in ("arrow", "stream"):
        with pa.OSFile(str(path), "wb") as sink:
            opened = ipc.new_file(sink, first.schema) if format == "arrow" else ipc.new_stream(sink, first.schema)
            with opened as writer:
                for table in every():
                    writer.write_table(table, max_chunksize=1_000 if format == "stream" else ROW_GROUP)
    elif format in ("jsonl", "json"):
        with open(path, "w", encoding="utf-8") as handle:
            opened = False
            for table in every():
                for row in table.to_pylist():
                    line = json.dumps(row, ensure_ascii=False, separators=(",", ":"))
                    if format == "jsonl":
                        handle.write(line + "\n")
                    else:
                        handle.write(("," if opened else "[") + "\n" + line)
                        opened = True
            if format == "json":
                handle.write("\n]\n")
    elif format == "csv":
        if "messages" in first.column_names:
            raise SystemExit("a CSV file holds no chats")
        with open(path, "w", encoding="utf-8", newline="") as handle:
            handle.write(",".join(first.column_names) + "\n")
            for table in every():
                columns = [table.column(name).to_pylist() for name in table.column_names]
                handle.writelines(",".join(map(_csv_cell, row)) + "\n" for row in zip(*columns, strict=True))
    else:
        raise SystemExit(f"unknown format {format}")
    return size


def build_bpe(folder: Path) -> Path:
    """A byte-level BPE (vocabulary 4,096) trained on the benchmark's words, saved as a tokenizer folder with a
    ChatML template (no download)."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast

    backend = Tokenizer(models.BPE())
    backend.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    backend.decoder = decoders.ByteLevel()
    special = ["<|endoftext|>", "<|pad|>", "<|im_start|>", "<|im_end|>"]
    trainer = trainers.BpeTrainer(
        vocab_size=4096,
        special_tokens=special,
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    rng = np.random.default_rng(99)
    backend.train_from_iterator([_words(rng, 2_000) for _ in range(2_000)], trainer)
    chatml = (
        "{%- for m in messages -%}{{- '<|im_start|>' + m['role'] + '\\n' + m['content'] + '<|im_end|>' + '\\n' -}}"
        "{%- endfor -%}{%- if add_generation_prompt -%}{{- '<|im_start|>assistant\\n' -}}{%- endif -%}"
    )
    wrapper: Any = PreTrainedTokenizerFast
    tokenizer = wrapper(tokenizer_object=backend, eos_token="<|endoftext|>", pad_token="<|pad|>", chat_template=chatml)
    tokenizer.save_pretrained(str(folder))
    return folder


# ---------------------------------------------------------------- one case


@dataclass
class Result:
    case: str
    layout: str
    rows: int
    tokens: int
    file_bytes: int
    arrow_bytes: int
    peak: int
    seconds: float
    blocks: int
    note: str = ""

    @property
    def bound(self) -> int:
        return self.arrow_bytes + GIB

    @property
    def ratio(self) -> float:
        return self.peak / self.bound


def make_input(
    case: str, layout: str, tokens: float, shards: int, folder: Path, seed: int
) -> tuple[Path, int, int, int]:
    """The case's input (a file, or a folder of ``shards`` files): its path, rows, file bytes, Arrow size."""
    form, format = case.split("/")[:2]
    lengths = lengths_for(tokens, seed)
    if form in TEXT_FORMS:  # characters; the byte tokenizer adds one EOS a row (two for chats' turns)
        lengths = np.maximum(lengths, 2)
    suffix = FORMATS[format]
    if layout == "line":  # every token in one row: one JSON line, one CSV cell of ids
        lengths = np.array([int(tokens)], dtype=np.int64)
        layout = "file"
    if layout == "file":
        path = folder / f"input{suffix}"
        arrow = write(chunks(form, lengths, seed), path, format)
        return path, len(lengths), path.stat().st_size, arrow
    path = folder / "shards"
    path.mkdir()
    arrow, size = 0, 0
    for index, part in enumerate(np.array_split(lengths, shards)):
        shard = path / f"shard-{index:05d}{suffix}"
        arrow += write(chunks(form, part, seed + index), shard, format)
        size += shard.stat().st_size
    return path, len(lengths), size, arrow


def run_pack(
    path: Path, output: Path, tokenizer: str | None, length: int, extra: list[str] | None = None
) -> tuple[int, float, int, int, str]:
    """``packing pack`` in a fresh child (with the ``extra`` arguments: ``--pack-args``): its peak RSS (bytes),
    wall seconds, tokens, blocks, first line of its stderr other than the peak (a warning, or an error)."""
    arguments = ["pack", str(path), "--output", str(output), "--max-seq-length", str(length), "--quiet"]
    arguments += extra or []
    if tokenizer is not None:
        arguments += ["--tokenizer", tokenizer]
    start = time.perf_counter()
    done = subprocess.run(
        [sys.executable, "-c", _OWN_PEAK, *arguments],
        cwd=ROOT,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
        capture_output=True,
        text=True,
    )
    seconds = time.perf_counter() - start
    peak = int(done.stderr.rsplit("VmHWM", 1)[1].split()[0]) * 1024 if "VmHWM" in done.stderr else 0
    other = [line for line in done.stderr.splitlines() if line.strip() and not line.startswith("VmHWM")]
    if done.returncode != 0:
        return peak, seconds, 0, 0, f"failed ({done.returncode}): {other[-1] if other else ''}"
    found = re.search(r"([\d,]+) sequences, ([\d,]+) tokens", done.stdout)
    tokens = int(found.group(2).replace(",", "")) if found else 0
    blocks = pq.ParquetFile(output).metadata.num_rows
    return peak, seconds, tokens, blocks, other[0] if other else ""


def run_case(case: str, layout: str, args: argparse.Namespace, work: Path, bpe: Path | None) -> Result:
    parts = case.split("/")
    form = parts[0]
    tokenizer = None
    if form in TEXT_FORMS:
        tokenizer = "bytes" if parts[2] == "bytes" else str(bpe)
    tokens = args.text_tokens if form in TEXT_FORMS else args.tokens
    folder = Path(tempfile.mkdtemp(dir=work, prefix="case-"))
    try:
        say(f"{case} ({layout}): writing about {tokens:,.0f} tokens ...")
        path, rows, size, arrow = make_input(case, layout, tokens, args.shards, folder, args.seed)
        say(f"{case} ({layout}): packing {size / GIB:.2f} GiB ({rows:,} rows) ...")
        extra = shlex.split(args.pack_args)
        peak, seconds, count, blocks, note = run_pack(
            path, folder / "out.parquet", tokenizer, args.max_seq_length, extra
        )
        note = " ".join(part for part in (args.pack_args, note) if part)
        result = Result(case, layout, rows, count, size, arrow, peak, seconds, blocks, note)
        say(f"{case} ({layout}): peak {peak / GIB:.2f} GiB, {seconds:.0f} s, ratio {result.ratio:.2f} {note}")
        return result
    finally:
        shutil.rmtree(folder, ignore_errors=True)


# ---------------------------------------------------------------- report


def table(results: list[Result]) -> str:
    header = ["case", "layout", "rows", "tokens", "file", "Arrow size", "peak RSS", "bound (Arrow + 1 GiB)",
              "ratio", "within", "wall", "blocks", "note"]  # fmt: skip
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    for r in results:
        cells = [
            r.case, r.layout, f"{r.rows:,}", f"{r.tokens:,}", f"{r.file_bytes / GIB:.3f} GiB",
            f"{r.arrow_bytes / GIB:.3f} GiB", f"{r.peak / GIB:.2f} GiB", f"{r.bound / GIB:.2f} GiB",
            f"{r.ratio:.2f}", "yes" if r.ratio <= 1 else "**no**", f"{r.seconds:.0f} s", f"{r.blocks:,}", r.note,
        ]  # fmt: skip
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines)


def machine_lines() -> list[str]:
    """Date, machine, software and commit, as ``run.py`` reports them."""
    import importlib.util

    spec = importlib.util.spec_from_file_location("_run", Path(_HERE) / "run.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules["_run"] = module  # its dataclasses look their module up
    spec.loader.exec_module(module)
    return list(module.machine_lines())


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--quick", action="store_true", help="tiny files (20,000 tokens): checks that it runs")
    parser.add_argument("--tokens", type=float, default=60e6, help="tokens of each token-form input")
    parser.add_argument("--text-tokens", type=float, default=20e6, help="characters of each text-form input")
    parser.add_argument("--only", default="", help="comma-separated cases (default: all of them)")
    parser.add_argument(
        "--layouts", default="file,shards", help="file, shards (both: the default) or line (every token in one row)"
    )
    parser.add_argument("--shards", type=int, default=4, help="files in a folder of shards (default 4)")
    parser.add_argument("--max-seq-length", type=int, default=4096)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--workdir", default=None, help="where the inputs are written (default: the temp folder)")
    parser.add_argument("--output", default=None, help="also write the report to this Markdown file")
    parser.add_argument(
        "--pack-args",
        default="",
        metavar="ARGS",
        help="more arguments for every `packing pack`, one string (the output's layout and loss weights: "
        "--pack-args='--layout trl --loss-weights token'); shown in each row's note",
    )
    args = parser.parse_args(argv)
    if args.quick:
        args.tokens, args.text_tokens, args.shards = 20_000, 20_000, 2
    args.cases = [c for c in args.only.split(",") if c] or CASES
    unknown = [c for c in args.cases if c not in CASES]
    if unknown:
        parser.error(f"unknown case {unknown[0]!r}; cases: {', '.join(CASES)}")
    args.layout_list = [layout for layout in args.layouts.split(",") if layout]
    if not set(args.layout_list) <= {"file", "shards", "line"}:
        parser.error(f"--layouts: expected file, shards, line or a list of them, got {args.layouts!r}")
    return args


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    work = Path(args.workdir) if args.workdir else Path(tempfile.gettempdir())
    work.mkdir(parents=True, exist_ok=True)
    before, machine = load_average(), machine_lines()  # the date the run started
    results: list[Result] = []
    with tempfile.TemporaryDirectory(dir=work, prefix="forms-") as scratch:
        bpe = build_bpe(Path(scratch) / "bpe") if any(c.endswith("/bpe") for c in args.cases) else None
        for case in args.cases:
            for layout in args.layout_list:
                results.append(run_case(case, layout, args, Path(scratch), bpe))
                if args.output:  # the rows so far, should a long run be cut short
                    Path(args.output).write_text(report(args, argv, machine, before, results), encoding="utf-8")
    text = report(args, argv, machine, before, results)
    print(text)
    if args.output:
        Path(args.output).write_text(text, encoding="utf-8")
    say(f"{sum(r.ratio <= 1 for r in results)} of {len(results)} cases within the bound")
    return 1 if any(r.note.startswith("failed") for r in results) else 0  # over the bound is a result, not a failure


def report(
    args: argparse.Namespace, argv: list[str] | None, machine: list[str], before: str, results: list[Result]
) -> str:
    return "\n".join(
        [
            "# `packing pack`: peak RSS of every input form against the input's Arrow size + 1 GiB",
            "",
            *machine,
            f"- load average (1, 5, 15 min): {before} before, {load_average()} after",
            f"- command: `python benchmarks/forms.py {' '.join(argv if argv is not None else sys.argv[1:])}`",
            f"- sizes: token forms about {args.tokens / 1e6:g} M tokens, text forms about "
            f"{args.text_tokens / 1e6:g} M characters; folders of {args.shards} shards; L = {args.max_seq_length}",
            "",
            table(results),
            "",
        ]
    )


if __name__ == "__main__":
    sys.exit(main())
