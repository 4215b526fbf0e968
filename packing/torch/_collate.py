"""Padding-free collates (``collate``, the batch of ``transformers.DataCollatorWithFlattening``), fixed-shape
blocks (``collate_fixed``), the step loader that carries each step's loss totals, and ``weighted_loss``.
Internal: the public names are in ``packing.torch``.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Mapping, Sequence
from typing import TYPE_CHECKING, Any, Literal, overload

import numpy as np
import numpy.typing as npt
import torch
from torch.utils.data import Dataset

from packing.batches._packed import run
from packing.batches._schema import LOSS_WEIGHTS
from packing.batches._units import check_unit_recipe
from packing.core._arrays import offsets_of, ranges, row_of
from packing.core._forms import MASK_FIELDS
from packing.core._pairs_groups import UNIT_COLUMNS
from packing.core._samples import IGNORE_INDEX
from packing.core._thd import padded_lengths
from packing.core._validation import INT64_MAX, INT64_MIN, MAX_SEQ_LENGTH, OverflowPolicy, check_integer
from packing.errors import SettingError, refuse_with_units
from packing.reading._columns import as_numpy, id_array, length_array, weight_array
from packing.reading._reader import read_block, read_samples
from packing.recipe import Recipe, RecipeOptions
from packing.strategies._overflow import Documents, documents_of
from packing.strategies._stats import PackingStats, compute_stats
from packing.text._prepare import prepare
from packing.weighting import LossMode, LossTotals, check_mode, token_weights

if TYPE_CHECKING:  # pragma: no cover - typing only
    from typing import Unpack
from packing.torch._context_parallel import shifted, thd_boundaries, thd_pad
from packing.torch._pairs_groups_training import (
    additive_mask,
    allowed_attention,
    attention_mask,
    has_units,
    shares_prompt,
    unit_columns,
)
from packing.torch._schedule import Int64Array
from packing.torch._vision import check_vision_recipe, kept_lengths, untrained_placeholders, vision_columns, vision_rows
from packing.vision import VISION_FIELDS

# ---------------------------------------------------------------- collate


def _is_block(row: Any) -> bool:
    return isinstance(row, Mapping) and "seq_lengths" in row


def _plain(row: Mapping[str, Any]) -> dict[str, Any]:
    """A row's tensors as numpy arrays, for the reader. O(keys)."""
    return {key: as_numpy(value) for key, value in row.items()}


def _documents(
    rows: Sequence[Any], recipe: Recipe, ignore_masks: bool = False
) -> tuple[Int64Array, Int64Array, Int64Array]:
    """Tokens, labels (-100 on masked tokens; a packed block's on its documents' first tokens too) and lengths (one
    a row, empty rows included, so that errors name the row) of the documents of ``rows``, concatenated. Packed
    blocks (rows with ``seq_lengths``) give their documents.
    Rows are read by the reader: a row's ``labels`` are kept (``Samples.labels``), as transformers' collators
    keep them; with ``ignore_masks`` a row's loss masks are left out (its labels still say what is trained).
    O(tokens)."""
    if rows and all(_is_block(row) for row in rows):
        blocks = [read_block(_plain(row), index) for index, row in enumerate(rows)]
        joined = (np.concatenate([block[k] for block in blocks]).astype(np.int64, copy=False) for k in range(3))
        return tuple(joined)  # type: ignore[return-value]
    if any(_is_block(row) for row in rows):
        raise SettingError("rows", "packed blocks (with 'seq_lengths') only, or samples only", "<both>")
    left_out = {*(MASK_FIELDS if ignore_masks else ()), *(VISION_FIELDS if recipe.vision is not None else ())}
    if left_out:  # masks ignored; images read by the vision columns, not the reader
        rows = [
            {key: value for key, value in row.items() if key not in left_out} if isinstance(row, Mapping) else row
            for row in rows
        ]
    samples = read_samples(rows, **prepare(recipe).read_options)  # tensors too: the reader takes them
    if samples.tokens is None or samples.loss_mask is None:
        raise SettingError("rows", "samples with token ids", "<lengths only>")
    lengths = samples.lengths
    tokens = samples.tokens.astype(np.int64, copy=False)  # what torch takes
    targets = tokens if samples.labels is None else samples.labels.astype(np.int64, copy=False)
    return tokens, np.where(samples.loss_mask.astype(bool), targets, IGNORE_INDEX), lengths


