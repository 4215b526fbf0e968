"""Samples: rows read and checked, flat (tokens, loss mask, offsets, labels), and the helpers that join
token arrays into one. Internal: the public names are in ``packing``.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from operator import attrgetter
from typing import Any

import numpy as np
import numpy.typing as npt

from packing.core._arrays import offsets_of, ranges, row_at
from packing.core._forms import LABELS, unit_field_at
from packing.core._pairs_groups import Units
from packing.core._validation import INT32_MAX
from packing.errors import SampleError, SettingError

Int64Array = npt.NDArray[np.int64]
Int8Array = npt.NDArray[np.int8]
TokenArray = npt.NDArray[np.signedinteger[Any]]
"""Flat token ids: int32 when read from 32-bit ids, else int64."""
IGNORE_INDEX = -100
"""Label value that Hugging Face losses skip."""


@dataclass(frozen=True)
class Samples:
    """Samples read and checked, flat: sample ``i`` is ``tokens[offsets[i]:offsets[i + 1]]``.

    ``tokens`` and ``loss_mask`` are None for lengths-only data (rows of ``{"length": n}``),
    which can be planned but not packed. ``tokens`` is int32 when every source of ids was (at
    most) 32-bit signed, int64 otherwise; ``loss_mask`` is int8, a read-only broadcast of 1
    (no memory) when no token is masked. ``labels`` is None unless some row gave ``labels`` that differ
    from its ``input_ids`` where trained (no memory in the common case); then it is like ``tokens``, each
    token's label: the token itself but where a row gave another (only trained tokens' labels are read).
    ``units`` is None unless some row was a preference pair or a completion group: then it holds every
    sample's unit structure (:class:`~packing.core._pairs_groups.Units`; plain samples among them are units of one
    document) and the tokens are laid out as its ``share_prompt`` says.
    ``pack`` and ``plan`` take a ``Samples`` as it is, without checking it again.

    >>> from packing import read_rows
    >>> read_rows([{"length": 5}, {"length": 0}]).lengths.tolist()
    [5, 0]
    >>> read_rows([[1, 2], {"input_ids": [3, 4], "labels": [-100, 9]}]).labels.tolist()
    [1, 2, 3, 9]
    """

    tokens: TokenArray | None
    loss_mask: Int8Array | None
    offsets: Int64Array
    labels: TokenArray | None = None
    units: Units | None = None

    @property
    def lengths(self) -> Int64Array:
        """Tokens per sample. O(n)."""
        return np.diff(self.offsets)

    @property
    def has_tokens(self) -> bool:
        """False for lengths-only data."""
        return self.tokens is not None

    def __len__(self) -> int:
        return len(self.offsets) - 1

    @staticmethod
    def join(parts: Sequence[Samples]) -> Samples:
        """The samples of ``parts``, one part after the other; all with tokens, or all lengths only.
        O(total tokens).

        >>> from packing import read_rows
        >>> joined = Samples.join([read_rows([[1, 2], [3]]), read_rows([{"prompt": [4], "completion": [5]}])])
        >>> joined.tokens.tolist(), joined.loss_mask.tolist(), joined.offsets.tolist()
        ([1, 2, 3, 4, 5], [1, 1, 1, 0, 1], [0, 2, 3, 5])
        """
        if not parts:
            raise SettingError("parts", "at least one Samples", "<none>")
        if len(parts) == 1:
            return parts[0]
        if len({part.has_tokens for part in parts}) > 1:
            raise SettingError("parts", "samples all with tokens or all lengths only", "<both>")
        lengths = np.concatenate([part.lengths for part in parts])
        offsets = offsets_of(lengths)
        if not parts[0].has_tokens:
            return Samples(None, None, no_overflow(offsets))
        tokens = np.concatenate([part.tokens for part in parts if part.tokens is not None])
        masks = [part.loss_mask for part in parts if part.loss_mask is not None]
        mask = all_ones(len(tokens)) if all(_unmasked(m) for m in masks) else np.concatenate(masks)
        units = joined_units(parts)
        if all(part.labels is None for part in parts):
            return Samples(tokens, mask, offsets, None, units)
        labels = np.concatenate([part.tokens if part.labels is None else part.labels for part in parts])
        return Samples(tokens, mask, offsets, labels, units)

    def take(self, rows: Int64Array) -> Samples:
        """The samples ``rows``, in that order, with their masks (unmasked: a view of no memory), labels and units.
        O(their tokens).

        >>> from packing import read_rows
        >>> read_rows([[1, 2], [3], {"prompt": [4], "completion": [5]}]).take(np.array([2, 0])).loss_mask.tolist()
        [0, 1, 1, 1]
        """
        assert self.tokens is not None and self.loss_mask is not None
        lengths = self.lengths[rows]
        index = ranges(self.offsets[:-1][rows], lengths)
        mask = all_ones(len(index)) if _unmasked(self.loss_mask) else self.loss_mask[index]
        labels = None if self.labels is None else self.labels[index]
        units = None if self.units is None else self.units.take(rows)
        return Samples(self.tokens[index], mask, offsets_of(lengths), labels, units)

    def wide_ids(self) -> bool:
        """Whether a token id is above 2**31 - 1 (the compact schema's int32 cannot hold it; ``int64=True`` can).
        O(1) for int32 tokens, O(tokens) otherwise.

        >>> from packing import read_rows
        >>> read_rows([[1, 2**31]]).wide_ids(), read_rows([[1, 2]]).wide_ids()
        (True, False)
        """
        tokens = self.tokens
        return tokens is not None and tokens.dtype.itemsize > 4 and bool(tokens.size) and int(tokens.max()) > INT32_MAX

    def refuse_wide_ids(self, int64: bool = False) -> None:
        """Raise a ``SampleError`` at the first token id above 2**31 - 1 unless ``int64`` (the compact
        schema's ids are int32: such an id would wrap). O(1) for int32 tokens, O(tokens) otherwise.

        >>> from packing import read_rows
        >>> read_rows([[1, 2**31]]).refuse_wide_ids()
        Traceback (most recent call last):
        ...
        packing.errors.SampleError: sample 0, position 1: expected a token id at most 2147483647 (the int32 schema; int64=True for larger ids), got 2147483648
        """
        if not int64 and self.wide_ids():
            raise self.wide_id_error()

    def wide_id_error(self) -> SampleError:
        """The error for the first token id above 2**31 - 1 (input order). O(tokens)."""
        assert self.tokens is not None
        at = int(np.flatnonzero(self.tokens > INT32_MAX)[0])
        sample = row_at(self.offsets, at)
        expected = f"a token id at most {INT32_MAX} (the int32 schema; int64=True for larger ids)"
        field, position = None, at - int(self.offsets[sample])
        if self.units is not None:  # a pair or group: the field the id is in
            units = self.units
            first, last = int(units.completion_offsets[sample]), int(units.completion_offsets[sample + 1])
            lengths = units.completion_lengths[first:last].tolist()
            kind, prompt = int(units.kind[sample]), int(units.prompt_lengths[sample])
            field, position = unit_field_at(kind, prompt, lengths, units.share_prompt, position)
        return SampleError(sample, field, position, expected, int(self.tokens[at]))

    def refuse_other_labels(self) -> None:
        """Raise a ``SampleError`` at the first trained token whose given label is not the token itself:
        packed blocks train each token on itself (their labels are ``input_ids``). O(1) when ``labels`` is
        None, O(tokens) otherwise.

        >>> from packing import read_rows
        >>> read_rows([{"input_ids": [3, 4], "labels": [3, 9]}]).refuse_other_labels()
        Traceback (most recent call last):
        ...
        packing.errors.SampleError: sample 0, 'labels', position 1: expected 4 (the token: packed blocks train each token on itself; other labels go through packing.torch.collate), got 9
        """
        if self.labels is None or self.tokens is None or self.loss_mask is None:
            return
        other = np.flatnonzero((self.labels != self.tokens) & (self.loss_mask != 0))
        if other.size:
            at = int(other[0])
            sample = row_at(self.offsets, at)
            expected = (
                f"{int(self.tokens[at])} (the token: packed blocks train each token on itself; other labels go "
                "through packing.torch.collate)"
            )
            raise SampleError(sample, LABELS, at - int(self.offsets[sample]), expected, int(self.labels[at]))


def joined_units(parts: Sequence[Samples]) -> Units | None:
    """The units of ``parts`` joined (a part without units: plain samples, units of their own), or None when no
    part has units. O(samples).

    >>> from packing.core._pairs_groups import Units
    >>> a = Samples(np.array([1, 2]), all_ones(2), np.array([0, 2]), units=Units.of([1], [[1]]))
    >>> joined_units([a, Samples(np.array([3]), all_ones(1), np.array([0, 1]))]).kind.tolist()
    [2, 0]
    """
    with_units = [part.units for part in parts if part.units is not None]
    if not with_units:
        return None
    shared = with_units[0].share_prompt
    return Units.join([part.units or Units.plain(part.lengths, shared) for part in parts])


def sample_offsets(lengths: Iterable[int] | Int64Array, count: int) -> Int64Array:
    """CSR offsets of ``count`` sample lengths (an array, or any iterable of ints), refused past 2**63 - 1
    (:func:`no_overflow`). O(count).

    >>> sample_offsets(iter([2, 0, 3]), 3).tolist()
    [0, 2, 2, 5]
    """
    values = lengths if isinstance(lengths, np.ndarray) else np.fromiter(lengths, dtype=np.int64, count=count)
    return no_overflow(offsets_of(values))


def no_overflow(offsets: Int64Array) -> Int64Array:
    """``offsets`` (running sums of non-negative lengths, each below 2**63), unless their total passed 2**63 - 1:
    the first sum that did wraps to a negative number, and the row that made it is refused. O(n)."""
    if len(offsets) and int(offsets.min()) < 0:
        row = int(np.flatnonzero(offsets < 0)[0]) - 1
        raise SampleError(row, "length", None, "lengths adding up to less than 2**63", "<a larger sum>")
    return offsets


def token_dtype(dtypes: Iterable[np.dtype[Any]]) -> type[np.int32] | type[np.int64]:
    """int32 when every one of ``dtypes`` fits in it (signed up to 32 bits, unsigned up to 16), else int64.

    >>> token_dtype([np.dtype("int32"), np.dtype("uint8")]).__name__, token_dtype([np.dtype("uint32")]).__name__
    ('int32', 'int64')
    """
    narrow = all((d.kind == "i" and d.itemsize <= 4) or (d.kind == "u" and d.itemsize <= 2) for d in dtypes)
    return np.int32 if narrow else np.int64


def all_ones(count: int) -> Int8Array:
    """A loss mask of ``count`` ones that takes no memory (a read-only broadcast view). O(1)."""
    return np.broadcast_to(np.ones(1, dtype=np.int8), (count,))


def _unmasked(mask: Int8Array) -> bool:
    """Whether ``mask`` is :func:`all_ones`' view (what the reader gives unmasked samples). O(1)."""
    return not mask.size or (mask.strides[0] == 0 and bool(mask[0]))


def joined_dtype(pieces: Sequence[npt.NDArray[Any]]) -> type[np.int32] | type[np.int64]:
    """The dtype the reader joins ``pieces`` into (``token_dtype`` of those with values). O(pieces), in C."""
    dtypes = set(map(attrgetter("dtype"), pieces))  # in C: a handful of distinct dtypes among many pieces
    dtype = token_dtype(dtypes)
    if dtype == np.int64 and len(dtypes) > 1:  # empty lists read as int64: only pieces with values count
        dtype = token_dtype({piece.dtype for piece in pieces if piece.size})
    return dtype
