"""The command line: ``python -m packing pack`` writes packed blocks, ``python -m packing compare`` compares strategies.

Usage::

    python -m packing pack data.jsonl --max-seq-length 2048 --strategy bfd --output blocks.parquet
    python -m packing pack shards/ --max-seq-length 2048 --output blocks.parquet   # a folder (or glob) of shards
    python -m packing compare lengths.json --max-seq-length 2048 --strategies split,ffd,bfd

Bad input (a missing file, an unknown column, a non-integer token, an output
that cannot be written, a bad option) gives one line on stderr,
``packing: error: ...``, and exit code 2: no traceback, and no half-written
output file.

>>> import json, os, tempfile
>>> source = os.path.join(tempfile.mkdtemp(), "lengths.json")
>>> _ = open(source, "w").write(json.dumps({"lengths": [6, 5, 3, 2]}))
>>> main(["compare", source, "--max-seq-length", "8", "--strategies", "next_fit,bfd"])
input: ...lengths.json, 4 sequences, 16 tokens, longest 6; max_seq_length 8, overflow truncate
<BLANKLINE>
strategy  blocks  lower bound  gap  efficiency  padding  tokens lost  sequences cut  dropped  time
next_fit       3            2    1     66.67 %        8            0              0        0  ...
bfd            2            2    0    100.00 %        0            0              0        0  ...
<BLANKLINE>
lower bound: ...
0

Internal: the command line is ``python -m packing`` (or ``packing``); this module is its implementation.
"""

from __future__ import annotations

import argparse
import dataclasses
import difflib
import json
import os
import signal
import sys
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from types import FrameType
from typing import Any

import pyarrow as pa

from packing.batches._packed import PackedBatch, run
from packing.batches._schema import help_text
from packing.batches._units import fit_unit_lengths
from packing.comparison import DEFAULT_CONTENDERS, TRL_WINDOW, Contender, Row, compare
from packing.core._validation import check_time_limit
from packing.errors import PackingError, one_line
from packing.layouts import LAYOUT_TITLES
from packing.layouts._export import export_chunks, write_jsonl, write_parquet, write_table
from packing.layouts._outputs import exclusive
from packing.layouts.audit import LAYOUTS, AuditReport, audit, report_json
from packing.reading._dataset import FileSamples, read_files
from packing.reading._files import FORMATS, PACKED_FORMATS, listed, read_whole, resolve
from packing.recipe import PEER_NAMES, Door, Recipe, option_fields
from packing.strategies._bounds import lower_bounds
from packing.strategies._registry import STRATEGIES
from packing.strategies._stats import PackingStats
from packing.text._prepare import Prepared, prepare
from packing.weighting import LOSS_MODES, LossMode

Writer = Callable[[PackedBatch, Path], None]
WRITERS: dict[str, Callable[..., None]] = {".parquet": write_parquet, ".jsonl": write_jsonl}
"""Output writers by file extension."""
COMPARE_HEADER = [
    "strategy",
    "blocks",
    "lower bound",
    "gap",
    "efficiency",
    "padding",
    "tokens lost",
    "sequences cut",
    "dropped",
    "time",
]
BOUND_NOTE = (
    "lower bound: the fewest blocks any packing could use; ceil(tokens / max_seq_length) when sequences "
    "may be split, the Martello-Toth L2 bound otherwise"
)


class UsageError(Exception):
    """A problem with the command line or its files, reported as one line and exit code 2."""