def _cap(
    tokens: Int64Array, labels: Int64Array, lengths: Int64Array, recipe: Recipe, kept_within: Int64Array | None = None
) -> tuple[Int64Array, Int64Array, Int64Array, PackingStats | None]:
    """The documents with the overflow policy applied to each (``truncate`` keeps the first ``max_seq_length``
    tokens, ``drop`` leaves it out, ``split`` refuses it: its pieces come from the sampler), refused when they
    hold more than ``max_seq_length`` tokens in all, and what the policy cut or left out (``pack``'s counts, each
    document kept a block of its own, its loss-mask counts from ``labels``, which still train a document's first
    token where its mask does; None when nothing was over-long). ``kept_within``: each sample's tokens ``truncate``
    may keep at most (rows with images: no image cut). O(tokens)."""
    capacity, overflow = recipe.max_seq_length, recipe.overflow
    over = lengths > capacity
    lost = None
    if over.any():
        if overflow == "split":
            raise SettingError(
                "rows",
                f"samples of at most {capacity} tokens with overflow='split' (read the dataset through "
                "sampler.pieces(dataset))",
                f"<sample {int(over.argmax())} of {int(lengths[over][0])} tokens>",
            )
        kept = documents_of(lengths, capacity, overflow)  # one document a sample: truncate and drop keep the start
        if kept_within is not None:
            length = np.minimum(kept.length, kept_within[kept.sequence])
            kept = Documents(kept.sequence[length > 0], kept.offset[length > 0], length[length > 0])
        within = ranges(offsets_of(lengths)[kept.sequence] + kept.offset, kept.length)
        alone = np.arange(len(kept.length) + 1, dtype=np.int64)
        lost = compute_stats(lengths, capacity, alone, kept.sequence.astype(np.int32), kept.length.astype(np.int32))
        tokens, labels, lengths = tokens[within], labels[within], kept.length
        trained = labels != IGNORE_INDEX
        targets = trained.copy()
        targets[offsets_of(lengths)[:-1][lengths > 0]] = False  # a document's first token: nothing predicts it
        per_document = np.bincount(row_of(lengths), weights=targets, minlength=len(lengths))
        untrained = int(((lengths > 0) & (per_document == 0)).sum())
        lost = lost.with_trainable(int(trained.sum()), int(targets.sum()), untrained)
    _check_total(lengths, recipe)
    return tokens, labels, lengths, lost


def _check_total(lengths: Int64Array, recipe: Recipe) -> None:
    """Refuse documents that take more than ``max_seq_length`` tokens in all, each padded to the recipe's
    ``document_multiple`` (context parallelism). O(documents)."""
    total = int(padded_lengths(lengths, recipe.document_multiple).sum())
    if total > recipe.max_seq_length:
        padded = " with every document padded for context parallelism" if recipe.document_multiple > 1 else ""
        raise SettingError(
            "rows",
            f"at most max_seq_length={recipe.max_seq_length} tokens in all{padded} (a PackingSampler's block)",
            total,
        )


TensorKind = Literal["pt", "np"]
"""What ``collate`` returns its arrays as: torch tensors (``pt``) or numpy arrays (``np``), as transformers' collators."""


