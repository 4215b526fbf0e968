"""Lower-bound certificates for packing documents whole: anyone can recheck them in integers.

Three kinds of proof that no packing can use fewer than ``lower_bound`` blocks:

- ``"L1"``: ceil(tokens / capacity);
- ``"L2"``: the Martello–Toth bound (``packing.strategies._bounds.martello_toth_l2``);
- ``"dual prices"``: an integer price per distinct length. A block can hold documents of total price at most
  ``V``, the optimum of a bounded knapsack over the lengths present (at most ``count[w]`` documents of
  length ``w``). Every document sits in some block, so ``blocks * V >= sum(count[w] * price[w])``, and
  ``lower_bound = ceil(sum(count[w] * price[w]) / V)``. This holds for any prices; good ones (from the
  linear-programming duals of the cutting-stock problem) give the strongest bound.

>>> import numpy as np
>>> lengths = np.array([6, 6, 6, 4, 4, 4])
>>> c = Certificate(lower_bound=3, kind="dual prices", prices={6: 1, 4: 0}, value=1, num_blocks=3)
>>> c.verify(lengths, 10), c.gap
(True, 0)

Internal: the public names are in ``packing`` and ``packing.strategies``.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

import numpy as np
import numpy.typing as npt

from packing.core._validation import MAX_SEQ_LENGTH, as_lengths, is_integer
from packing.errors import SettingError
from packing.strategies._bounds import martello_toth_l2, simple_bound

Int64Array = npt.NDArray[np.int64]
CertificateKind = Literal["L1", "L2", "dual prices"]

_MAX_DP_VALUE = 2**62
"""Knapsack values stay below this, so the int64 dynamic program cannot overflow."""


def knapsack_value(lengths: Int64Array, prices: dict[int, int], capacity: int) -> int:
    """Best total price of documents one block can hold, at most ``count[w]`` of length ``w``.

    Exact bounded knapsack in integers (numpy int64, each count split into powers of two):
    O(capacity × sum over lengths of log(count)). Negative prices count as never taken.

    >>> knapsack_value(np.array([6, 6, 4, 4, 3]), {6: 5, 4: 3, 3: 2}, 10)
    8
    >>> knapsack_value(np.array([3, 3, 3]), {3: 1}, 10)
    3
    """
    lengths = np.asarray(lengths, dtype=np.int64)
    values, counts = np.unique(lengths, return_counts=True)
    best = np.zeros(capacity + 1, dtype=np.int64)
    bound = 0
    for length, count in zip(values.tolist(), counts.tolist(), strict=True):
        price = int(prices.get(length, 0))
        if price <= 0 or length > capacity:
            continue
        left = min(count, capacity // length)
        bound += left * price
        if bound >= _MAX_DP_VALUE:
            raise OverflowError(f"certificate prices too large for an exact check: {price}")
        step = 1
        while left > 0:
            take = min(step, left)
            weight, gain = take * length, take * price
            # 0/1 choice of this bundle of `take` documents, for every room at once
            candidate = best[: capacity + 1 - weight] + gain
            best[weight:] = np.maximum(best[weight:], candidate)
            left -= take
            step *= 2
    return int(best[capacity])


@dataclass(frozen=True)
class Certificate:
    """Proof that no packing uses fewer than ``lower_bound`` blocks, next to a plan of ``num_blocks``.

    ``prices`` (integer price per distinct length; lengths left out cost 0) and ``value`` (the best total
    price one block can hold) are set only for ``kind == "dual prices"``.
    """

    lower_bound: int
    kind: CertificateKind
    num_blocks: int
    prices: dict[int, int] | None = None
    value: int | None = None

    @property
    def gap(self) -> int:
        """Blocks of the plan above the lower bound (0: the plan is proven optimal)."""
        return self.num_blocks - self.lower_bound

    @property
    def proven(self) -> bool:
        """True when the plan meets the bound."""
        return self.gap == 0

    def recompute(self, lengths: npt.ArrayLike, capacity: int) -> int:
        """The bound this certificate's kind (and prices) give on ``lengths``, worked out again in integers.

        O(n + capacity) for L1 and L2, O(n + capacity × distinct lengths × log n) for dual prices.

        >>> Certificate(2, "L1", 2).recompute([3, 3, 3], 5)
        2
        >>> Certificate(3, "L2", 3).recompute([3, 3, 3], 5)
        3
        """
        docs = np.asarray(lengths, dtype=np.int64)
        if self.kind == "L1":
            return simple_bound(int(docs.sum()), capacity)
        if self.kind == "L2":
            return martello_toth_l2(docs, capacity)
        if self.prices is None:
            raise ValueError("a 'dual prices' certificate needs prices")
        return _price_bound(docs, self.prices, knapsack_value(docs, self.prices, capacity))

    def verify(self, lengths: npt.ArrayLike, capacity: int) -> bool:
        """True when the bound rechecks exactly on ``lengths`` and the plan does not beat it; False for
        anything else, a malformed certificate or input included (never raises).

        Well formed: ``lower_bound`` and ``num_blocks`` integers with ``0 <= lower_bound <= num_blocks``
        (bools and floats refused); ``lengths`` a flat list of integers in ``1..capacity``; for dual
        prices, ``prices`` a dict from lengths present in ``lengths`` to integers in ``[0, 2**62)`` and
        ``value`` the knapsack optimum recomputed here, the bound being ``ceil(sum(count[w] * price[w]) /
        value)``, all in integer arithmetic; the other kinds carry neither. Time as :meth:`recompute`.

        >>> Certificate(2, "L1", 3).verify([3, 3, 3], 5)
        True
        >>> Certificate(3, "L1", 3).verify([3, 3, 3], 5)
        False
        >>> Certificate(1, "dual prices", 1, {3: 1.0}, 1).verify([3], 5)  # a float price
        False
        """
        docs = _documents(lengths, capacity)
        if docs is None or not _counts_ok(self.lower_bound, self.num_blocks):
            return False
        if not isinstance(self.kind, str) or self.kind not in ("L1", "L2", "dual prices"):
            return False
        if self.kind != "dual prices":
            bound = int(self.recompute(docs, capacity))
            return self.prices is None and self.value is None and bound == int(self.lower_bound)
        prices = _clean_prices(self.prices, docs)
        if prices is None or not is_integer(self.value) or int(self.value) < 0:
            return False
        try:
            value = knapsack_value(docs, prices, capacity)
        except OverflowError:
            return False
        return value == int(self.value) and _price_bound(docs, prices, value) == int(self.lower_bound)


def _counts_ok(lower_bound: object, num_blocks: object) -> bool:
    """Integers with 0 <= lower_bound <= num_blocks."""
    return is_integer(lower_bound) and is_integer(num_blocks) and 0 <= int(lower_bound) <= int(num_blocks)


def _documents(lengths: npt.ArrayLike, capacity: object) -> Int64Array | None:
    """``lengths`` as int64 when every one is an integer in 1..capacity (capacity an integer in
    1..MAX_SEQ_LENGTH); None otherwise. O(n)."""
    if not is_integer(capacity) or not 1 <= int(capacity) <= MAX_SEQ_LENGTH:
        return None
    try:
        docs = as_lengths(lengths)
    except (SettingError, ValueError, TypeError, OverflowError):
        return None
    if docs.size and (docs.min() < 1 or docs.max() > int(capacity)):
        return None
    return docs


def _clean_prices(prices: object, docs: Int64Array) -> dict[int, int] | None:
    """``prices`` as plain ints when it is a dict from lengths present in ``docs`` to integers in
    ``[0, 2**62)``; None otherwise. O(distinct lengths + n log n)."""
    if not isinstance(prices, dict):
        return None
    present = set(np.unique(docs).tolist())
    clean: dict[int, int] = {}
    for length, price in prices.items():
        if not (is_integer(length) and is_integer(price)) or int(length) not in present:
            return None
        if not 0 <= int(price) < _MAX_DP_VALUE:
            return None
        clean[int(length)] = int(price)
    return clean


def _price_bound(docs: Int64Array, prices: dict[int, int], value: int) -> int:
    """``ceil(sum(count[w] * price[w]) / value)`` in Python integers (0 when ``value <= 0``)."""
    if value <= 0:
        return 0
    values, counts = np.unique(docs, return_counts=True)
    total = sum(int(c) * int(prices.get(int(v), 0)) for v, c in zip(values, counts, strict=True))
    return -(-total // value)
