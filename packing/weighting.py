"""What packing does to the loss: per-token weights for an objective chosen by name.

A causal-LM loss is a weighted sum of per-token cross-entropies, ``Σ w_t · CE_t``. The trained tokens are the
positions whose label is not -100 (a document's first token never is: nothing before it in the document predicts
it). A **document** is one original sample: its pieces in several blocks (a strategy or overflow that splits) are
one document, counted over the pieces present in the tokens weighed; a document with no trained token contributes
nothing and is not counted. With ``n_d`` the trained tokens of document ``d``:

- ``token``: every trained token weighs ``1 / T``, ``T = Σ n_d``: the mean over all trained tokens. A document
  weighs its length: ``n_d / T``. (What a plain mean over a packed batch computes.)
- ``sequence``: ``1 / (D · n_d)``, ``D`` = documents: the mean over documents of each document's mean token loss.
  Every document weighs ``1 / D``, however long. (The default of many unpacked SFT and RL recipes.)
- ``sequence_sum``: ``1 / D``: the mean over documents of each document's summed token loss (verl's
  ``seq-mean-token-sum``). A document weighs ``n_d / D``.
- ``sqrt``: ``1 / (S · √n_d)``, ``S = Σ √n_d``: each document's mean token loss weighted by ``√n_d / S``, between
  ``token`` (a document weighs ``n_d``) and ``sequence`` (it weighs 1).

``T``, ``D`` and ``S`` are the mode's **normaliser** (:func:`normaliser`). Computed over one batch, the weights sum
to that batch's objective. Given the normaliser of a whole optimizer step (every micro-batch on every rank, see
:class:`LossTotals`), each micro-batch's weights are its share of the step's objective, and the shares add up to it
exactly: no averaging of averages, no extra all-reduce.

>>> effective_weights([1, 3], "token").tolist()
[0.25, 0.75]
>>> effective_weights([1, 3], "sequence").tolist()
[0.5, 0.5]
>>> token_weights([1, 1, 1, 1], [0, 1, 1, 1], "sequence").tolist()
[0.5, 0.1666..., 0.1666..., 0.1666...]
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Literal, NamedTuple, get_args

import numpy as np
import numpy.typing as npt

from packing.core._validation import is_number
from packing.errors import SettingError
from packing.strategies._kernels import piece_mask_sums

if TYPE_CHECKING:  # pragma: no cover - typing only
    from packing.core._samples import Samples
    from packing.planning._plans import PackingPlan

LossMode = Literal["token", "sequence", "sequence_sum", "sqrt"]
LOSS_MODES: tuple[LossMode, ...] = get_args(LossMode)
"""The objectives, by name."""

Float32Array = npt.NDArray[np.float32]
FloatArray = npt.NDArray[np.float64]
Int64Array = npt.NDArray[np.int64]

MODE_ARITHMETIC: dict[LossMode, str] = {
    "token": "every trained token counts the same: a document weighs its trained tokens over all trained tokens "
    "(n_d / T), so a 2,000-token answer counts 100 times a 20-token one",
    "sequence": "every document counts the same: its mean token loss weighs 1 / D, however long it is; "
    "each of its tokens weighs 1 / (D · n_d)",
    "sequence_sum": "every document's summed token loss, averaged over documents: a document weighs n_d / D and "
    "each of its tokens 1 / D",
    "sqrt": "a document's mean token loss weighs √n_d / Σ√n: longer documents count more, but only as the square "
    "root of their length (between token and sequence)",
}
"""Each mode's arithmetic in words (``n_d``: trained tokens of document d; ``T``: all trained tokens;
``D``: documents with a trained token)."""


class LossTotals(NamedTuple):
    """The normalisers of one optimizer step (or any set of documents): ``documents`` with a trained token,
    ``tokens`` trained, and ``sqrt_sum`` = Σ √(trained tokens of each document).

    >>> LossTotals.of([4, 0, 1])
    LossTotals(documents=2, tokens=5, sqrt_sum=3.0)
    >>> LossTotals.of([4, 0, 1]).of_mode("sqrt")
    3.0
    """

    documents: int
    tokens: int
    sqrt_sum: float

    @classmethod
    def of(cls, trained: npt.ArrayLike) -> LossTotals:
        """The totals of documents with these trained-token counts. O(n)."""
        counts = np.asarray(trained, dtype=np.int64).reshape(-1)
        return cls(int((counts > 0).sum()), int(counts.sum()), float(np.sqrt(counts).sum()))

    def of_mode(self, mode: LossMode) -> float:
        """The normaliser ``mode`` divides by: tokens, documents, or the sum of square roots."""
        check_mode(mode)
        if mode == "token":
            return float(self.tokens)
        return self.sqrt_sum if mode == "sqrt" else float(self.documents)


def check_mode(mode: object) -> LossMode:
    """``mode`` if it names an objective, else a ``SettingError`` listing them."""
    if not isinstance(mode, str) or mode not in LOSS_MODES:
        raise SettingError("loss_weights", f"one of {', '.join(LOSS_MODES)}", mode)
    return mode


def _check_total(total: float | LossTotals | None, mode: LossMode, own: float) -> float:
    """The normaliser to divide by: ``total`` (a number or the step's ``LossTotals``), else ``own``."""
    if total is None:
        return own
    value = total.of_mode(mode) if isinstance(total, LossTotals) else total
    if not is_number(value) or not 0 < value < float("inf"):
        raise SettingError("total", f"a positive finite {mode} normaliser (or a LossTotals)", value)
    if own > float(value) * (1 + 1e-9):
        raise SettingError("total", f"at least this batch's own normaliser ({own:g})", value)
    return float(value)


def per_token_weight(trained: npt.ArrayLike, mode: LossMode, total: float | LossTotals | None = None) -> FloatArray:
    """The weight of each trained token of documents with ``trained`` trained tokens (0 for a document without
    any), for ``mode`` divided by ``total`` (default: these documents' own normaliser). O(documents).

    >>> per_token_weight([2, 0, 8], "sqrt").round(4).tolist()
    [0.1667, 0.0, 0.0833]
    >>> per_token_weight([2, 8], "token", total=20).tolist()
    [0.05, 0.05]
    """
    check_mode(mode)
    counts = np.asarray(trained, dtype=np.float64).reshape(-1)
    if counts.size and counts.min() < 0:
        raise SettingError("trained", "non-negative trained-token counts", int(counts.min()))
    own = LossTotals.of(counts.astype(np.int64))
    norm = _check_total(total, mode, own.of_mode(mode)) if own.documents else 1.0
    has = counts > 0
    out = np.zeros(counts.shape, dtype=np.float64)
    if mode in ("token", "sequence_sum"):  # every trained token alike: 1 / T, or 1 / D
        out[has] = 1.0 / norm
    elif mode == "sequence":
        out[has] = 1.0 / (norm * counts[has])
    else:
        out[has] = 1.0 / (norm * np.sqrt(counts[has]))
    return out


def effective_weights(trained: npt.ArrayLike, mode: LossMode) -> FloatArray:
    """Each document's weight in the loss under ``mode``: the factor on its **mean** token loss, so the
    objective is ``Σ_d weight_d · mean_loss_d`` (documents with ``trained`` trained tokens; 0 for none).

    ``token``: ``n_d / T`` (proportional to length); ``sequence``: ``1 / D`` (equal); ``sequence_sum``:
    ``n_d / D`` (proportional to length, summing to the mean document length, not 1); ``sqrt``: ``√n_d / Σ√n``.
    :data:`MODE_ARITHMETIC` says it in words. O(documents).

    >>> effective_weights([20, 2000], "token").round(4).tolist()
    [0.0099, 0.9901]
    >>> effective_weights([20, 2000, 0], "sqrt").round(4).tolist()
    [0.0909, 0.9091, 0.0]
    >>> effective_weights([20, 2000], "sequence_sum").tolist()
    [10.0, 1000.0]
    """
    counts = np.asarray(trained, dtype=np.float64).reshape(-1)
    return per_token_weight(counts, mode) * counts


def token_weights(
    trained: npt.ArrayLike, documents: npt.ArrayLike, mode: LossMode, total: float | LossTotals | None = None
) -> Float32Array:
    """Per-token float32 weights: ``trained`` flags the tokens with a label (any shape), ``documents`` gives each
    token's document (any integer ids; the same shape). Untrained tokens weigh 0. ``total`` is the mode's
    normaliser over every batch the objective spans (default: these tokens' own). O(tokens log tokens).

    >>> token_weights([[0, 1, 1], [0, 1, 0]], [[7, 7, 7], [9, 9, -1]], "sequence").tolist()
    [[0.0, 0.25, 0.25], [0.0, 0.5, 0.0]]
    """
    flags = np.asarray(trained).astype(bool)
    docs = np.asarray(documents)
    if flags.shape != docs.shape:
        raise SettingError("documents", f"one document id per token (shape {flags.shape})", f"<shape {docs.shape}>")
    ids, inverse = np.unique(docs.reshape(-1), return_inverse=True)
    counts = np.bincount(inverse, weights=flags.reshape(-1), minlength=len(ids)).astype(np.int64)
    per_doc = per_token_weight(counts, mode, total)
    return np.where(flags, per_doc[inverse].reshape(flags.shape), 0.0).astype(np.float32)


class DocumentWeights(NamedTuple):
    """The weight of each trained token of every document of a set of blocks, normalised over them all, known
    before any block is made (:func:`document_weights`): ``ids`` are the documents as ``sequence_ids`` names
    them, sorted (-1, the padding, first when some block has padding), ``weights`` each one's float32 weight.
    :meth:`grid` weighs any of those blocks as :func:`token_weights` weighs them all at once, so an output can
    be weighted chunk by chunk.

    >>> weights = DocumentWeights(np.array([-1, 0, 7]), np.array([0.0, 0.25, 0.5], dtype=np.float32))
    >>> weights.grid([[0, 1, 1], [0, 1, 0]], [[0, 0, 0], [7, 7, -1]]).tolist()
    [[0.0, 0.25, 0.25], [0.0, 0.5, 0.0]]
    """

    ids: Int64Array
    weights: Float32Array

    def grid(self, trained: npt.ArrayLike, documents: npt.ArrayLike) -> Float32Array:
        """Per-token float32 weights of tokens flagged ``trained`` (any shape) of the ``documents`` (their
        ``sequence_ids``, the same shape; each one of :attr:`ids`); untrained tokens weigh 0. O(tokens ·
        log documents)."""
        flags = np.asarray(trained).astype(bool, copy=False)
        docs = np.asarray(documents)
        if not len(self.ids):
            return np.zeros(flags.shape, dtype=np.float32)
        largest = int(self.ids[-1])
        if largest < 8 * len(self.ids) + (1 << 16):  # sample indices (or small names): one look-up table
            table = np.zeros(largest + 2, dtype=np.float32)
            table[self.ids + 1] = self.weights
            looked = table[docs + 1]
        else:
            looked = self.weights[np.minimum(np.searchsorted(self.ids, docs), len(self.ids) - 1)]
        out: Float32Array = np.where(flags, looked, np.float32(0))
        return out


def document_weights(
    plan: PackingPlan, piece_targets: npt.ArrayLike, mode: LossMode, names: npt.ArrayLike | None = None
) -> DocumentWeights:
    """The weights ``mode`` gives every document of ``plan``'s blocks, from the trained tokens of each piece
    (``piece_targets``, in the plan's piece order) and what ``sequence_ids`` calls each sample (``names``;
    default: its index): the same values :func:`token_weights` gives the filled blocks' tokens (the same
    normaliser, summed in the same order), without making any block. O(pieces + documents · log documents).

    >>> from packing.planning._plans import plan
    >>> blocks = plan([3, 2], 4, strategy="ffd")  # two blocks, each with padding
    >>> weights = document_weights(blocks, [2, 1], "sequence")
    >>> weights.ids.tolist(), weights.weights.tolist()
    ([-1, 0, 1], [0.0, 0.25, 0.5])
    """
    check_mode(mode)
    count = len(plan.lengths)
    sequence = np.asarray(plan.piece_sequence, dtype=np.int64)
    targets = np.asarray(piece_targets, dtype=np.float64).reshape(-1)
    if targets.shape != sequence.shape:
        raise SettingError("piece_targets", f"one count per piece ({len(sequence)})", f"<{len(targets)} counts>")
    per_sample = np.bincount(sequence, weights=targets, minlength=count)
    present = np.flatnonzero(np.bincount(sequence, weights=plan.piece_length > 0, minlength=count) > 0)
    named = present if names is None else np.asarray(names, dtype=np.int64)[present]
    ids, inverse = np.unique(named, return_inverse=True)
    counts = np.bincount(inverse, weights=per_sample[present], minlength=len(ids))
    slots = plan.num_blocks * plan.max_seq_length
    if int(np.asarray(plan.piece_length, dtype=np.int64).sum()) < slots:  # some padding: sequence id -1
        ids, counts = np.concatenate(([-1], ids)), np.concatenate(([0.0], counts))
    weights = per_token_weight(counts.astype(np.int64), mode).astype(np.float32)
    return DocumentWeights(ids.astype(np.int64), weights)


def trained_tokens(samples: Samples, max_seq_length: int | None = None) -> Int64Array:
    """Trained tokens (labels that are not -100) of each sample packed whole: tokens of its loss mask after its
    first token, among its first ``max_seq_length`` tokens when given (what a truncating collate keeps).
    What ``PackingSampler(..., trained_tokens=...)`` needs. O(total tokens).

    >>> from packing.reading._reader import read_rows
    >>> trained_tokens(read_rows([{"prompt": [1, 2], "completion": [3, 4]}, [5, 6, 7]])).tolist()
    [2, 2]
    >>> trained_tokens(read_rows([[5, 6, 7]]), max_seq_length=2).tolist()
    [1]
    """
    if samples.loss_mask is None:
        raise SettingError("samples", "token ids with their loss mask", "<lengths only>")
    lengths = samples.lengths
    if max_seq_length is not None:
        lengths = np.minimum(lengths, max_seq_length)
    n = len(lengths)
    _, targets = piece_mask_sums(
        samples.loss_mask, samples.offsets, np.arange(n, dtype=np.int64), np.zeros(n, dtype=np.int64), lengths
    )
    return targets.astype(np.int64)