def collate(
    rows: Sequence[Any],
    max_seq_length: int | None = None,
    *,
    overflow: OverflowPolicy | None = None,
    return_position_ids: bool = True,
    return_flash_attn_kwargs: bool = False,
    return_seq_idx: bool = False,
    separator_id: int = IGNORE_INDEX,
    position_ids_start: int = 0,
    pad_to_multiple_of: int | None = None,
    return_tensors: TensorKind = "pt",
    ignore_masks: bool = False,
    recipe: Recipe | None = None,
    loss_weights: LossMode | None = None,
    totals: LossTotals | float | None = None,
    mask_dtype: torch.dtype = torch.float32,
    _units: bool = False,
    _quiet: bool = False,
    **options: Unpack[RecipeOptions],
) -> dict[str, Any]:
    """The padding-free batch of ``rows``: every document's tokens in one row, as
    ``transformers.DataCollatorWithFlattening`` returns it for the same documents with the same options
    and defaults (a drop-in ``collate_fn``), key for key. So ``DataLoader(PackedDataset(path), batch_size=4,
    collate_fn=collate)`` gives one row ``(1, T)`` per step, the four blocks' documents end to end without their
    padding (what padding-free attention takes: the boundaries are in ``position_ids``); ``collate_fixed`` passed
    the same way stacks them ``(4, max_seq_length)`` instead.

    Rows are samples in any form ``packing.pack`` accepts (token lists, ``{"prompt", "completion"}``,
    ``{"input_ids", "loss_mask"}``, or ``{"input_ids", "labels"}`` whose labels are kept (-100 masks its token); text rows with a
    ``tokenizer``), or packed blocks (rows with ``seq_lengths``, such as ``PackedDataset`` items, read by the
    reader as any row is: :func:`packing.reading._reader.read_block`); tensors are accepted. Empty documents are
    skipped. The options are the reading ones, ``overflow`` and ``pad_token_id`` (:class:`~packing.Recipe`, or a
    whole ``recipe=``; ``PackingSampler.collate`` is this with the sampler's recipe): collate lays out nothing, so a
    layout option given here (``strategy``, ``window``, ...) is refused by name.
    With ``max_seq_length`` (or a recipe), each sample gets the overflow policy (``truncate``, ``drop``;
    ``split`` refuses an over-long sample, whose pieces the sampler gives) and more than ``max_seq_length``
    tokens in all are refused, packed blocks' too: a batch never holds more tokens; and rows with no token at all
    (a ``PackingSampler``'s empty step: no rows, or empty ones) give padding alone, which trains nothing (one
    token, or ``pad_to_multiple_of``, or a padded document with context parallelism: label -100, loss weight 0);
    without, they are refused, as transformers' collator refuses them. Returns ``input_ids`` and ``labels`` (-100 on
    masked tokens, ``separator_id`` on each document's first token) as int64 arrays of shape ``(1, T)``, and:

    - ``return_position_ids`` (default ``True``): ``position_ids`` (int64, ``(1, T)``) restarting at
      ``position_ids_start`` (default 0) per document;
    - ``return_flash_attn_kwargs`` (default ``False``): ``cu_seq_lens_q`` = ``cu_seq_lens_k`` (int32, ``[0,
      ...cumulative lengths]``) and ``max_length_q`` = ``max_length_k`` (ints);
    - ``return_seq_idx`` (default ``False``): ``seq_idx`` (int32, ``(1, T)``), the document number of every token
      (0, 1, ...), which linear-attention layers need;
    - ``separator_id`` (default -100): the label of every document's first token (transformers' option);
    - ``return_tensors``: ``"pt"`` (default, torch tensors) or ``"np"`` (numpy arrays), as transformers;
    - ``pad_to_multiple_of``: ``T`` rounded up to a multiple of it with padding after the documents, as TRL's
      padding-free collator pads (transformers' ``DataCollatorWithFlattening`` has no such option): the
      recipe's pad id, label -100, loss weight 0, and every padding token a sequence of its own (position
      ``position_ids_start``, its own ``seq_idx`` and ``cu_seq_lens`` entry), so no document attends to it.

    With ``context_parallel_size`` (a recipe option; and ``tensor_parallel_size``), the THD layout of context
    parallelism: every document is followed by padding up to a multiple of the recipe's ``document_multiple``
    (``2·cp·tp``; pad id, label -100, loss weight 0, positions running on to the padded end), counted against
    ``max_seq_length``; the batch also has ``cu_seq_lens_q`` = ``cu_seq_lens_k`` (int32, the real documents),
    ``cu_seqlens_padded`` (int32, where each padded document sits), ``max_length_q`` = ``max_length_k`` (the
    longest padded document) and ``shift_labels`` (the targets shifted within each document, for a loss over
    a shard; with ``loss_weights``, ``shift_loss_weights`` too); ``packing.torch.context_parallel_shard`` cuts it
    for one rank. ``pad_to_multiple_of`` is refused then.

    One difference, on purpose: a mask in a row with ``input_ids`` (``completion_mask``, ``assistant_masks``,
    ``loss_mask``) is applied to the labels, where transformers' collator ignores it and trains every token but
    each document's first. ``ignore_masks=True`` gives transformers' exact labels (masks unused; labels given in
    a row are still kept, as transformers keeps them). Pass no ``attention_mask`` to the model. O(T).

    With ``loss_weights`` (``token``, ``sequence``, ``sequence_sum``, ``sqrt``; see ``packing.weighting``), also
    ``loss_weights``: float32 ``(1, T)``, aligned with ``labels``, such that ``weighted_loss`` is that objective.
    A document is a row (a sample), or for packed blocks a source sample (``sequence_ids``). ``totals`` is the
    optimizer step's normaliser (a ``LossTotals`` or a number); default: the ``totals`` of ``rows`` when they come
    from ``PackingSampler.loader`` (a ``StepIndices``), else this batch's own. Packed blocks that carry a
    ``loss_weights`` column keep it when no mode is asked.

    >>> collate([[5, 6], {"input_ids": [7, 8, 9], "loss_mask": [0, 1, 1]}])["labels"].tolist()
    [[-100, 6, -100, 8, 9]]
    >>> sorted(collate([[5, 6], [7]], return_seq_idx=True, return_flash_attn_kwargs=True))
    ['cu_seq_lens_k', 'cu_seq_lens_q', 'input_ids', 'labels', 'max_length_k', 'max_length_q', 'position_ids', 'seq_idx']
    >>> collate([[5, 6], [7, 8, 9]], loss_weights="sequence")["loss_weights"].tolist()
    [[0.0, 0.5, 0.0, 0.25, 0.25]]
    >>> collate([[5, 6, 7, 8, 9]], 3)["input_ids"].tolist()
    [[5, 6, 7]]
    >>> batch = collate([[5, 6], [7, 8, 9]], separator_id=-1, pad_to_multiple_of=4, return_tensors="np")
    >>> batch["labels"].tolist(), batch["position_ids"].tolist(), type(batch["input_ids"]).__name__
    ([[-1, 6, -1, 8, 9, -100, -100, -100]], [[0, 1, 0, 1, 2, 0, 0, 0]], 'ndarray')

    Preference pairs and completion groups (``{"prompt", "chosen", "rejected"}``, ``{"prompt", "completions"}``,
    or blocks of them) are kept whole and laid out as ``share_prompt`` says; the batch also has ``unit_ids``,
    ``document_ids``, ``completion_ids`` and ``prediction_positions`` (``packing.core._pairs_groups.UNIT_COLUMNS``), and
    with ``share_prompt=True`` (for packed blocks, when their own columns say so: a document holding several
    completions, as ``collate_fixed`` decides) ``attention_mask``: ``(1, 1, T, T)``, 0 where a token may attend and the minimum of
    ``mask_dtype`` (default float32) elsewhere, which transformers' models take as it is.
    ``packing.torch.completion_logps`` and ``preference_logps`` read the completions' log-probabilities from the
    logits (``packing.torch._pairs_groups_training``). ``loss_weights`` and context parallelism are refused with units. A batch whose
    every unit the overflow policy left out is padding alone, as above, with the unit columns -1; a
    ``PackingSampler`` of units collates every step so (``_units``: its empty step, a step of plain rows).

    What the overflow policy cut or left out is warned of (:class:`~packing.errors.TokensLost`, with ``pack``'s
    counts), but by a ``PackingSampler``'s collate (``_quiet``: its ``stats`` count it).

    >>> pair = {"prompt": [1, 2], "chosen": [3], "rejected": [4, 5]}
    >>> collate([pair])["position_ids"].tolist(), collate([pair], share_prompt=True)["position_ids"].tolist()
    ([[0, 1, 2, 0, 1, 2, 3]], [[0, 1, 2, 2, 3]])
    """
    tensors = _check_collate_options(separator_id, position_ids_start, pad_to_multiple_of, return_tensors)
    chosen = Recipe.at("collate", recipe, max_seq_length, overflow=overflow, **options)
    vision = None if chosen.vision is None else check_vision_recipe(chosen, _units or has_units(rows))
    capped = recipe is not None or max_seq_length is not None
    multiple = chosen.document_multiple
    units: dict[str, Int64Array] | None = None
    weights, positions, shared = None, None, False
    if _units or has_units(rows):  # ``_units``: a sampler of units (its steps of plain rows, its empty step too)
        if loss_weights is not None:
            raise refuse_with_units("loss_weights", loss_weights, "their loss is built from completion_logps")
        check_unit_recipe(chosen)
        units, shared = unit_columns(rows, chosen, warn=not (_units or _quiet))  # a sampler's stats count the cut
        if shared and (return_flash_attn_kwargs or return_seq_idx):
            name = "return_flash_attn_kwargs" if return_flash_attn_kwargs else "return_seq_idx"
            raise SettingError(
                name, "False with share_prompt (a shared prompt's completions need the attention mask)", True
            )
        tokens, labels, positions = units.pop("input_ids"), units.pop("labels"), units.pop("position_ids")
        starts = np.flatnonzero(np.diff(units["document_ids"], prepend=-1) != 0)
        lengths = np.diff(np.append(starts, len(tokens)))
        if capped:
            _check_total(lengths, chosen)
        elif not len(tokens):
            raise SettingError("rows", "at least one token", "<only empty rows>")
    else:
        if multiple > 1 and pad_to_multiple_of is not None:
            raise SettingError(
                "pad_to_multiple_of",
                f"None with context parallelism (every document is padded to a multiple of {multiple})",
                pad_to_multiple_of,
            )
        tokens, labels, lengths = _documents(rows, chosen, ignore_masks)
        if vision is not None:  # rows with images: placeholders untrained, an image never cut
            if rows and all(_is_block(row) for row in rows):
                raise SettingError("vision", "None with packed blocks (rows of samples with images)", chosen.vision)
            images = vision_rows(rows, tokens, lengths)
            labels = untrained_placeholders(tokens, labels, vision)
            kept = kept_lengths(images, lengths, chosen) if capped else lengths
        if capped and not (rows and all(_is_block(row) for row in rows)):
            tokens, labels, lengths, lost = _cap(tokens, labels, lengths, chosen, None if vision is None else kept)
            if lost is not None and not _quiet:  # a sampler's steps: its stats count what was cut
                lost.warn_lost("collate")
        elif capped:  # blocks are packed already: never more than max_seq_length tokens in all, as for samples
            _check_total(lengths, chosen)
        labels[offsets_of(lengths)[:-1][lengths > 0]] = IGNORE_INDEX  # every document's first token: no target
        lengths = lengths[lengths > 0]
        if len(lengths) == 0 and not capped:  # a sampler's empty step comes through its collate: with its recipe
            raise SettingError(
                "rows", "at least one token (a PackingSampler's empty step: sampler.collate)", "<no token>"
            )
        weights = _collated_weights(rows, labels, lengths, loss_weights, totals)
    if separator_id != IGNORE_INDEX:  # every document's first label (always IGNORE_INDEX until here)
        labels = labels.copy()
        labels[offsets_of(lengths)[:-1]] = separator_id
    # an empty step (a block with no token, capped) is padding alone: one token, or pad_to_multiple_of
    padding = -len(tokens) % (pad_to_multiple_of or 1) if len(tokens) else (pad_to_multiple_of or 1)
    if padding:  # TRL's padding-free padding: pad id, label -100, and each padding token a sequence of its own
        tokens = np.concatenate([tokens, np.full(padding, prepare(chosen).pad_id, dtype=np.int64)])
        labels = np.concatenate([labels, np.full(padding, IGNORE_INDEX, dtype=np.int64)])
        lengths = np.concatenate([lengths, np.ones(padding, dtype=np.int64)])
        if weights is not None:
            weights = np.concatenate([weights, np.zeros(padding, dtype=np.float32)])
        if units is not None:  # no unit, no completion; every padding token a document of its own
            units = _padded_units(units, padding)
    real = lengths
    if multiple > 1:  # the THD layout: every document padded to a multiple of 2·cp (× tp)
        tokens, labels, weights, lengths = thd_pad(tokens, labels, weights, lengths, multiple, prepare(chosen).pad_id)
    cu = offsets_of(lengths, np.int32)
    batch: dict[str, Any] = {"input_ids": tensors(tokens.astype(np.int64)[None]), "labels": tensors(labels[None])}
    if return_position_ids:
        if positions is None:  # restarting at every document
            positions = np.arange(len(tokens), dtype=np.int64) - np.repeat(cu[:-1].astype(np.int64), lengths)
        else:  # a unit's own (a shared prompt's completions continue from its end)
            positions = np.concatenate([positions, np.zeros(len(tokens) - len(positions), dtype=np.int64)])
        batch["position_ids"] = tensors(positions[None] + position_ids_start)
    for name, values in (units or {}).items():
        batch[name] = tensors(values[None])
    if return_seq_idx:
        batch["seq_idx"] = tensors(row_of(lengths, np.int32)[None])
    if return_flash_attn_kwargs:
        longest = int(lengths.max())
        batch.update(cu_seq_lens_q=tensors(cu), cu_seq_lens_k=tensors(cu.copy()), max_length_q=longest)
        batch["max_length_k"] = longest
    if weights is not None:
        batch[LOSS_WEIGHTS.name] = tensors(weights[None])
    if vision is not None:
        batch.update(vision_columns(images, kept, padding, chosen, tensors))
    if multiple > 1:
        batch.update(thd_boundaries(real, lengths, tensors))
        batch["shift_labels"] = tensors(shifted(labels, lengths, IGNORE_INDEX)[None])
        if weights is not None:
            batch["shift_loss_weights"] = tensors(shifted(weights, lengths, 0.0)[None])
    if units is not None and shared:
        allowed = allowed_attention(units["document_ids"][None], units["completion_ids"][None])
        mask = additive_mask(allowed, mask_dtype, "mask_dtype")
        batch["attention_mask"] = mask if tensors is torch.from_numpy else mask.numpy()
    return batch


