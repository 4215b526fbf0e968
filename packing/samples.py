"""Reading samples: token lists, prompt/completion pairs and masked chats, checked and flattened."""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from numbers import Integral
from typing import Any

import numpy as np
import numpy.typing as npt

from packing.validation import INT64_MAX, has_bools

Int64Array = npt.NDArray[np.int64]
Int8Array = npt.NDArray[np.int8]

SAMPLE_FORMS = "a list of token ids, a dict with 'prompt' and 'completion', or a dict with 'input_ids' (and optionally 'loss_mask')"


@dataclass(frozen=True)
class Samples:
    """All samples' tokens and loss masks, flat: sample ``i`` is ``tokens[offsets[i]:offsets[i + 1]]``."""

    tokens: Int64Array
    loss_mask: Int8Array
    offsets: Int64Array

    @property
    def lengths(self) -> Int64Array:
        return np.diff(self.offsets)


def _describe(value: object) -> str:
    return f"{value!r} ({type(value).__name__})"


def _check_items(items: Iterable[Any], where: str) -> None:
    """Name the first item that is not an integer token id that fits in int64 (the slow, exact check)."""
    for position, item in enumerate(items):
        if isinstance(item, (bool, np.bool_)) or not isinstance(item, Integral):
            raise TypeError(
                f"{where}, position {position}: expected a non-negative integer token id, got {_describe(item)}"
            )
        if int(item) > INT64_MAX:
            raise ValueError(f"{where}, position {position}: token id {item} does not fit in 64 bits")


def _token_values(value: Any, where: str) -> npt.NDArray[np.integer[Any]]:
    """Check that ``value`` is a flat list (or 1-D array) of integers; signs are checked later. O(length)."""
    if type(value) is np.ndarray and value.ndim == 1 and value.dtype.kind in "iu":
        array: npt.NDArray[np.integer[Any]] = value  # the common case, without a copy
    elif isinstance(value, (str, bytes)) or not isinstance(value, (Sequence, np.ndarray)):
        raise TypeError(f"{where}: expected a list of token ids, got {_describe(value)}")
    elif isinstance(value, np.ndarray) and value.ndim != 1:
        raise TypeError(f"{where}: expected a flat list of token ids, got an array of shape {value.shape}")
    elif len(value) == 0:
        return np.zeros(0, dtype=np.int64)
    else:
        try:
            array = np.asarray(value)
        except ValueError:
            array = np.asarray(value, dtype=object)
        if array.ndim != 1:
            raise TypeError(f"{where}: expected a flat list of token ids, got nested values of shape {array.shape}")
        # numpy converts a mixed list as a whole ([1, True] to ints, [1, "x"] to strings): find the bad item
        if array.dtype.kind not in "iu" or (not isinstance(value, np.ndarray) and has_bools(value)):
            items = value.tolist() if isinstance(value, np.ndarray) else value
            _check_items(items, where)
            array = np.asarray(items, dtype=np.int64)
    if array.dtype == np.uint64 and array.size and int(array.max()) > INT64_MAX:
        _check_items(array.tolist(), where)
    return array


def _first_negative(tokens: npt.NDArray[np.integer[Any]]) -> int:
    """Index of the first negative token, or -1. O(length)."""
    if tokens.size == 0 or tokens.dtype.kind == "u" or tokens.min() >= 0:
        return -1
    return int(np.flatnonzero(tokens < 0)[0])


def _negative_error(where: str, position: int, value: int) -> ValueError:
    return ValueError(f"{where}, position {position}: expected a non-negative integer token id, got {value}")


def _token_array(value: Any, where: str) -> Int64Array:
    """Check one list (or 1-D array) of token ids and return it as int64. O(length)."""
    array = _token_values(value, where)
    negative = _first_negative(array)
    if negative >= 0:
        raise _negative_error(where, negative, int(array[negative]))
    return array.astype(np.int64, copy=False)


def _mask_array(value: Any, where: str, expected_length: int) -> Int8Array:
    """Check a loss mask: 0/1 (or booleans), as long as the tokens."""
    if isinstance(value, (str, bytes)) or not isinstance(value, (Sequence, np.ndarray)):
        raise TypeError(f"{where}: expected a list of 0/1 values, got {_describe(value)}")
    array = np.asarray(value)
    if array.ndim != 1:
        raise TypeError(f"{where}: expected a flat list of 0/1 values, got an array of shape {array.shape}")
    if len(array) != expected_length:
        raise ValueError(f"{where}: expected {expected_length} values (one per token), got {len(array)}")
    if array.size == 0:
        return np.zeros(0, dtype=np.int8)
    if array.dtype.kind == "b":
        return array.astype(np.int8)
    if array.dtype.kind not in "iu":
        items = value.tolist() if isinstance(value, np.ndarray) else value
        for position, item in enumerate(items):
            if not isinstance(item, Integral) or item not in (0, 1):
                raise ValueError(f"{where}, position {position}: expected 0 or 1, got {_describe(item)}")
    bad = np.flatnonzero((array != 0) & (array != 1))
    if bad.size:
        position = int(bad[0])
        raise ValueError(f"{where}, position {position}: expected 0 or 1, got {array[position].item()!r}")
    return array.astype(np.int8)


