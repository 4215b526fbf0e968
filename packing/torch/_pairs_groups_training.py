"""Preference pairs and completion groups in a training loop: their padding-free batch, the attention a shared
prompt needs, and every completion's log-probability from one packed forward. Internal: the public names are in
``packing.torch``.

A batch of units (``collate`` of pairs or groups, a ``PackedBatch`` of them, ``collate_fixed``'s blocks) has, beside
``input_ids``, ``labels`` and ``position_ids``, the per-token columns of ``packing.core._pairs_groups.UNIT_COLUMNS``:
``unit_ids``, ``document_ids``, ``completion_ids`` and ``prediction_positions``. In the duplicated layout
(``share_prompt=False``) every completion is a document of its own and ``position_ids`` restart at each: a model
keeps them apart from the positions alone (transformers' packed-sequence detection, flash-attention's
``cu_seq_lens``). With ``share_prompt=True`` the batch carries ``attention_mask``, the 4-D additive mask transformers'
models take unchanged (``(batch, 1, T, T)``: 0 where a token may attend, the dtype's minimum elsewhere), or build a
FlexAttention ``BlockMask`` with :func:`block_mask`. ``labels`` hold what a shifted loss may read (the token before
each trained token predicts it); a shared completion's first token is predicted from its prompt's last position,
which :func:`completion_logps` reads from ``prediction_positions``.

>>> import torch
>>> from packing.torch import collate
>>> batch = collate([{"prompt": [1, 2], "chosen": [3], "rejected": [4, 5]}], share_prompt=True)
>>> batch["input_ids"].tolist(), batch["position_ids"].tolist(), batch["completion_ids"].tolist()
([[1, 2, 3, 4, 5]], [[0, 1, 2, 2, 3]], [[-1, -1, 0, 1, 1]])
>>> (batch["attention_mask"][0, 0] == 0).int().tolist()
[[1, 0, 0, 0, 0], [1, 1, 0, 0, 0], [1, 1, 1, 0, 0], [1, 1, 0, 1, 0], [1, 1, 0, 1, 1]]
>>> logits = torch.zeros(1, 5, 8)
>>> [round(float(x), 4) for x in completion_logps(logits, batch)]  # ln(1/8) per trained token
[-2.0794, -4.1589]
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any

import numpy as np
import numpy.typing as npt
import torch

from packing.batches._units import fit_units
from packing.core._forms import unit_kind
from packing.core._pairs_groups import KINDS, PAIR, UNIT_COLUMNS, Units
from packing.core._samples import IGNORE_INDEX, Samples
from packing.errors import SettingError
from packing.reading._reader import read_block, read_samples
from packing.recipe import Recipe
from packing.text._prepare import prepare

Int64Array = npt.NDArray[np.int64]


def has_units(rows: Sequence[Any]) -> bool:
    """Whether ``rows`` hold a pair or a group, or are blocks of them (with ``completion_ids``). O(rows)."""
    return any(unit_kind(row) is not None or (isinstance(row, Mapping) and "completion_ids" in row) for row in rows)


def unit_columns(rows: Sequence[Any], recipe: Recipe, warn: bool = True) -> tuple[dict[str, Int64Array], bool]:
    """The flat columns ``collate`` makes of rows among which are pairs or groups (or blocks of them): every kept
    unit's tokens laid out as the recipe says, ``labels`` (a token where the token before it predicts it, -100
    elsewhere), ``position_ids`` and the unit columns (``UNIT_COLUMNS``), and whether a prompt is shared: the
    recipe's ``share_prompt``, but for packed blocks their own layout (:func:`shares_prompt`). What the overflow
    policy cut or left out is warned of (:class:`~packing.errors.TokensLost`) when ``warn``. O(T).

    >>> columns, shared = unit_columns([{"prompt": [1], "chosen": [2], "rejected": [3]}], Recipe.for_reading())
    >>> columns["labels"].tolist(), columns["document_ids"].tolist(), shared
    ([-100, 2, -100, 3], [0, 0, 1, 1], False)
    """
    if rows and all(isinstance(row, Mapping) and "seq_lengths" in row for row in rows):
        columns = _block_columns(rows)  # laid out already: their own columns say whether a prompt is shared
        shared = shares_prompt(columns["document_ids"][None], columns["completion_ids"][None])
    else:
        columns = _sample_columns(rows, recipe, warn)
        shared = recipe.share_prompt
    tokens, predictor = columns["input_ids"], columns["prediction_positions"]
    predicted = (predictor >= 0) & (predictor == np.arange(len(tokens)) - 1)
    columns["labels"] = np.where(predicted, tokens, IGNORE_INDEX).astype(np.int64)
    return columns, shared


def _sample_columns(rows: Sequence[Any], recipe: Recipe, warn: bool = True) -> dict[str, Int64Array]:
    """The flat columns of rows that are samples (some of them units), read (:func:`read_rows`) and fitted by the
    recipe's overflow policy (``fit_units``): every unit kept (``drop``: the over-long are left out) laid out,
    numbered in input order (``unit_ids``: the row's index; ``completion_ids`` and ``document_ids`` from 0 in this
    batch); what was cut or left out is warned of (:class:`~packing.errors.TokensLost`) when ``warn``. O(T)."""
    samples = read_samples(rows, **prepare(recipe).read_options)
    if samples.tokens is None:
        raise SettingError("rows", "token ids (a sampler's step of pairs or groups)", "<lengths only>")
    if samples.units is None:  # a sampler's step of plain rows among units, or its empty step: units of their own
        if samples.labels is not None:
            raise SettingError("rows", "labels equal to the tokens among pairs or groups", "<others>")
        plain = Units.plain(samples.lengths, recipe.share_prompt)
        samples = Samples(samples.tokens, samples.loss_mask, samples.offsets, None, plain)
    fitted = fit_units(samples, recipe)
    if warn:
        fitted.fit.kept_stats(recipe).warn_lost("collate")
    kept = np.flatnonzero((fitted.samples.lengths <= recipe.max_seq_length) & (fitted.samples.lengths > 0))
    samples = fitted.samples.take(kept)
    units = samples.units
    assert units is not None and samples.tokens is not None and samples.loss_mask is not None
    arrays = units.token_arrays()
    trained = (samples.loss_mask != 0) & (arrays.predictor > 0)
    at = np.arange(len(samples.tokens), dtype=np.int64)
    _, document = np.unique(arrays.document, return_inverse=True)
    return {
        "input_ids": samples.tokens.astype(np.int64),
        "position_ids": arrays.positions,
        "unit_ids": np.repeat(kept, samples.lengths),
        "document_ids": document.astype(np.int64).reshape(-1),
        "completion_ids": arrays.completion,
        "prediction_positions": np.where(trained, at - arrays.predictor, -1),
        "unit_kinds": np.repeat(units.kind.astype(np.int64), samples.lengths),
    }


def _block_columns(rows: Sequence[Any]) -> dict[str, Int64Array]:
    """The flat columns of packed blocks of units (``PackedDataset`` items, this project's files): each block's
    tokens, positions and unit columns as stored (cut to its documents), its prediction positions moved to the
    concatenated row; documents numbered from 0 (from ``document_ids``, or ``seq_lengths`` in files written
    without it); ``unit_kinds`` -1 (unknown) in files written without it. O(T)."""
    parts: dict[str, list[Int64Array]] = {name: [] for name in ("input_ids", "position_ids", *UNIT_COLUMNS)}
    at = 0
    documents = 0
    for index, row in enumerate(rows):
        plain = {key: np.asarray(value.numpy() if hasattr(value, "numpy") else value) for key, value in row.items()}
        tokens, _, lengths = read_block(plain, index)
        used = len(tokens)
        for name in ("position_ids", "unit_ids", "completion_ids", "prediction_positions"):
            if name not in plain:
                raise SettingError("rows", f"blocks of pairs or groups with '{name}'", f"<block {index} without it>")
        prediction = plain["prediction_positions"][:used].astype(np.int64)
        parts["input_ids"].append(tokens.astype(np.int64))
        for name in ("position_ids", "unit_ids", "completion_ids"):  # as stored
            parts[name].append(plain[name][:used].astype(np.int64))
        parts["prediction_positions"].append(np.where(prediction >= 0, prediction + at, -1))
        if "document_ids" in plain:
            _, document = np.unique(plain["document_ids"][:used], return_inverse=True)
            document = document.astype(np.int64).reshape(-1)
        else:
            document = np.repeat(np.arange(len(lengths), dtype=np.int64), lengths)
        parts["document_ids"].append(document + documents)
        kinds = plain.get("unit_kinds")
        parts["unit_kinds"].append(np.full(used, -1, np.int64) if kinds is None else kinds[:used].astype(np.int64))
        at += used
        documents += int(document.max(initial=-1)) + 1
    return {name: np.concatenate(values) for name, values in parts.items()}


def shared_documents(document: Any, completion: Any) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """The documents of a batch that hold more than one completion (the completions of a shared prompt): their rows,
    their ``document_ids`` and how many completions each holds, in order of row and document, from the 2-D columns
    ``document_ids`` and ``completion_ids``. O(T log T).

    >>> rows, documents, counts = shared_documents([[0, 0, 0, 1, 1]], [[-1, 0, 1, 2, 2]])
    >>> rows.tolist(), documents.tolist(), counts.tolist()
    ([0], [0], [2])
    """
    document, completion = torch.as_tensor(document), torch.as_tensor(completion)
    row = torch.arange(document.shape[0], device=document.device)[:, None].expand_as(document)
    answered = completion >= 0
    triples = torch.unique(torch.stack((row[answered], document[answered], completion[answered])), dim=1)
    places, counts = torch.unique_consecutive(triples[:2], dim=1, return_counts=True)  # sorted by row, document
    several = counts > 1
    return places[0, several], places[1, several], counts[several]


def shares_prompt(document: Any, completion: Any) -> bool:
    """Whether some document of a batch holds more than one completion (:func:`shared_documents`): the layout of
    ``share_prompt=True``, whose completions need the attention mask to be kept from each other. O(T log T).

    >>> shares_prompt([[0, 0, 0, 1, 1]], [[-1, 0, 1, 2, 2]]), shares_prompt([[0, 0, 1, 1]], [[-1, 0, -1, 1]])
    (True, False)
    """
    return bool(len(shared_documents(document, completion)[0]))


def allowed_attention(document: Any, completion: Any) -> torch.Tensor:
    """``(B, 1, T, T)`` booleans: a query may attend to a key of its document, at or before it, that is not another
    completion's (padding, document -1, attends to itself alone). O(B·T²)."""
    document = torch.as_tensor(np.asarray(document) if not isinstance(document, torch.Tensor) else document)
    completion = torch.as_tensor(np.asarray(completion) if not isinstance(completion, torch.Tensor) else completion)
    length = document.shape[-1]
    same = document[:, :, None] == document[:, None, :]
    own = (completion[:, None, :] < 0) | (completion[:, None, :] == completion[:, :, None])
    causal = torch.ones(length, length, dtype=torch.bool, device=document.device).tril()
    diagonal = torch.eye(length, dtype=torch.bool, device=document.device)
    real = (document[:, :, None] >= 0) & (document[:, None, :] >= 0)
    allowed: torch.Tensor = ((same & own & causal & real) | diagonal)[:, None]
    return allowed


def additive_mask(allowed: torch.Tensor, dtype: torch.dtype, name: str = "dtype") -> torch.Tensor:
    """An additive mask from booleans: 0 where allowed, the dtype's minimum elsewhere (``dtype``, the option
    ``name``, a floating torch dtype). O(size)."""
    if not isinstance(dtype, torch.dtype) or not dtype.is_floating_point:
        raise SettingError(name, "a floating torch dtype (an additive mask: torch.float32, torch.bfloat16, ...)", dtype)
    zero = torch.zeros((), dtype=dtype, device=allowed.device)
    return torch.where(allowed, zero, torch.finfo(dtype).min)


def batch_column(batch: Any, name: str) -> torch.Tensor:
    """Column ``name`` of a batch as a 2-D tensor: a ``collate`` dict, a ``PackedBatch``, one block (a
    ``PackedDataset`` item, a ``stream`` block, a ``datasets`` row: a row of its own), or a table of blocks of one
    length (``to_arrow()``, a Parquet file read back, a ``datasets.Dataset`` of them); numpy, torch or lists. The
    one reader of a batch's columns, so every helper sees them checked (:func:`check_column`): integers, of the
    shape of ``input_ids``, ids at least -1 and prediction positions before their own. O(T).

    >>> from packing.torch import collate
    >>> batch = collate([{"prompt": [1], "chosen": [2], "rejected": [3]}])
    >>> batch["prediction_positions"][0, 1] = 1
    >>> batch_column(batch, "prediction_positions")
    Traceback (most recent call last):
    ...
    packing.errors.SettingError: prediction_positions: expected -1 or a position before the token's own (0 <= p < t at token t), got <1 at row 0, token 1>
    """
    tensor = _read_column(batch, name)
    check_column(tensor, name, tensor.shape if name == "input_ids" else _read_column(batch, "input_ids").shape)
    return tensor


def _read_column(batch: Any, name: str) -> torch.Tensor:
    """Column ``name`` of a batch as it is stored, as a 2-D tensor (see :func:`batch_column`). O(T)."""
    if isinstance(batch, Mapping):
        value = batch.get(name)
    elif hasattr(batch, "column_names") and not hasattr(batch, name):  # a pyarrow or datasets table
        value = _table_column(batch, name)
    else:
        value = getattr(batch, name, None)
    if value is None:  # a batch of plain rows has no unit columns
        raise SettingError("batch", f"a batch of pairs or groups with '{name}' (packing.torch.collate)", f"<no {name}>")
    try:
        tensor = value if isinstance(value, torch.Tensor) else torch.as_tensor(np.asarray(value))
    except (TypeError, ValueError, RuntimeError):  # ragged lists, strings, objects
        raise SettingError(
            name, "a rectangular array of integers (rows, tokens)", f"<{type(value).__name__}>"
        ) from None
    return tensor if tensor.ndim == 2 else tensor.reshape(1, -1)


ID_COLUMNS = ("unit_ids", "document_ids", "completion_ids", "unit_kinds")
"""The unit columns of ids: each at least -1 (-1: none, such as padding or a prompt's completion)."""


def check_column(tensor: torch.Tensor, name: str, shape: tuple[int, ...] | torch.Size) -> None:
    """Refuse column ``name`` of a batch unless it holds integers of ``shape`` (that of ``input_ids``), its ids (of
    :data:`ID_COLUMNS`) are at least -1, ``unit_kinds`` name a kind, and every ``prediction_positions`` is -1 or a
    position before its token's own; the error names the first bad position. O(T).

    >>> check_column(torch.tensor([[0, 0, -2]]), "document_ids", (1, 3))
    Traceback (most recent call last):
    ...
    packing.errors.SettingError: document_ids: expected ids of at least -1 (-1: none), got <-2 at row 0, token 2>
    """
    if tensor.dtype == torch.bool or tensor.is_floating_point() or tensor.is_complex():
        raise SettingError(name, "integers", f"<a column of {str(tensor.dtype).removeprefix('torch.')}>")
    if tuple(tensor.shape) != tuple(shape):
        raise SettingError(name, f"a column of the shape of input_ids, {tuple(shape)}", tuple(tensor.shape))
    if name == "prediction_positions":
        at = torch.arange(tensor.shape[-1], device=tensor.device)
        bad = (tensor != -1) & ((tensor < 0) | (tensor >= at))
        expected = "-1 or a position before the token's own (0 <= p < t at token t)"
    elif name in ID_COLUMNS:
        bad = (tensor < -1) | (tensor >= len(KINDS)) if name == "unit_kinds" else tensor < -1
        expected = (
            f"kinds from -1 to {len(KINDS) - 1} (-1: unknown)"
            if name == "unit_kinds"
            else "ids of at least -1 (-1: none)"
        )
    else:
        return
    if bool(bad.any()):
        row, token = (int(i) for i in bad.nonzero()[0])
        raise SettingError(name, expected, f"<{int(tensor[row, token])} at row {row}, token {token}>")


def _table_column(table: Any, name: str) -> npt.NDArray[Any] | None:
    """Column ``name`` of a table of blocks (one list per row) as a 2-D array, None when it has no such column; rows
    of other lengths (blocks of real tokens only) are refused: each is a batch of its own, or ``collate`` them.
    O(cells)."""
    if name not in table.column_names:
        return None
    column = table[name]
    rows = column.to_pylist() if hasattr(column, "to_pylist") else list(column)
    if len({len(row) for row in rows}) > 1:
        expected = "a table of blocks of one length (to_arrow(); rows of real tokens only: one at a time, or collate)"
        raise SettingError("batch", expected, f"<rows of {len({len(row) for row in rows})} lengths>")
    return np.asarray(rows, dtype=np.int64).reshape(len(rows), -1)


def attention_mask(batch: Any, dtype: torch.dtype = torch.float32) -> torch.Tensor:
    """The 4-D additive attention mask of a batch of units (``(B, 1, T, T)``, 0 where a token may attend, the
    dtype's minimum elsewhere) from its ``document_ids`` and ``completion_ids``: what ``collate`` gives with a shared
    prompt, for any batch (a ``PackedBatch``'s blocks too). transformers' models take it unchanged (eager, SDPA).
    O(B·T²).

    >>> from packing import pack
    >>> mask = attention_mask(pack([{"prompt": [1], "completions": [[2], [3]]}], 4, share_prompt=True))
    >>> mask.shape, (mask[0, 0, 2] == 0).tolist()
    (torch.Size([1, 1, 4, 4]), [True, False, True, False])
    """
    allowed = allowed_attention(batch_column(batch, "document_ids"), batch_column(batch, "completion_ids"))
    return additive_mask(allowed, dtype)


def mask_mod(batch: Any) -> Callable[..., torch.Tensor]:
    """A FlexAttention ``mask_mod(b, h, q_idx, kv_idx)`` for a batch of units (see :func:`attention_mask`): its
    document and completion ids captured as tensors. O(1) to make.

    >>> import torch
    >>> from packing.torch import collate
    >>> rule = mask_mod(collate([{"prompt": [1], "completions": [[2], [3]]}], share_prompt=True))
    >>> bool(rule(torch.tensor(0), torch.tensor(0), torch.tensor(2), torch.tensor(1)))
    False
    """
    document = batch_column(batch, "document_ids")
    completion = batch_column(batch, "completion_ids")

    def rule(b: torch.Tensor, h: torch.Tensor, q_idx: torch.Tensor, kv_idx: torch.Tensor) -> torch.Tensor:
        same = document[b, q_idx] == document[b, kv_idx]
        own = (completion[b, kv_idx] < 0) | (completion[b, kv_idx] == completion[b, q_idx])
        return (same & own & (kv_idx <= q_idx)) | (q_idx == kv_idx)

    return rule


def block_mask(batch: Any, device: str | torch.device | None = None) -> Any:
    """A FlexAttention ``BlockMask`` of a batch of units (``torch.nn.attention.flex_attention.create_block_mask`` of
    :func:`mask_mod`), for models run with ``attn_implementation="flex_attention"``. Needs a torch with
    FlexAttention (2.5 or later). O(B·T²/block) to build.
    """
    try:
        from torch.nn.attention.flex_attention import create_block_mask
    except ImportError as error:  # pragma: no cover - older torch
        raise ImportError("block_mask needs torch's FlexAttention (torch >= 2.5)") from error
    document = batch_column(batch, "document_ids")
    rows, length = document.shape
    where = device if device is not None else document.device
    return create_block_mask(mask_mod(batch), rows, None, length, length, device=str(where))


def completion_logps(logits: torch.Tensor, batch: Any) -> torch.Tensor:
    """Every completion's summed log-probability of its trained tokens, from the logits of one packed forward
    (``(B, T, vocab)``, the batch's rows): one entry per completion, in input order (unit by unit, completions in
    order; ``completion_ids`` ascending). Each trained token is read at its ``prediction_positions`` (a shared
    completion's first token at its prompt's last position), so the log-probabilities are each sequence's alone.
    Differentiable; computed in the logits' dtype, at least float32. O(trained tokens × vocab).
    """
    if not isinstance(logits, torch.Tensor):
        raise SettingError("logits", "a torch tensor (rows, tokens, vocabulary)", f"<{type(logits).__name__}>")
    ids = batch_column(batch, "input_ids").to(logits.device)
    completion = batch_column(batch, "completion_ids").to(logits.device)
    prediction = batch_column(batch, "prediction_positions").to(logits.device)
    if logits.ndim != 3 or logits.shape[:2] != ids.shape:
        raise SettingError(
            "logits", f"logits of the batch's shape {tuple(ids.shape)} (rows, tokens)", tuple(logits.shape)
        )
    trained = ids[(completion >= 0) & (prediction >= 0)]
    if trained.numel() and int(trained.max()) >= logits.shape[-1]:
        expected = f"a score for every token id (the batch trains id {int(trained.max())})"
        raise SettingError("logits", expected, f"<{logits.shape[-1]} scores a position>")
    numbers = torch.unique(completion[completion >= 0])
    rows, tokens = ((completion >= 0) & (prediction >= 0)).nonzero(as_tuple=True)
    scores = logits[rows, prediction[rows, tokens]].to(torch.promote_types(logits.dtype, torch.float32))
    token = scores.log_softmax(-1).gather(-1, ids[rows, tokens].long()[:, None])[:, 0]
    slot = torch.searchsorted(numbers, completion[rows, tokens])
    return torch.zeros(len(numbers), dtype=token.dtype, device=logits.device).index_add(0, slot, token)


def preference_logps(logits: torch.Tensor, batch: Any) -> tuple[torch.Tensor, torch.Tensor]:
    """``(chosen, rejected)``: the summed log-probabilities of every pair's chosen and rejected completion
    (:func:`completion_logps`), one entry per pair, in input order. Every unit of the batch with completions must
    be a pair, as its ``unit_kinds`` say: a completion group, of two completions too, is refused by name (its
    completions are no chosen and rejected: :func:`completion_logps` reads them). O(trained tokens × vocab).

    >>> from packing.torch import collate
    >>> group = collate([{"prompt": [1], "completions": [[2], [3]]}])
    >>> preference_logps(torch.zeros(1, 4, 4), group)
    Traceback (most recent call last):
    ...
    packing.errors.SettingError: batch: expected preference pairs only (a group's completions are not chosen and rejected: read them with packing.torch.completion_logps), got <a completion group (unit 0)>
    """
    completion = batch_column(batch, "completion_ids")
    kinds = batch_column(batch, "unit_kinds").to(completion.device)
    unit = batch_column(batch, "unit_ids").to(completion.device)
    answered = completion >= 0
    other = answered & (kinds != PAIR)
    if bool(other.any()):
        kind = int(kinds[other][0])
        named = f"a completion {KINDS[kind]}" if 0 <= kind < len(KINDS) else "a unit of unknown kind (no unit_kinds)"
        expected = "preference pairs only (a group's completions are not chosen and rejected: read them with "
        raise SettingError(
            "batch", expected + "packing.torch.completion_logps)", f"<{named} (unit {int(unit[other][0])})>"
        )
    logps = completion_logps(logits, batch)
    pairs = torch.unique(torch.stack((unit[answered], completion[answered])), dim=1)
    _, per_unit = torch.unique(pairs[0], return_counts=True)
    if len(logps) % 2 or not bool((per_unit == 2).all()):  # a pair with one completion left: a block cut apart
        raise SettingError(
            "batch", "preference pairs only (two completions per unit, the chosen first)", "<a pair cut>"
        )
    return logps[0::2], logps[1::2]