def _padded_units(units: dict[str, Int64Array], padding: int) -> dict[str, Int64Array]:
    """The unit columns of a batch followed by ``padding`` tokens of padding: -1 in each, but ``document_ids``,
    which numbers every padding token a document of its own. O(T)."""
    more = int(units["document_ids"].max(initial=-1)) + 1
    pad = {name: np.full(padding, -1, dtype=np.int64) for name in units}
    pad["document_ids"] = np.arange(more, more + padding, dtype=np.int64)
    return {name: np.concatenate((values, pad[name])) for name, values in units.items()}


def _check_collate_options(
    separator_id: Any, position_ids_start: Any, pad_to_multiple_of: Any, return_tensors: Any
) -> Callable[[npt.NDArray[Any]], Any]:
    """``collate``'s transformers options checked; returns the array constructor ``return_tensors`` names. O(1).

    ``separator_id`` is any int64 label; ``position_ids_start`` and ``pad_to_multiple_of`` are at most
    ``MAX_SEQ_LENGTH`` (positions never wrap round, padding is never larger than the longest block).

    >>> _check_collate_options(-100, 0, 2**30, "np")
    Traceback (most recent call last):
    ...
    packing.errors.SettingError: pad_to_multiple_of: expected at most 16,777,216, got 1073741824
    """
    check_integer(separator_id, "separator_id", least=INT64_MIN, most=INT64_MAX)
    check_integer(position_ids_start, "position_ids_start", least=0, most=MAX_SEQ_LENGTH)
    if pad_to_multiple_of is not None:
        check_integer(pad_to_multiple_of, "pad_to_multiple_of", most=MAX_SEQ_LENGTH, optional=True)
    if return_tensors == "pt":
        return torch.from_numpy
    if return_tensors == "np":
        return np.asarray
    raise SettingError("return_tensors", "'pt' or 'np'", return_tensors)


