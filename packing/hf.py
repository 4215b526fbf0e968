"""Packing Hugging Face ``datasets``: shard-local with ``Dataset.map`` or global over a whole dataset.

Both functions produce the schema's columns (``packing.batches._schema.COLUMNS``: ``input_ids``,
``labels``, ``loss_mask``, ``position_ids``, ``sequence_ids``, ``seq_lengths``), one row per
block of at most ``max_seq_length`` tokens, and read rows with the one reader
(``packing.reading._reader``): every form, nulls as absent, rows of mixed forms in one batch.

A row holds its block's real tokens only, ``sum(seq_lengths)`` values, as TRL's ``pack_dataset``
writes its rows: TRL's padding-free collator (``DataCollatorForLanguageModeling(padding_free=True)``,
what ``SFTTrainer`` uses for packed data) builds ``position_ids`` from ``seq_lengths`` and needs them
to cover the row, so these datasets train in ``SFTTrainer`` unchanged. For blocks of exactly
``max_seq_length`` (static shapes), batch them with ``packing.torch.collate_fixed``.

:func:`pack_batch` packs one batch at a time, so ``Dataset.map(pack_batch, batched=True, ...)``
only ever combines rows of the same batch (shard-local packing, streaming-friendly); given Arrow batches
(``dataset.with_format("arrow").map(...)``, as TRL's ``pack_dataset`` maps) it reads and returns Arrow
tables, with no Python list in between. :func:`pack_dataset` plans over every length of the dataset at
once (global packing: fewer blocks), reads the rows as Arrow batches as they come (no Python loop per
row) and writes the blocks chunk by chunk to a cache file next to the dataset's, as ``Dataset.map`` does,
so its memory is bounded as the command line's.

Both carry the other list columns aligned with the tokens (``attention_mask``, ``token_type_ids``, ...), cut
and packed as the tokens are, as TRL's ``pack_dataset`` carries every column (``packing.batches._tables.carried_columns``).
``pack_dataset`` takes one ``datasets.Dataset``: a ``DatasetDict`` is refused with its splits named, an
``IterableDataset`` is pointed to ``packing.streaming.stream_dataset``.

Neither ``datasets`` nor ``pyarrow`` is imported with this module; :func:`pack_dataset` imports
them when called.

>>> out = pack_batch({"input_ids": [[1, 2], [3, 4, 5], [6]]}, 4)
>>> out["input_ids"]
[[3, 4, 5, 6], [1, 2]]
>>> out["seq_lengths"], out["sequence_ids"][1]
([[3, 1], [2]], [0, 0])
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from packing.batches._packed import PackedBatch, run
from packing.batches._schema import NAMES
from packing.batches._tables import (
    arrow_batch,
    carried_for,
    carried_values,
    pack_table,
    rows_of,
)
from packing.core._fingerprint import digest
from packing.core._forms import READ_FIELDS
from packing.core._samples import Samples
from packing.core._validation import INT32_MAX, OverflowPolicy, check_flag
from packing.errors import SettingError
from packing.layouts._outputs import atomic_path
from packing.reading._arrow import Accumulator, batch_parts, flat_batches, read_table
from packing.reading._reader import read_samples
from packing.recipe import Recipe, RecipeOptions
from packing.strategies._registry import StrategyName
from packing.strategies._stats import PackingStats
from packing.text._prepare import Prepared, prepare

if TYPE_CHECKING:  # pragma: no cover - typing only
    from typing import Unpack

    import pyarrow as pa
    from datasets import Dataset

PACKED_COLUMNS = NAMES
"""The columns both functions return, in order: the schema's."""