class _Parser(argparse.ArgumentParser):
    """An argument parser that raises instead of printing usage and exiting, takes no abbreviated option, and
    names an unknown option before anything else (a misspelt ``--max-seq-length`` is not "missing")."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        kwargs.setdefault("allow_abbrev", False)
        super().__init__(*args, **kwargs)

    def parse_known_args(self, args: Any = None, namespace: Any = None) -> Any:
        if args is not None and self._subparsers is None:  # a command's own options (argparse's table of them)
            _refuse_unknown_options(list(args), set(self._option_string_actions), self.prog)
        return super().parse_known_args(args, namespace)

    def error(self, message: str) -> None:  # type: ignore[override]
        """Raise ``UsageError`` so ``main`` prints one line and returns 2."""
        raise UsageError(message)


def _refuse_unknown_options(argv: list[str], flags: set[str], command: str) -> None:
    """Refuse the first long option in ``argv`` that ``command`` does not take, naming it: another library's name
    answered with this one's (``PEER_NAMES``), ``--max_seq_length`` with ``--max-seq-length``, a near miss with the
    option meant. O(arguments × options).

    >>> _refuse_unknown_options(["x.jsonl", "--max-len", "8"], {"--max-seq-length", "--output"}, "packing pack")
    Traceback (most recent call last):
    ...
    packing._cli.UsageError: unrecognized option --max-len (did you mean --max-seq-length?)
    """
    for token in argv:
        if token == "--":
            return
        if not token.startswith("--") or token.split("=", 1)[0] in flags:
            continue
        given = token.split("=", 1)[0]
        name = given[2:].replace("-", "_")
        spelled = "--" + name.replace("_", "-")
        if given in RENAMED_FLAGS:
            raise UsageError(f"unrecognized option {given}: expected {RENAMED_FLAGS[given]}")
        if name in PEER_NAMES:
            answer = PEER_NAMES[name].error(name, None).answer(lambda option: _flag(option) or option)
            raise UsageError(f"unrecognized option {given}: expected {answer}")
        if spelled in flags:
            raise UsageError(f"unrecognized option {given} (did you mean {spelled}?)")
        close = difflib.get_close_matches(spelled, sorted(flags), n=1)
        hint = f"did you mean {close[0]}?" if close else f"{command} --help lists its options"
        raise UsageError(f"unrecognized option {given} ({hint})")


RENAMED_FLAGS = {"--format": "--layout (a framework's columns; --input-format is the input files' format)"}
"""Flags of earlier versions, answered with the flag meant now."""

# ---------------------------------------------------------------- arguments


def _strategy_list(text: str) -> list[Contender]:
    """A comma-separated list of strategies, each ``NAME`` or ``NAME/WINDOW``, checked, duplicates removed.

    >>> [c.label for c in _strategy_list("bfd, split,bfd,bfd/1000")]
    ['bfd', 'split', 'bfd, windows of 1,000']
    """
    names = list(dict.fromkeys(name.strip() for name in text.split(",") if name.strip()))
    if not names:
        raise argparse.ArgumentTypeError("expected at least one strategy name")
    contenders = []
    for name in names:
        if name.partition("/")[0].strip() not in STRATEGIES:
            raise argparse.ArgumentTypeError(f"unknown strategy {name!r}; expected one of: {', '.join(STRATEGIES)}")
        try:
            contender = Contender.parse(name)
            contender.recipe(1, "truncate")  # its window checked by the recipe's rule
            contenders.append(contender)
        except PackingError as error:
            raise argparse.ArgumentTypeError(str(error)) from None
    return contenders


def input_help(formats: Sequence[str] = FORMATS) -> str:
    """The help of a command's input: files of ``formats`` (the reader's), globs, folders.

    >>> input_help()[:52]
    'dataset: files (.jsonl, .json, .csv, .parquet or .ar'
    """
    return (
        f"dataset: files ({listed(formats)}), a quoted glob ('data/*.parquet'), a folder of shards or a datasets "
        "save_to_disk folder; several are read as one dataset, in sorted order"
    )


def _input(args: argparse.Namespace) -> str | list[str]:
    """The input argument(s): one path, glob or folder as it is, several as a list.

    >>> _input(argparse.Namespace(input=["a.jsonl"])), _input(argparse.Namespace(input=["b.jsonl", "a.jsonl"]))
    ('a.jsonl', ['b.jsonl', 'a.jsonl'])
    """
    inputs: list[str] = args.input
    return inputs[0] if len(inputs) == 1 else inputs


def _flag(name: str) -> str | None:
    """The command line's spelling of recipe option ``name`` (``--max-seq-length``); None for other names."""
    return "--" + name.replace("_", "-") if name in _RECIPE_NAMES else None


_RECIPE_NAMES = frozenset(f.name for f in option_fields())


def _add_common(parser: argparse.ArgumentParser, door: Door, own: Sequence[str] = ()) -> None:
    """The input, its format, and one option per recipe field the command ``door`` uses (the field's ``doors``),
    from the field's metadata (help, choices, metavar, parse); the defaults and checks are the recipe's (an option
    left out keeps its default). The command remembers which it took; ``own`` are options it reads itself, outside
    its recipe."""
    parser.add_argument("input", nargs="+", help=input_help())
    parser.add_argument(
        "--input-format", dest="format", choices=FORMATS, help="input file format (default: from the file extension)"
    )
    fields = option_fields(door=door)
    for f in fields:
        meta = f.metadata
        default = None if f.default is dataclasses.MISSING else f.default
        shown = f" (default: {default})" if isinstance(default, (str, int, float)) else ""
        flag = _flag(f.name)
        assert flag is not None
        if meta["parse"] is bool:  # a flag: --int64 turns an option off by default on, --no-x one on by default off
            on = not default
            name = flag if on else "--no-" + flag[2:]
            shown_help = _CLI_HELP.get(f.name, meta["help"])
            parser.add_argument(name, dest=f.name, action="store_const", const=on, default=None, help=shown_help)
            continue
        parser.add_argument(
            flag,
            type=_parser_of(meta["parse"]),
            choices=list(meta["choices"]) or None,
            metavar=meta["metavar"],
            required=f.default is dataclasses.MISSING,
            help=meta["help"] + shown,
        )
    parser.set_defaults(door=door, recipe_fields=tuple(f.name for f in fields if f.name not in own))