def _collated_weights(
    rows: Sequence[Any],
    labels: Int64Array,
    lengths: Int64Array,
    mode: LossMode | None,
    totals: LossTotals | float | None,
) -> npt.NDArray[np.float32] | None:
    """``collate``'s ``loss_weights``: computed for ``mode``, or the blocks' own column, or None. O(T)."""
    blocks = bool(rows) and all(_is_block(row) for row in rows)
    if mode is None:
        if blocks and all(LOSS_WEIGHTS.name in row for row in rows):
            return np.concatenate(
                [_block_column(row, i, LOSS_WEIGHTS.name, weight_array) for i, row in enumerate(rows)]
            )
        return None
    check_mode(mode)
    if blocks and all("sequence_ids" in row for row in rows):
        documents = np.concatenate([_block_column(row, i, "sequence_ids", id_array) for i, row in enumerate(rows)])
    else:
        documents = row_of(lengths)
    return token_weights(labels != IGNORE_INDEX, documents, mode, totals if totals is not None else _totals_of(rows))


def _block_column(row: Mapping[str, Any], index: int, name: str, read: Callable[..., npt.NDArray[Any]]) -> Any:
    """A block's per-token column ``name`` read by the reader (``read``: one value per token of ``input_ids``),
    cut to its documents' tokens (``sum(seq_lengths)``). O(block length)."""
    plain = _plain(row)  # read by read_block first: input_ids and seq_lengths are checked
    kept = int(length_array(plain["seq_lengths"], index, "seq_lengths").sum())
    return read(plain[name], index, name, len(plain["input_ids"]))[:kept]