def pack_batch(
    batch: Mapping[str, Any] | pa.Table,
    max_seq_length: int | None = None,
    *,
    strategy: StrategyName | None = None,
    overflow: OverflowPolicy | None = None,
    carry: Sequence[str] | None = None,
    recipe: Recipe | None = None,
    **options: Unpack[RecipeOptions],
) -> dict[str, list[list[int]]] | pa.Table:
    """Pack one batch of rows into blocks: the schema's columns (``packing.batches._tables.pack_table``, the one
    batch function of the ``datasets`` and Ray doors), as a ``pyarrow.Table`` for an Arrow batch or a batch
    ``Dataset.map`` hands over (Python format too: its columns are Arrow underneath, read as they are), as a dict
    of lists for a dict of columns (converted to Arrow once).

    The rows may have any form the reader accepts; other list columns aligned with the tokens are carried
    (``carry``, see ``packing.batches._tables.carried_columns``), other columns left out. The options are every entry point's
    (:class:`~packing.Recipe`, or ``recipe=``); what the overflow policy cut or left out is warned of
    (:class:`~packing.errors.TokensLost`, with ``pack``'s statistics). The number of rows changes, so with
    ``datasets`` drop the old columns; with or without ``with_format("arrow")`` (as TRL's ``pack_dataset`` maps),
    the batches go through without a Python list::

        dataset.map(pack_batch, batched=True, batch_size=1000,
                    remove_columns=dataset.column_names, fn_kwargs={"max_seq_length": 2048})

    Blocks only combine rows of the same batch, and ``sequence_ids`` count rows within the
    batch. Uses ``packing.pack``: O(tokens + blocks × max_seq_length) plus the strategy's cost.

    >>> out = pack_batch({"prompt": [[1, 2]], "completion": [[3, 4]]}, 6)
    >>> out["loss_mask"], out["labels"], out["position_ids"]
    ([[0, 0, 1, 1]], [[-100, -100, 3, 4]], [[0, 1, 2, 3]])
    >>> pack_batch({"input_ids": []}, 4)["input_ids"]
    []
    >>> pack_batch({"input_ids": [[1, 2], [3]], "attention_mask": [[1, 1], [0]]}, 4)["attention_mask"]
    [[1, 1, 0]]
    >>> import pyarrow as pa
    >>> pack_batch(pa.table({"input_ids": [[1, 2], [3, 4, 5], [6]]}), 4).column("seq_lengths").to_pylist()
    [[3, 1], [2]]
    """
    chosen = Recipe.at("hf.pack_batch", recipe, max_seq_length, strategy=strategy, overflow=overflow, **options)
    prepared = prepare(chosen)
    packed = pack_table(*_samples(batch, prepared, "batch"), chosen, "hf.pack_batch", carry, prepared)
    if isinstance(batch, Mapping) and not hasattr(batch, "pa_table"):  # Python columns given, Python columns back
        columns: dict[str, list[list[int]]] = packed.to_pydict()
        return columns
    return packed


_BATCH_ROWS = 1 << 14
"""Rows of a ``datasets.Dataset`` read at a time by :func:`pack_dataset` (one Arrow batch)."""
_CHUNK_SLOTS = 1 << 20
"""Token slots of the blocks :func:`pack_dataset` makes and writes at a time (about 20 MB of columns, and their
temporaries: a smaller peak than ``packing.batches._packed.CHUNK_TOKENS``'s, as fast)."""