_CLI_HELP = {
    "int64": "ids, labels and positions as int64 (default: int32, the compact schema, unless an id is above "
    "2**31 - 1: then int64)"
}
"""The command line's own help for a recipe option where it does more than the library (``pack`` widens ids that do
not fit in int32 by itself)."""


def _parser_of(parse: type) -> Callable[[str], Any]:
    """``parse`` for argparse: a value it cannot read is ``expected an integer, got 'x'`` (the recipe checks the rest).

    >>> _parser_of(int)("ten")
    Traceback (most recent call last):
    ...
    argparse.ArgumentTypeError: expected an integer, got 'ten'
    """
    kind = {int: "an integer", float: "a number"}.get(parse, "a value")

    def read(text: str) -> Any:
        try:
            return parse(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"expected {kind}, got {text!r}") from None

    return read


def _recipe(args: argparse.Namespace) -> Recipe:
    """The recipe of the options this command took (one check, the recipe's)."""
    given = {name: getattr(args, name) for name in args.recipe_fields if name != "max_seq_length"}
    return Recipe.at(args.door, None, args.max_seq_length, **given)


def _add_pack(commands: argparse._SubParsersAction[_Parser]) -> None:
    """The ``pack`` command and its options."""
    parser = commands.add_parser(
        "pack",
        help="pack a dataset and write the blocks to .parquet or .jsonl",
        description="Pack token sequences into blocks of exactly N tokens and write them, one row per block, "
        f"with columns {help_text()}.",
    )
    _add_common(parser, "packing pack")
    parser.add_argument(
        "--no-shuffle",
        action="store_true",
        help="write blocks in plan order (decreasing strategies then put the longest samples first)",
    )
    parser.add_argument("--output", "-o", required=True, help="output file, .parquet or .jsonl")
    parser.add_argument(
        "--layout",
        choices=LAYOUTS,
        default="packing",
        help="layout of the output: this project's columns (default) or another framework's",
    )
    parser.add_argument(
        "--loss-weights",
        choices=LOSS_MODES,
        help="also write a loss_weights column: per-token weights of this objective (token: mean over trained "
        "tokens; sequence: mean over documents of their mean; sequence_sum; sqrt)",
    )
    parser.add_argument("--quiet", "-q", action="store_true", help="no progress messages on stderr")
    parser.add_argument("--json", action="store_true", help="print the summary as JSON: every count of the statistics")
    parser.set_defaults(run=_run_pack)


def _add_compare(commands: argparse._SubParsersAction[_Parser]) -> None:
    """The ``compare`` command and its options."""
    parser = commands.add_parser(
        "compare",
        help="compare strategies on a dataset's lengths",
        description="Plan every strategy on the sequence lengths of a dataset (token columns, a 'length' "
        "column or a histogram JSON) and print blocks, lower bound, efficiency, losses and time.",
    )
    _add_common(parser, "packing compare", own=("time_limit",))  # one per contender: outside the recipe
    parser.add_argument(
        "--strategies",
        type=_strategy_list,
        default=list(DEFAULT_CONTENDERS),
        metavar="A,B/W,...",
        help=f"strategies to compare, NAME/W packing each window of W sequences on its own (default: all of "
        f"{', '.join(STRATEGIES)}, and bfd/{TRL_WINDOW} as TRL packs by default)",
    )
    parser.set_defaults(run=_run_compare)


def build_parser() -> argparse.ArgumentParser:
    """The ``packing`` argument parser with its ``pack`` and ``compare`` commands.

    >>> [c.label for c in build_parser().parse_args(["compare", "x.csv", "--max-seq-length", "8"]).strategies[:2]]
    ['split', 'next_fit']
    """
    parser = _Parser(prog="packing", description="Sample packing for language-model fine-tuning.")
    commands = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    _add_pack(commands)
    _add_compare(commands)
    _add_audit(commands)
    return parser


# ---------------------------------------------------------------- output helpers