def _totals_of(rows: Sequence[Any]) -> LossTotals | None:
    totals = getattr(rows, "totals", None)
    return totals if isinstance(totals, LossTotals) else None


def weighted_loss(
    logits: torch.Tensor, labels: torch.Tensor, weights: torch.Tensor, *, shifted: bool = False
) -> torch.Tensor:
    """``Σ weights × cross-entropy`` of a causal LM's ``logits`` ``(..., T, vocab)`` against ``labels`` and
    ``weights`` ``(..., T)`` as ``collate`` gives them (transformers' convention: ``labels[t]`` is the target of
    the prediction at ``t - 1``; this function shifts, as the model's own loss does). The token-mean objective is
    ``weighted_loss`` with ``collate(..., loss_weights="token")``; the result is the batch's share of the
    optimizer step's objective when the weights were normalised over the step. Computed in float32. O(T × vocab).
    ``shifted=True`` takes targets already shifted (``shift_labels`` and ``shift_loss_weights`` of a THD batch, or
    of one context-parallel rank's shard of it): position ``t`` is trained on ``labels[t]``, nothing is shifted.

    >>> logits = torch.zeros(1, 3, 4)
    >>> round(float(weighted_loss(logits, torch.tensor([[-100, 1, 2]]), torch.tensor([[0.0, 0.5, 0.5]]))), 4)
    1.3863
    """
    if labels.shape != weights.shape or logits.shape[:-1] != labels.shape:
        raise SettingError(
            "weights", f"labels and weights of the logits' shape {tuple(logits.shape[:-1])}", tuple(weights.shape)
        )
    cut = 0 if shifted else 1
    predictions = logits[..., : logits.shape[-2] - cut, :].float().reshape(-1, logits.shape[-1])
    targets = (
        labels[..., cut:].reshape(-1).to(predictions.device, torch.long)
    )  # the int32 schema: cross-entropy takes int64
    per_token = torch.nn.functional.cross_entropy(predictions, targets, ignore_index=IGNORE_INDEX, reduction="none")
    return (per_token * weights[..., cut:].reshape(-1).to(per_token)).sum()


class StepIndices(list):  # type: ignore[type-arg]
    """A list (of a step's sample indices, or of its rows) that carries the optimizer step's ``totals``:
    what ``PackingSampler`` yields when given ``trained_tokens``, and what ``StepDataset`` hands ``collate``."""

    def __init__(self, items: Any, totals: LossTotals | None) -> None:
        super().__init__(items)
        self.totals = totals

    def __reduce__(self) -> Any:  # DataLoader workers receive the indices pickled
        return (StepIndices, (list(self), self.totals))