def pack_dataset(
    dataset: Any,
    max_seq_length: int | None = None,
    *,
    strategy: StrategyName | None = None,
    overflow: OverflowPolicy | None = None,
    shuffle: bool = True,
    carry: Sequence[str] | None = None,
    cache_file_name: str | os.PathLike[str] | None = None,
    recipe: Recipe | None = None,
    **options: Unpack[RecipeOptions],
) -> Dataset:
    """Pack a whole dataset at once (global packing) into a new ``datasets.Dataset`` of the schema's columns.

    ``dataset`` is a ``datasets.Dataset`` (any selection or shuffle already applied to it is
    respected), a ``pyarrow.Table`` or a dict of columns, with rows in any form the reader
    accepts (text rows too, with a ``tokenizer``). The options are every entry point's
    (:class:`~packing.Recipe`, or ``recipe=``); what the overflow policy cut or left out (tokens, samples, pairs
    and groups) is warned of: :class:`~packing.errors.TokensLost`, with the statistics ``pack`` gives. A
    ``datasets.Dataset`` is read as Arrow batches as they come
    (no Python loop per row, one batch held at a time besides the samples), one plan is made over every length,
    and the blocks are made chunk by chunk; with ``shuffle`` (the default) they come out in the order
    ``plan.shuffle(seed)`` gives (seed default 0), otherwise in plan order (which for the decreasing strategies
    puts the longest documents first). Other list columns aligned with the tokens are carried, cut and packed as
    the tokens (``carry``: which; default every aligned one; see ``packing.batches._tables.carried_columns``), as TRL's
    ``pack_dataset`` carries them; TRL refuses a dataset with a column of other lengths or not of lists, where
    packing leaves it out (or refuses it, naming the row, when ``carry`` names it). The reader's columns
    (``completion_mask``, ``labels``, ...) become ``loss_mask`` and ``labels`` rather than being carried as they
    are. A carried ``attention_mask`` must not reach the model (all ones over several documents, it lets them
    attend to each other; ``packing.audit`` reports it): TRL's padding-free collator and
    ``packing.torch.collate`` drop it. A ``DatasetDict`` is refused with its splits named (pass one split); an
    ``IterableDataset`` is refused with a pointer to ``packing.streaming.stream_dataset``, which packs a stream.

    Where the blocks go, as ``Dataset.map`` decides: a dataset with cache files (loaded from disk, or the result
    of a ``map``) gets its blocks written chunk by chunk to ``packing-FINGERPRINT.arrow`` next to them,
    atomically, and read back memory-mapped; a packing of the same rows with the same settings finds that file
    and reads it instead of packing again. ``cache_file_name`` names the file instead (written every time). An
    in-memory dataset, a table or a dict of columns (without ``cache_file_name``) gets an in-memory dataset.

    O(tokens + blocks × max_seq_length) time plus the strategy's cost. Memory at the peak, with a cache file:
    the input's tokens (4 bytes each for ids that fit in int32) and one chunk of blocks (about 20 MB), within
    the input's Arrow size + 1 GiB as ``packing pack``; in memory, the output too (17 bytes a token slot in the
    compact schema).

    Example (``datasets`` needed, so not a doctest)::

        packed = pack_dataset(Dataset.from_dict({"input_ids": [[1, 2], [3, 4, 5], [6]]}), 4, shuffle=False)
        packed["input_ids"]  # [[3, 4, 5, 6], [1, 2]]: real tokens only, as TRL's rows
        packed["seq_lengths"]  # [[3, 1], [2]]
        masked = Dataset.from_dict({"input_ids": [[1, 2], [3]], "attention_mask": [[1, 0], [1]]})
        pack_dataset(masked, 4, shuffle=False)["attention_mask"]  # [[1, 0, 1]]: carried, as TRL does
    """
    _refuse_other_datasets(dataset)
    chosen = Recipe.at("hf.pack_dataset", recipe, max_seq_length, strategy=strategy, overflow=overflow, **options)
    check_flag(shuffle, "shuffle")
    from datasets import Dataset

    prepared = prepare(chosen)
    fingerprint = _fingerprint(dataset, (prepared.fingerprint, shuffle, chosen.seed, carry))
    path = _cache_path(dataset, fingerprint, cache_file_name)
    if cache_file_name is None and path is not None and path.is_file():  # packed before: same rows, same settings
        cached = _cached_stats(path, chosen)
        if cached is not None:  # what that packing cut is as real now: warned of again, with its counts
            cached.warn_lost("hf.pack_dataset")
            return Dataset.from_file(os.fspath(path))
    samples, source = _samples(dataset, prepared)
    # shuffled in the plan, so the blocks are written in their final order and never copied
    lazy = run(samples, chosen, prepared, shuffle=shuffle)
    stats = lazy.stats
    stats.warn_lost("hf.pack_dataset")
    # pairs and groups: their laid-out tokens carry no other column
    carried = carried_values(lazy.plan, None if samples.units is not None else source, carry)
    tables = _block_tables(lazy, carried, whole=path is None)
    if path is None:
        import pyarrow as pa

        return Dataset(pa.concat_tables(list(tables)), fingerprint=fingerprint)
    _write_stream(path, tables, {_STATS_KEY: _stats_json(stats)})
    return Dataset.from_file(os.fspath(path))


def _samples(dataset: Any, prepared: Prepared, name: str = "dataset") -> tuple[Samples, Any]:
    """The rows of ``dataset`` (the argument ``name``) through the one reader with the recipe's ``prepared``
    options (text tokenized by the recipe's ``num_proc`` processes), and where carried columns are read from."""
    reading = prepared.read_options
    if hasattr(dataset, "with_format") and hasattr(dataset, "column_names"):  # a datasets.Dataset
        return _read_batches(dataset, reading), dataset
    table = arrow_batch(dataset, name)  # None: Python columns pyarrow cannot type alike, read row by row
    return (
        (read_samples(rows_of(dataset), **reading), dataset) if table is None else (read_table(table, **reading), table)
    )


def _read_batches(dataset: Any, reading: dict[str, Any]) -> Samples:
    """A ``datasets.Dataset``'s samples, read Arrow batch by Arrow batch (its selection or shuffle applied) into
    one set of arrays (``Accumulator``); ids that fit narrowed to int32. A table whose batches the reader cannot
    read alone (``flat_batches``: a length column, a type only the row reader judges) is read whole. O(tokens)."""
    names = [name for name in dataset.column_names if name in READ_FIELDS]  # image grids too: refused
    arrow = (dataset.select_columns(names) if names else dataset).with_format("arrow")
    if not len(arrow) or not flat_batches(arrow.features.arrow_schema, reading.get("tokenizer") is not None):
        return read_table(arrow[:], **reading)
    accumulator = Accumulator()
    for part in batch_parts(arrow.iter(batch_size=_BATCH_ROWS), len(arrow), None, **reading):
        accumulator.add(part, narrow=True)
    return accumulator.samples()