def format_table(header: Sequence[str], rows: Sequence[Sequence[str]]) -> str:
    """Plain text columns: the first left-aligned, the others right-aligned, two spaces apart.

    A row shorter than the others (a note such as ``n/a``) is not aligned past its
    first cell. O(cells).

    >>> print(format_table(["name", "n"], [["a", "10"], ["bb", "2"], ["c", "n/a (skipped)"]]))
    name   n
    a     10
    bb     2
    c     n/a (skipped)
    """
    lines = [list(header), *map(list, rows)]
    full = max(len(line) for line in lines)
    widths = [max(len(line[column]) for line in lines if len(line) == full) for column in range(full)]
    out = []
    for line in lines:
        if len(line) < full:
            out.append("  ".join([line[0].ljust(widths[0]), *line[1:]]).rstrip())
            continue
        cells = [line[0].ljust(widths[0])] + [
            cell.rjust(width) for cell, width in zip(line[1:], widths[1:], strict=True)
        ]
        out.append("  ".join(cells).rstrip())
    return "\n".join(out)


def format_pairs(pairs: Sequence[tuple[str, str]]) -> str:
    """``name  value`` lines, names padded to the longest.

    >>> print(format_pairs([("blocks", "3"), ("efficiency", "75.00 %")]))
    blocks      3
    efficiency  75.00 %
    """
    width = max((len(name) for name, _ in pairs), default=0)
    return "\n".join(f"{name.ljust(width)}  {value}" for name, value in pairs)


def _seconds(value: float) -> str:
    """A duration for people.

    >>> _seconds(0.01234), _seconds(2.5)
    ('12.3 ms', '2.50 s')
    """
    return f"{value * 1000:.1f} ms" if value < 1 else f"{value:.2f} s"


def _percent(value: float) -> str:
    """A fraction as a percentage with two decimals."""
    return f"{100 * value:.2f} %"


def _describe_input(dataset: FileSamples) -> str:
    """The input file in one line: sequences, tokens, longest."""
    lengths = dataset.lengths
    longest = int(lengths.max()) if len(lengths) else 0
    return f"{dataset.source}, {len(lengths):,} sequences, {int(lengths.sum()):,} tokens, longest {longest:,}"


def _stderr_is_terminal() -> bool:
    """Whether progress messages would reach a person."""
    return sys.stderr.isatty()


class Progress:
    """Stage messages on stderr (when ``show``) and the time each stage took.

    >>> progress = Progress(show=False)
    >>> with progress.stage("read", "reading"):
    ...     pass
    >>> list(progress.times)
    ['read']
    """

    def __init__(self, show: bool) -> None:
        self.show = show
        self.times: dict[str, float] = {}

    def _say(self, text: str, end: str = "\n") -> None:
        if self.show:
            print(text, end=end, file=sys.stderr, flush=True)

    @contextmanager
    def stage(self, key: str, message: str) -> Iterator[None]:
        """Announce ``message``, time the block under ``key``, then say how long it took (or that it failed)."""
        self._say(f"{message} ...", end="")
        start = time.perf_counter()
        try:
            yield
        except BaseException:
            self._say(" failed")
            raise
        self.times[key] = time.perf_counter() - start
        self._say(f" done in {_seconds(self.times[key])}")


# ---------------------------------------------------------------- reading (and tokenizing)


def _read_input(
    args: argparse.Namespace,
    recipe: Recipe,
    prepared: Prepared | None = None,
    progress: Progress | None = None,
    message: str = "",
) -> FileSamples:
    """The input dataset through the one reader with the command's ``recipe`` (and its ``prepared`` options, made
    here if not given); with ``--tokenizer``, text rows are tokenized (with a count)."""

    def report(done: int, total: int) -> None:
        if progress is not None:
            progress._say(f"\r{message} ... {done:,}/{total:,} rows", end="")

    return read_files(_input(args), args.format, None, recipe, prepared or prepare(recipe), progress=report)


def _warn(dataset: FileSamples, recipe: Recipe, quiet: bool = False) -> None:
    """The dataset's notes (``FileSamples.notes``: files that look packed) as warnings on stderr, and a note when
    ``--share-prompt`` finds nothing to share (harmless, as at every door: plain rows have no prompt to store
    once)."""
    for note in dataset.notes:
        print(f"packing: warning: {note}", file=sys.stderr, flush=True)
    if recipe.share_prompt and dataset.samples.units is None and not quiet:
        print(f"packing: note: {SHARE_PROMPT_UNUSED.format(source=dataset.source)}", file=sys.stderr, flush=True)


SHARE_PROMPT_UNUSED = "--share-prompt changes nothing: {source} holds no preference pair or completion group"


def _refuse_reading_the_output(args: argparse.Namespace, output: Path) -> None:
    """Refuse an input that is (or, through a glob or a folder, holds) the output: the blocks written by an earlier
    run would be read back as samples, and the file being written read while it is. O(files)."""
    if not output.exists():
        return
    try:
        found = resolve(_input(args), args.format).files
    except PackingError:  # reading the input says why
        return
    for file in found:
        if isinstance(file.source, (str, os.PathLike)) and os.path.samefile(file.source, output):
            given = " ".join(args.input)
            via = "" if os.fspath(file.source) in args.input else f" (matched by {given})"
            raise UsageError(
                f"{file.label} is the output and an input{via}: its blocks would be read back as samples; "
                "write the output elsewhere or leave it out of the input"
            )