class StepLoader(torch.utils.data.DataLoader[Any]):
    """``PackingSampler.loader``'s ``DataLoader``: ``set_epoch`` repacks its sampler (``transformers.Trainer``
    calls it at every epoch)."""

    def set_epoch(self, epoch: int) -> None:
        self.batch_sampler.set_epoch(epoch)  # type: ignore[union-attr]


class StepDataset(Dataset[Any]):
    """``dataset`` whose batches, fetched for a sampler's ``StepIndices``, keep its ``totals`` for ``collate``
    (``DataLoader`` fetches a batch with ``__getitems__``). Items are ``dataset``'s, unchanged."""

    def __init__(self, dataset: Any) -> None:
        self.dataset = dataset

    def __len__(self) -> int:
        return len(self.dataset)

    def __getitem__(self, index: int) -> Any:
        return self.dataset[index]

    def __getitems__(self, indices: Sequence[int]) -> StepIndices:
        fetch = getattr(self.dataset, "__getitems__", None)
        items = fetch(list(indices)) if fetch else [self.dataset[i] for i in indices]
        return StepIndices(items, getattr(indices, "totals", None))


def _collate_fixed(rows: Sequence[Any], *, recipe: Recipe) -> dict[str, torch.Tensor]:
    """The collator ``collate_fixed(max_seq_length)`` gives: packed blocks stacked; other rows next-fit through the
    one pipeline, with ``pack``'s counts warned of; pairs and groups fitted by the overflow policy and kept whole (a
    unit never split), as ``pack`` fills blocks, with the unit columns, and with a shared prompt the ``(rows, 1,
    max_seq_length, max_seq_length)`` attention mask. O(rows × max_seq_length), O(rows × max_seq_length²) for the
    mask."""
    units = has_units(rows)
    prepared = prepare(recipe)
    if rows and all(_is_block(row) for row in rows):
        return _fixed_blocks(rows, recipe, units)
    samples = read_samples(rows, **prepared.read_options)
    if not units and not samples.lengths.any():  # an empty step: one block of padding, which trains nothing
        return _fixed_blocks([{"input_ids": [], "seq_lengths": []}], recipe, units=False)
    batch = run(samples, Recipe.of(recipe, strategy="next_fit", seed=None), prepared)
    batch.stats.warn_lost("collate_fixed")  # pack's counts: the masks read
    names = ("input_ids", "labels", "position_ids", *(UNIT_COLUMNS if units else ()))
    columns = {name: torch.from_numpy(getattr(batch, name).astype(np.int64)) for name in names}
    if batch.units is not None and batch.units.share_prompt:
        columns["attention_mask"] = attention_mask(batch)
    return columns


def _fixed_blocks(rows: Sequence[Any], recipe: Recipe, units: bool) -> dict[str, torch.Tensor]:
    """Packed blocks (rows with ``seq_lengths``: ``PackedDataset`` items) read by the reader (:func:`read_block`),
    one a row of ``max_seq_length``: their documents, then their own padding (the pad id they were written with)
    and the pad id past their end (label -100, position 0); positions restart at every document. Blocks of units
    (``units``) keep their own columns (their positions, which a shared prompt continues), padding after (label
    -100, ids -1), and the attention mask when some completion shares its prompt (a document holding two
    completions). A block of more than ``max_seq_length`` tokens is refused. O(rows × max_seq_length), O(rows ×
    max_seq_length²) with the mask."""
    width = recipe.max_seq_length
    fills = {"input_ids": prepare(recipe).pad_id, "labels": IGNORE_INDEX, "position_ids": 0}
    names = ("input_ids", "labels", "position_ids", *(UNIT_COLUMNS if units else ()))
    grids = {name: np.full((len(rows), width), fills.get(name, -1), dtype=np.int64) for name in names}
    for index, row in enumerate(rows):
        if units:
            single, _ = unit_columns([row], recipe, warn=False)  # one block read back, checked
            if not len(single["input_ids"]):
                raise SettingError("rows", "at least one token", "<only empty rows>")
        else:
            tokens, targets, lengths = read_block(_plain(row), index)
            positions = np.arange(len(tokens)) - np.repeat(np.cumsum(lengths) - lengths, lengths)
            single = {"input_ids": tokens, "labels": targets, "position_ids": positions}
        used = len(single["input_ids"])
        if used > width:
            raise SettingError(
                "rows", f"packed blocks of at most max_seq_length={width} tokens", f"<block {index} of {used}>"
            )
        for name, grid in grids.items():
            grid[index, :used] = single[name]
        if not units:  # the block's own padding kept: the pad id it was written with (checked by read_block)
            own = np.asarray(as_numpy(row["input_ids"])).reshape(-1)[:width]
            grids["input_ids"][index, used : len(own)] = own[used:]
    batch = {name: torch.from_numpy(grid) for name, grid in grids.items()}
    if units and shares_prompt(batch["document_ids"], batch["completion_ids"]):
        batch["attention_mask"] = attention_mask(batch)
    return batch