def read_sample(sample: Any, index: int, completion_only_loss: bool = True) -> tuple[Int64Array, Int8Array]:
    """Tokens and loss mask of one sample, whatever its form.

    >>> tokens, mask = read_sample({"prompt": [5, 6], "completion": [7]}, 0)
    >>> tokens.tolist(), mask.tolist()
    ([5, 6, 7], [0, 0, 1])
    >>> read_sample("hello", 3)
    Traceback (most recent call last):
    ...
    TypeError: sample 3: expected a list of token ids, a dict with 'prompt' and 'completion', or a dict with 'input_ids' (and optionally 'loss_mask'), got 'hello' (str)
    """
    where = f"sample {index}"
    if isinstance(sample, Mapping):
        if "prompt" in sample or "completion" in sample:
            if sample.get("input_ids") is not None:
                raise ValueError(f"{where}: has both 'input_ids' and 'prompt'/'completion'; give one form")
            missing = [key for key in ("prompt", "completion") if key not in sample]
            if missing:
                raise ValueError(f"{where}: a prompt/completion sample needs both keys; '{missing[0]}' is missing")
            prompt = _token_array(sample["prompt"], f"{where} 'prompt'")
            completion = _token_array(sample["completion"], f"{where} 'completion'")
            mask = np.concatenate(
                (
                    np.full(len(prompt), 0 if completion_only_loss else 1, dtype=np.int8),
                    np.ones(len(completion), np.int8),
                )
            )
            return np.concatenate((prompt, completion)), mask
        if "input_ids" in sample:
            tokens = _token_array(sample["input_ids"], f"{where} 'input_ids'")
            if sample.get("loss_mask") is None:
                return tokens, np.ones(len(tokens), dtype=np.int8)
            return tokens, _mask_array(sample["loss_mask"], f"{where} 'loss_mask'", len(tokens))
        raise ValueError(
            f"{where}: a dict sample needs 'prompt' and 'completion', or 'input_ids'; got keys {sorted(map(str, sample))}"
        )
    if isinstance(sample, (str, bytes)) or not isinstance(sample, (Sequence, np.ndarray)):
        raise TypeError(f"{where}: expected {SAMPLE_FORMS}, got {_describe(sample)}")
    tokens = _token_array(sample, where)
    return tokens, np.ones(len(tokens), dtype=np.int8)


def read_samples(samples: Iterable[Any], completion_only_loss: bool = True) -> Samples:
    """Check and flatten every sample. O(total tokens). Never modifies the input.

    Plain token samples are concatenated as they are and checked once, all together;
    only dict samples carry a mask of their own.

    >>> s = read_samples([[1, 2], {"prompt": [3], "completion": [4]}])
    >>> s.tokens.tolist(), s.loss_mask.tolist(), s.offsets.tolist()
    ([1, 2, 3, 4], [1, 1, 0, 1], [0, 2, 4])
    """
    if isinstance(samples, (str, bytes, Mapping)) or not isinstance(samples, Iterable):
        raise TypeError(f"samples must be a list of samples ({SAMPLE_FORMS}), got {type(samples).__name__}")
    tokens: list[npt.NDArray[np.integer[Any]]] = []
    masked: list[tuple[int, Int8Array]] = []
    for index, sample in enumerate(samples):
        if type(sample) is np.ndarray and sample.ndim == 1 and sample.dtype.kind == "i":
            tokens.append(sample)  # the common case at scale; signs are checked below, all at once
        elif isinstance(sample, Mapping):
            t, m = read_sample(sample, index, completion_only_loss)
            tokens.append(t)
            if not m.all():
                masked.append((index, m))
        elif isinstance(sample, (str, bytes)) or not isinstance(sample, (Sequence, np.ndarray)):
            raise TypeError(f"sample {index}: expected {SAMPLE_FORMS}, got {_describe(sample)}")
        else:
            tokens.append(_token_values(sample, f"sample {index}"))
    offsets = np.zeros(len(tokens) + 1, dtype=np.int64)
    np.cumsum([len(t) for t in tokens], out=offsets[1:])
    flat = np.concatenate(tokens, dtype=np.int64, casting="unsafe") if tokens else np.zeros(0, np.int64)
    negative = _first_negative(flat)
    if negative >= 0:
        index = int(np.searchsorted(offsets, negative, side="right")) - 1
        raise _negative_error(f"sample {index}", negative - int(offsets[index]), int(flat[negative]))
    loss_mask = np.ones(len(flat), dtype=np.int8)
    for index, mask in masked:
        loss_mask[offsets[index] : offsets[index + 1]] = mask
    return Samples(flat, loss_mask, offsets)


def chat_sample(
    turns: Iterable[tuple[str, Sequence[int]]], train_on: Iterable[str] = ("assistant",)
) -> dict[str, list[int]]:
    """A masked sample from ``(role, tokens)`` turns: loss only on the roles in ``train_on``.

    >>> chat_sample([("user", [1, 2]), ("assistant", [3, 4]), ("user", [5]), ("assistant", [6])])
    {'input_ids': [1, 2, 3, 4, 5, 6], 'loss_mask': [0, 0, 1, 1, 0, 1]}
    """
    trained = {train_on} if isinstance(train_on, str) else set(train_on)
    input_ids: list[int] = []
    loss_mask: list[int] = []
    for turn, item in enumerate(turns):
        if not isinstance(item, tuple) or len(item) != 2 or not isinstance(item[0], str):
            raise TypeError(f"turn {turn}: expected a (role, tokens) pair, got {_describe(item)}")
        role, ids = item
        ids_list = _token_array(ids, f"turn {turn} ({role})").tolist()
        input_ids.extend(ids_list)
        loss_mask.extend([int(role in trained)] * len(ids_list))
    return {"input_ids": input_ids, "loss_mask": loss_mask}