# ---------------------------------------------------------------- pack


def _writer(output: Path, layout: str = "packing", loss_weights: LossMode | None = None) -> Writer:
    """The writer of ``layout`` (and its ``loss_weights`` column) for the output's extension, after checking the file
    can be created there: ``.parquet`` and ``.jsonl`` chunk by chunk, NeMo's ``.npy`` (``--layout megatron``) its
    table made chunk by chunk, then pickled whole (``np.save`` of every row, as NeMo's loader reads it)."""
    suffix = output.suffix.lower()
    if suffix not in WRITERS and not (layout == "megatron" and suffix == ".npy"):
        npy = " (or .npy with --layout megatron)"
        raise UsageError(f"--output must end in .parquet or .jsonl{npy}, got '{output}'")
    folder = output.parent
    if output.is_dir():
        raise UsageError(f"cannot write {output}: it is a directory")
    if not folder.is_dir():
        raise UsageError(f"cannot write {output}: no such directory '{folder}'")
    if not os.access(folder, os.W_OK | os.X_OK):
        raise UsageError(f"cannot write {output}: permission denied in '{folder}'")

    def write(batch: PackedBatch, path: Path) -> None:
        if suffix == ".npy":
            write_table(pa.concat_tables(export_chunks(batch, "megatron", loss_weights=loss_weights)), path)
        else:
            WRITERS[suffix](batch, path, layout=layout, loss_weights=loss_weights)

    return write


def _pack_batch(recipe: Recipe, prepared: Prepared, dataset: FileSamples, shuffle: bool) -> PackedBatch:
    """Plan and shuffle (unless ``--no-shuffle``) the dataset's samples, checked for filling; the blocks are
    made chunk by chunk as they are written. Lengths-only data is refused."""
    if dataset.kind == "lengths":
        raise UsageError(
            f"{dataset.source} holds sequence lengths only; 'pack' needs token ids "
            "(use 'compare' to compare strategies on lengths)"
        )
    wide = recipe.int64 or dataset.samples.wide_ids()  # ids above 2**31 - 1: int64
    return run(dataset.samples, recipe, prepared, shuffle=shuffle, int64=wide)  # pairs and groups fitted


_WIDENED = ", ids, labels and positions as int64 (an id is above 2**31 - 1)"


def _pack_summary(
    args: argparse.Namespace, recipe: Recipe, dataset: FileSamples, batch: PackedBatch, progress: Progress
) -> str:
    """The table printed after ``pack``."""
    stats = batch.stats
    order = "in plan order" if args.no_shuffle else f"shuffled (seed {recipe.seed or 0})"
    times = ", ".join(f"{key} {_seconds(value)}" for key, value in progress.times.items())
    length, overflow, strategy = recipe.max_seq_length, recipe.overflow, recipe.strategy
    bounds = lower_bounds(dataset.lengths, length, overflow=overflow)
    rows = [
        ("input", _describe_input(dataset)),
        ("strategy", f"{strategy}, max_seq_length {length:,}, overflow {overflow}"),
        ("blocks", f"{stats.num_blocks:,}"),
        ("lower bound", f"{getattr(bounds, STRATEGIES[strategy].bound):,}"),
        ("efficiency", _percent(stats.efficiency)),
        ("padding tokens", f"{stats.padding_tokens:,}"),
        ("tokens", _accounting_text(stats)),
        ("tokens lost", f"{stats.tokens_lost:,}"),
        ("sequences truncated", f"{stats.sequences_truncated:,}"),
        ("sequences split", f"{stats.sequences_split:,}"),
        ("sequences dropped", f"{stats.sequences_dropped:,}"),
        ("trainable tokens", f"{stats.trainable_tokens:,} (loss on {recipe.loss})"),
        ("training targets", f"{stats.target_tokens:,} (labels != -100: less each document's first token)"),
        ("samples training nothing", f"{stats.samples_without_trainable_tokens:,}"),
        *_unit_rows(stats),
        ("time", f"{_seconds(sum(progress.times.values()))} ({times})"),
        (
            "output",
            f"{args.output}, {stats.num_blocks:,} blocks {order}{_WIDENED if batch.int64 > recipe.int64 else ''}",
        ),
    ]
    return format_pairs(rows)