def _cache_path(dataset: Any, fingerprint: str, cache_file_name: str | os.PathLike[str] | None) -> Path | None:
    """Where :func:`pack_dataset` writes its blocks: ``cache_file_name``, else next to the dataset's cache files
    (as ``Dataset.map`` writes), else nowhere (in memory)."""
    if cache_file_name is not None:
        return Path(cache_file_name)
    files = getattr(dataset, "cache_files", None)
    if not files or not isinstance(files, list) or "filename" not in files[0]:
        return None
    return Path(files[0]["filename"]).parent / f"packing-{fingerprint}.arrow"


def _block_tables(lazy: PackedBatch, carried: dict[str, pa.Array], whole: bool) -> Iterator[pa.Table]:
    """The blocks chunk by chunk as Arrow tables of the schema's columns and the carried ones (at least one table:
    the columns without rows when there is no block). ``whole``: the tables are joined into one, so a carried
    column takes 64-bit offsets when it needs them over all of them. O(slots)."""
    large = whole and int(lazy.plan.piece_length.sum()) > INT32_MAX
    for chunk in lazy.chunks(tokens=_CHUNK_SLOTS) if lazy.num_blocks else [lazy]:
        table = chunk.to_arrow(padding=False)
        for name, column in carried_for(chunk.plan, carried, large).items():
            table = table.append_column(name, column)
        yield table


def _write_stream(path: Path, tables: Iterator[pa.Table], metadata: dict[bytes, bytes] | None = None) -> None:
    """``tables`` written one after the other as an Arrow IPC stream (the cache files of ``datasets``), atomically:
    a temporary file renamed onto ``path`` once complete; ``metadata`` added to the schema's. Memory: one table at
    a time."""
    import pyarrow as pa

    first = next(tables)
    schema = first.schema.with_metadata({**(first.schema.metadata or {}), **(metadata or {})})
    with (
        atomic_path(path) as temporary,
        pa.OSFile(os.fspath(temporary), "wb") as sink,
        pa.ipc.new_stream(sink, schema) as writer,
    ):
        writer.write_table(first)
        del first
        for table in tables:
            writer.write_table(table)


_STATS_KEY = b"packing.stats"
"""The schema metadata key of a cache file's statistics (:func:`_stats_json`)."""


def _stats_json(stats: PackingStats) -> bytes:
    """``stats``' counts (``PackingStats.state``) as JSON, for a cache file's schema: what the packing cut, warned of
    again when the file is found. O(1)."""
    return json.dumps(stats.state(), sort_keys=True).encode("utf-8")


def _cached_stats(path: Path, recipe: Recipe) -> PackingStats | None:
    """The statistics of the packing with ``recipe`` a cache file holds, read from its schema alone; None when the
    file has none (written without them: packed again). O(1) reads."""
    import pyarrow as pa

    try:
        with pa.OSFile(os.fspath(path), "rb") as source:
            metadata = pa.ipc.open_stream(source).schema.metadata or {}
        state = json.loads(metadata[_STATS_KEY]) if _STATS_KEY in metadata else None
        return None if state is None else PackingStats.of_state(state, recipe.max_seq_length, recipe.share_prompt)
    except (pa.ArrowException, OSError, ValueError, TypeError, KeyError):
        return None


def _refuse_other_datasets(dataset: Any) -> None:
    """A ``DatasetDict`` (its splits named) and an ``IterableDataset`` (pointed to ``stream_dataset``) refused
    before anything is read. O(splits)."""
    kind = type(dataset).__name__ if type(dataset).__module__.startswith("datasets") else None
    streams = "packed as it streams by packing.streaming.stream_dataset"
    if kind in ("DatasetDict", "IterableDatasetDict"):
        splits = ", ".join(repr(str(split)) for split in dataset)
        first = repr(str(next(iter(dataset), "train")))
        how = "pack each split on its own" if kind == "DatasetDict" else streams
        raise SettingError("dataset", f"one split, e.g. dataset[{first}] ({how})", f"<a {kind} with splits {splits}>")
    if kind == "IterableDataset":
        raise SettingError("dataset", f"a datasets.Dataset (an IterableDataset is {streams})", "<an IterableDataset>")


def _fingerprint(source: Any, settings: tuple[Any, ...]) -> str:
    """A fingerprint for the packed dataset, derived from the source's and the settings when the source
    has one (so ``datasets`` caching works across runs); random otherwise. Without it, ``datasets``
    would hash the whole packed table, which takes seconds for millions of tokens."""
    parent = getattr(source, "_fingerprint", None)
    if not isinstance(parent, str):
        from datasets.fingerprint import generate_random_fingerprint

        return str(generate_random_fingerprint())
    return digest(repr(("packing.hf.pack_dataset", parent, settings)), 16)