@overload
def collate_fixed(
    max_seq_length: int | None = None,
    *,
    overflow: OverflowPolicy | None = None,
    recipe: Recipe | None = None,
    **options: Unpack[RecipeOptions],
) -> Callable[[Sequence[Any]], dict[str, torch.Tensor]]: ...


@overload
def collate_fixed(
    max_seq_length: list[Any] | tuple[Any, ...],
    *,
    overflow: OverflowPolicy | None = None,
    recipe: Recipe | None = None,
    **options: Unpack[RecipeOptions],
) -> dict[str, torch.Tensor]: ...


def collate_fixed(
    max_seq_length: int | list[Any] | tuple[Any, ...] | None = None,
    *,
    overflow: OverflowPolicy | None = None,
    recipe: Recipe | None = None,
    **options: Unpack[RecipeOptions],
) -> Callable[[Sequence[Any]], dict[str, torch.Tensor]] | dict[str, torch.Tensor]:
    """A ``collate_fn`` giving blocks of exactly ``max_seq_length`` tokens (static shapes, e.g. for compiled
    models): ``input_ids``, ``labels``, ``position_ids`` of shape ``(blocks, max_seq_length)`` and **no**
    ``attention_mask``; documents restart ``position_ids`` at 0, so transformers keeps them apart, and padding
    (the recipe's pad id, label -100, position 0) comes last. The options are ``collate``'s. A sampler's
    block is one row (its empty step, one row of padding); more documents than fit go on into further rows
    (next-fit; a document longer than a block gets the overflow policy, as in ``pack``). Packed blocks pass
    through, stacked. Picklable (DataLoader workers). O(rows × max_seq_length).

    >>> batch = collate_fixed(4)([[1, 2], [3]])
    >>> batch["input_ids"].tolist(), batch["labels"].tolist(), batch["position_ids"].tolist()
    ([[1, 2, 3, 0]], [[-100, 2, -100, -100]], [[0, 1, 0, 0]])

    Given packed blocks (a list of ``PackedDataset`` items) instead of a length, it is the ``collate_fn`` itself,
    as ``collate`` is: ``DataLoader(PackedDataset(path), batch_size=4, collate_fn=collate_fixed)`` stacks each
    four blocks into rows as wide as the widest of them, ``(4, max_seq_length)`` for this project's blocks;
    samples need a length (``collate_fixed(max_seq_length)``):

    >>> import packing
    >>> from packing.torch import PackedDataset
    >>> blocks = PackedDataset(packing.pack([[1, 2], [3, 4, 5], [6]], 4, strategy="bfd"))
    >>> collate_fixed([blocks[0], blocks[1]])["input_ids"].tolist()
    [[3, 4, 5, 6], [1, 2, 0, 0]]

    Pairs and groups are kept whole (next-fit units, a row never splits one), with the unit columns and, with
    ``share_prompt``, an ``attention_mask`` of shape ``(rows, 1, max_seq_length, max_seq_length)``:

    >>> batch = collate_fixed(6, share_prompt=True)([{"prompt": [1], "chosen": [2], "rejected": [3]}])
    >>> batch["position_ids"].tolist(), batch["attention_mask"].shape
    ([[0, 1, 1, 0, 0, 0]], torch.Size([1, 1, 6, 6]))
    """
    rows = max_seq_length if isinstance(max_seq_length, list | tuple) else None  # the collate_fn itself, on items
    width = _block_width(rows) if rows is not None else max_seq_length
    assert not isinstance(width, list | tuple)
    chosen = Recipe.at("collate_fixed", recipe, width, overflow=overflow, **options)
    return functools.partial(_collate_fixed, recipe=chosen) if rows is None else _collate_fixed(rows, recipe=chosen)


def _block_width(rows: Sequence[Any]) -> int:
    """The width ``collate_fixed(rows)`` stacks packed blocks to: the widest block's ``input_ids`` (at least 1); anything but
    packed blocks is refused (samples have no width of their own). O(rows)."""
    if not rows or not all(_is_block(row) for row in rows):
        raise SettingError(
            "collate_fixed", "a max_seq_length (collate_fixed(max_seq_length)), or packed blocks to stack", "<rows>"
        )
    return max(1, *(len(row["input_ids"]) for row in rows))  # empty blocks: one row of padding each