def _accounting_text(stats: PackingStats) -> str:
    """The summary's line of what became of the input tokens (:meth:`~packing.PackingStats.accounting`).

    >>> from packing import plan
    >>> _accounting_text(plan([10, 2, 5], 4, overflow="drop").stats)
    '17 in: 2 kept, 0 truncated, 15 dropped'
    """
    counts = stats.accounting()
    kept, truncated, dropped = counts["packed_tokens"], counts["tokens_truncated"], counts["tokens_dropped"]
    return f"{counts['input_tokens']:,} in: {kept:,} kept, {truncated:,} truncated, {dropped:,} dropped"


def _unit_rows(stats: PackingStats) -> list[tuple[str, str]]:
    """The summary's lines about preference pairs and completion groups (none without them).

    >>> from packing import Recipe, read_rows
    >>> from packing.batches._packed import run
    >>> recipe = Recipe(8, share_prompt=True)
    >>> _unit_rows(run([{"prompt": [1, 2], "completions": [[3], [4]]}], recipe, prepare(recipe)).stats)[0]
    ('pairs and groups', '0 pairs, 1 groups, 2 completions (prompts stored once: 2 tokens saved)')
    """
    units = stats.units
    if units is None:
        return []
    shared = f" (prompts stored once: {units.prompt_tokens_shared:,} tokens saved)" if units.share_prompt else ""
    counts = f"{units.pairs:,} pairs, {units.groups:,} groups, {units.completions:,} completions{shared}"
    return [("pairs and groups", counts), ("units cut", units.cut_text())]


def _run_pack(args: argparse.Namespace) -> int:
    """``pack``: read, pack, write in shuffled (or plan) order, print the summary. O(tokens).

    The output's lock is held from before reading to after writing, so of two runs packing the same
    output the second is refused at once instead of overwriting the first's result.
    """
    output = Path(args.output)
    recipe = _recipe(args)
    prepared = prepare(recipe)
    warning = STRATEGIES[recipe.strategy].warning
    if warning:  # what the auditor will find in these blocks, said where the strategy is chosen
        print(f"packing: warning: {warning}", file=sys.stderr)
    writer = _writer(output, args.layout, args.loss_weights)
    _refuse_reading_the_output(args, output)
    if not args.quiet:
        for note in _whole_notes(args, output):
            print(note, file=sys.stderr, flush=True)
    progress = Progress(show=not args.quiet and _stderr_is_terminal())
    message = f"reading {' '.join(args.input)}" + (f" and tokenizing with {args.tokenizer}" if args.tokenizer else "")
    with exclusive(output):
        with progress.stage("read", message):
            dataset = _read_input(args, recipe, prepared, progress, message)
        _warn(dataset, recipe, args.quiet)
        with progress.stage("pack", f"packing {len(dataset.lengths):,} sequences with {recipe.strategy}"):
            batch = _pack_batch(recipe, prepared, dataset, not args.no_shuffle)
        with progress.stage("write", f"writing {batch.num_blocks:,} blocks to {output}"):
            try:
                writer(batch, output)
            except OSError as error:
                raise UsageError(f"cannot write {output}: {error.strerror or error}") from None
    lost = batch.stats.loss_text(cli=True)
    if lost:  # said even with --quiet, in one line: how many tokens, their share of the input, and why
        print(f"packing: warning: {lost}", file=sys.stderr, flush=True)
    print(json.dumps(batch.stats.summary()) if args.json else _pack_summary(args, recipe, dataset, batch, progress))
    return 0


# ---------------------------------------------------------------- compare


def _compare_cells(row: Row) -> list[str]:
    """One contender's line of the comparison; one that refuses the input says why."""
    if row.stats is None:
        return [row.label, f"n/a ({row.refusal})"]
    stats = row.stats
    return [
        row.label,
        f"{stats.num_blocks:,}",
        f"{row.bound:,}",
        f"{row.gap:,}",
        _percent(stats.efficiency),
        f"{stats.padding_tokens:,}",
        f"{stats.tokens_lost:,}",
        f"{stats.sequences_truncated + stats.sequences_split:,}",
        f"{stats.sequences_dropped:,}",
        _seconds(row.seconds),
    ]


def _certificate_lines(rows: list[Row]) -> list[str]:
    """What the optimum proves, in words, and how far each no-split contender is from it."""
    proven = [row for row in rows if row.plan is not None and row.plan.certificate is not None]
    if not proven:
        return []
    best = proven[0]
    certificate = best.plan.certificate  # type: ignore[union-attr]
    blocks = best.stats.num_blocks  # type: ignore[union-attr]
    lines = [
        f"optimal: no packing without splitting can use fewer than {certificate.lower_bound:,} blocks "
        f"(proof: {certificate.kind}); the plan found uses {blocks:,}"
        + (
            " (proven optimal)"
            if blocks == certificate.lower_bound
            else f", at most {blocks - certificate.lower_bound:,} above the best possible"
        )
    ]
    for row in rows:
        if row.stats is not None and row is not best and not STRATEGIES[row.contender.strategy].splits_sequences:
            more = row.stats.num_blocks - certificate.lower_bound
            lines.append(f"  {row.label} uses {more:,} more" if more else f"  {row.label} reaches it too")
    return lines


def _run_compare(args: argparse.Namespace) -> int:
    """``compare``: plan every chosen strategy on the lengths and print the table. O(sequences) each."""
    recipe = _recipe(args)
    time_limit = None if args.time_limit is None else check_time_limit(args.time_limit)  # the recipe's rule
    dataset = _read_input(args, recipe)
    _warn(dataset, recipe)
    length, overflow = recipe.max_seq_length, recipe.overflow
    lengths, contenders, planned, note = dataset.lengths, args.strategies, overflow, ""
    if dataset.samples.units is not None:  # pairs and groups: whole units, fitted as pack fits them, never split
        fit = fit_unit_lengths(dataset.samples.units, recipe)
        lengths, planned = fit.fitted.lengths(), fit.planning.overflow
        contenders = [c for c in contenders if not STRATEGIES[c.strategy].splits_sequences]
        cut = int(dataset.lengths.sum() - lengths.sum())
        note = f"pairs and groups: each unit whole ({cut:,} tokens cut to fit a block first); no strategy that splits"
    with Progress(show=_stderr_is_terminal()).stage("plan", "planning"):
        rows = compare(lengths, length, contenders, overflow=planned, time_limit=time_limit)
    print(f"input: {_describe_input(dataset)}; max_seq_length {length:,}, overflow {overflow}")
    if note:
        print(note)
    print()
    print(format_table(COMPARE_HEADER, [_compare_cells(row) for row in rows]))
    print()
    for line in [*_certificate_lines(rows), BOUND_NOTE]:
        print(line)
    return 0


# ---------------------------------------------------------------- export formats and audit


NPY_NOTE = "note: NeMo's .npy is written whole (one pickle of every row); .parquet and .jsonl outputs stream"
JSON_NOTE = "note: a JSON array is read whole; JSON lines (.jsonl) stream"


def _whole_notes(args: argparse.Namespace, output: Path) -> list[str]:
    """One line for each form ``pack`` cannot keep within its memory bound: a JSON array input (parsed whole:
    ``packing.reading._files.read_whole``) and NeMo's ``.npy`` output (pickled whole). O(files)."""
    notes = []
    whole = read_whole(_input(args), args.format)
    if whole:
        more = f" and {len(whole) - 1} more" if len(whole) > 1 else ""
        notes.append(f"{JSON_NOTE} ({whole[0]}{more})")
    if output.suffix.lower() == ".npy":
        notes.append(NPY_NOTE)
    return notes


def _add_audit(commands: argparse._SubParsersAction[_Parser]) -> None:
    """The ``audit`` command and its options."""
    parser = commands.add_parser(
        "audit",
        help="check a packed dataset made by this project or another tool",
        description="Recognise the layout of packed data, NeMo .npy files included "
        f"({'; '.join(LAYOUT_TITLES.values())}), count blocks, documents, tokens and padding, and list what lets "
        "documents see or predict each other or trains padding.",
    )
    parser.add_argument("input", nargs="+", help="packed " + input_help(PACKED_FORMATS) + "; one row per block")
    parser.add_argument(
        "--max-seq-length", type=_parser_of(int), metavar="N", help="block capacity (default: the longest block)"
    )
    parser.add_argument("--layout", choices=LAYOUTS, help="layout to read (default: recognised from the columns)")
    parser.add_argument("--strict", action="store_true", help="exit with code 1 when anything is found")
    parser.add_argument("--json", action="store_true", help="print the report as JSON")
    parser.set_defaults(run=_run_audit)


def _audit_text(report: AuditReport) -> str:
    """The report as ``name  value`` lines, then a table of the findings."""
    fill = report.summary()["block_fill"]  # min, median, max
    capacity = f"{report.max_seq_length:,}" + ("" if report.max_seq_length_given else " (longest block)")
    variant = f" ({report.packed.variant})" if report.packed.variant else ""
    documents = "unknown (no boundaries)" if report.num_documents is None else f"{report.num_documents:,}"
    pairs = [
        ("input", report.source),
        ("layout", f"{report.layout}{variant}"),
        ("blocks", f"{report.num_blocks:,}"),
        ("documents", documents),
        ("tokens", f"{report.tokens:,}"),
        ("padding tokens", f"{report.padding_tokens:,}"),
        ("max_seq_length", capacity),
        ("efficiency", _percent(report.efficiency)),
    ]
    if report.num_blocks:
        pairs.append(("block fill", ", ".join(f"{name} {_percent(value)}" for name, value in fill.items())))
    lines = [format_pairs(pairs), ""]
    if report.clean:
        lines.append("findings: none")
        return "\n".join(lines)
    rows = [
        [item.kind, f"{item.count:,}", ", ".join(f"({b}, {p})" for b, p in item.examples)] for item in report.findings
    ]
    lines.append(f"findings: {len(report.findings)}")
    lines.append(format_table(["kind", "count", "first (block, position)"], rows))
    lines.append("")
    lines.extend(f"{item.kind}: {item.description}; fix: {item.fix}" for item in report.findings)
    return "\n".join(lines)


def _run_audit(args: argparse.Namespace) -> int:
    """``audit``: read, check, print; 1 with ``--strict`` when anything was found. O(tokens)."""
    report = audit(_input(args), max_seq_length=args.max_seq_length, layout=args.layout)
    print(report_json(report) if args.json else _audit_text(report))
    return 1 if args.strict and not report.clean else 0


# ---------------------------------------------------------------- entry point

_UNWOUND_SIGNALS = ("SIGTERM", "SIGHUP", "SIGINT")


class _Stopped(BaseException):
    """SIGTERM or SIGHUP during a run: unwinds like Ctrl-C, so its output's temporary and lock files go."""


@contextmanager
def _signals_unwind() -> Iterator[None]:
    """While held (main thread only), SIGTERM and SIGHUP raise instead of killing the process at once, and end
    the run with exit code 128 + the signal once the ``with`` blocks inside have cleaned up (the output's
    temporary file and lock: ``packing.layouts._outputs``); Ctrl-C stays a ``KeyboardInterrupt``. A second signal
    during that clean-up is ignored. Handlers someone else set, or SIG_IGN (as under ``nohup``), are left alone.
    The command line's own: the library never installs a handler. O(1).
    """
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    stopping = False

    def stop(signum: int, frame: FrameType | None) -> None:
        nonlocal stopping
        if stopping:
            return
        stopping = True
        if signum == signal.SIGINT:
            raise KeyboardInterrupt
        raise _Stopped(signum)

    previous = {}
    for name in _UNWOUND_SIGNALS:
        number = getattr(signal, name, None)
        if number is None:  # pragma: no cover - no SIGHUP on some systems
            continue
        default = signal.default_int_handler if number == signal.SIGINT else signal.SIG_DFL
        if signal.getsignal(number) is default:
            previous[number] = signal.signal(number, stop)
    try:
        yield
    except _Stopped as stopped:
        raise SystemExit(128 + stopped.args[0]) from None
    finally:
        for number, handler in previous.items():
            signal.signal(number, handler)


def _fail(error: BaseException) -> int:
    """Print ``error`` as ``packing: error: ...`` (``packing.errors.one_line``, naming this command line's
    options) and return exit code 2."""
    print(f"packing: error: {one_line(error, _flag)}", file=sys.stderr)
    return 2


def _closed_pipe() -> int:
    """Point standard output at the null device (the interpreter's last flush would fail again) and return
    141, the status of a process a closed pipe stops (128 + SIGPIPE), with nothing printed."""
    try:
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
    except (OSError, ValueError, AttributeError):  # no file descriptor behind stdout (a test's capture)
        pass
    return 141


def main(argv: list[str] | None = None) -> int:
    """Run the command line with ``argv`` (default: ``sys.argv[1:]``); return the exit code.

    0 on success, 2 on bad input (one line on stderr), 130 when interrupted, 128 + the signal after SIGTERM or
    SIGHUP (the output left as it was, no temporary or lock file), 141 (quietly) when standard output is a pipe
    closed early (``packing audit f | head``).
    O(input tokens + output tokens) for ``pack``; the strategies' cost for ``compare``.

    >>> main(["compare", "missing.jsonl", "--max-seq-length", "8"])
    2
    """
    try:
        parser = build_parser()
        if not (sys.argv[1:] if argv is None else argv):  # a bare `packing`: what it can do
            print(parser.format_help(), end="")
            return 2
        args = parser.parse_args(argv)
        with _signals_unwind():
            code: int = args.run(args)
            sys.stdout.flush()  # a closed pipe shows here, not at exit
    except SystemExit as stop:  # --help
        return stop.code if isinstance(stop.code, int) else 0
    except BrokenPipeError:  # `packing audit f | head`: the reader has what it wanted
        return _closed_pipe()
    except (UsageError, PackingError, OSError) as error:
        return _fail(error)
    except MemoryError:
        return _fail(UsageError("not enough memory; try a smaller input or a smaller --max-seq-length"))
    except KeyboardInterrupt:
        print("packing: interrupted", file=sys.stderr)
        return 130
    return code
