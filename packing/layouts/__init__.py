"""Packed-data layouts, one module per framework, each holding its writer and its reader.

- :mod:`~packing.layouts.native` (``packing``): this project's columns;
- :mod:`~packing.layouts.trl` (``trl``): TRL ``pack_dataset``;
- :mod:`~packing.layouts.flattening` (``flattening``): transformers ``DataCollatorWithFlattening``;
- :mod:`~packing.layouts.torchtune` (``torchtune``): torchtune ``PackedDataset``;
- :mod:`~packing.layouts.megatron` (``megatron``): NeMo / Megatron packed sequences (also ``.npy`` files);
- :mod:`~packing.layouts.segment_ids` (``segment_ids``): segment ids in ``attention_mask`` (LLaMA-Factory, Axolotl).

Every module is a :class:`~packing.layouts.common.LayoutModule`: ``NAME``, ``TITLE``, ``recognises(names, table)``,
``read(table, source)`` (a :class:`~packing.layouts.common.Parsed` over one
:class:`~packing.layouts.common.PackedLayout`), ``write(rows)`` (a ``pyarrow.Table``) and ``weights_column``. This
is the one place a layout is registered: its name in :data:`LayoutName` (the order they are offered in) and its
module in the order they are recognised in; everything else (the command line's choices, the explorer, the
auditor's words) reads :data:`MODULES`, :data:`LAYOUTS` and :data:`LAYOUT_TITLES`. The checks run once over the common form, in :mod:`packing.layouts.audit`;
:func:`packing.layouts._export.export` writes. O(tokens + blocks).

>>> import pyarrow as pa
>>> detect(pa.table({"input_ids": [[1, 2]], "labels": [[1, 2]], "attention_mask": [[1, 1]]}), "<t>")
'trl'
>>> read_layout(pa.table({"tokens": [[1, 2, 0]], "labels": [[-100, 2, -100]], "input_pos": [[0, 1, 2]],
...                      "seq_lens": [[2, 1]]})).layout.document.tolist()
[0, 0, -1]
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, Literal, ParamSpec, TypeVar, get_args

from packing.errors import SettingError
from packing.layouts import flattening, megatron, native, segment_ids, torchtune, trl
from packing.layouts.common import LayoutModule, PackedLayout, Parsed, Rows, error

if TYPE_CHECKING:  # pragma: no cover - typing only
    import pyarrow as pa

LayoutName = Literal["packing", "trl", "flattening", "torchtune", "megatron", "segment_ids"]
"""Every layout's name, in the order they are offered."""
LAYOUTS: tuple[LayoutName, ...] = get_args(LayoutName)
"""Every layout: what :func:`packing.layouts.audit.audit` recognises and :func:`packing.layouts._export.export` writes."""
_RECOGNISED_IN_ORDER: tuple[LayoutModule, ...] = (torchtune, megatron, native, trl, segment_ids, flattening)
"""Every layout's module, in the order they are tried; a table with ``input_ids`` that none claims is TRL
``wrapped`` output."""
MODULES: dict[str, LayoutModule] = {
    m.NAME: m for m in sorted(_RECOGNISED_IN_ORDER, key=lambda m: LAYOUTS.index(m.NAME))
}
"""Each layout's module by its name, in :data:`LAYOUTS`' order."""
LAYOUT_TITLES: dict[str, str] = {name: module.TITLE for name, module in MODULES.items()}
"""Each layout's title (what the auditor and the explorer call it)."""
__all__ = [
    "LAYOUTS",
    "LAYOUT_TITLES",
    "MODULES",
    "LayoutModule",
    "LayoutName",
    "PackedLayout",
    "Parsed",
    "Rows",
    "check_layout",
    "detect",
    "takes_layout",
]


def detect(table: pa.Table, source: str) -> str:
    """The layout of ``table``, from its column names (and, for a mask, whether it numbers documents). O(1),
    O(tokens) for an ``attention_mask`` with labels and no position ids."""
    names = set(map(str, table.column_names))
    for module in _RECOGNISED_IN_ORDER:
        if module.recognises(names, table):
            return str(module.NAME)
        if module is torchtune and "input_ids" not in names:  # every layout after torchtune's names it so
            raise error(
                source,
                f"no packed token column; found {', '.join(sorted(names)) or 'none'}, expected 'input_ids' "
                "(or torchtune's 'tokens' with 'seq_lens')",
            )
    return "trl"


def check_layout(layout: str) -> str:
    """``layout`` if it names a layout (:data:`LAYOUTS`), else the one refusal. O(1).

    >>> check_layout("keras")
    Traceback (most recent call last):
    ...
    packing.errors.SettingError: layout: expected one of packing, trl, flattening, torchtune, megatron, segment_ids, got 'keras' (str)
    """
    if layout not in MODULES:
        raise SettingError("layout", f"one of {', '.join(LAYOUTS)}", layout)
    return layout


_P = ParamSpec("_P")
_R = TypeVar("_R")


def takes_layout(function: Callable[_P, _R]) -> Callable[_P, _R]:
    """``function`` (which takes ``layout=``) answering ``format=`` by name: ``format`` is a file's format
    (``read_dataset``'s), a framework's columns are a ``layout``. O(1) a call.

    >>> from packing import export, pack
    >>> export(pack([[1]], 2), format="trl")
    Traceback (most recent call last):
    ...
    packing.errors.SettingError: format: expected layout= (format names a file's format, layout a framework's columns), got 'trl' (str)
    """

    @functools.wraps(function)
    def checked(*args: Any, **kwargs: Any) -> _R:
        if "format" in kwargs:
            expected = "layout= (format names a file's format, layout a framework's columns)"
            raise SettingError("format", expected, kwargs["format"])
        return function(*args, **kwargs)

    return checked


def read_layout(table: pa.Table, layout: str | None = None, source: str = "<table>") -> Parsed:
    """``table`` in ``layout`` (default: :func:`detect`) brought to the common form. O(tokens)."""
    name = check_layout(layout) if layout is not None else detect(table, source)
    parsed: Parsed = MODULES[name].read(table, source)
    return _with_units(parsed, table, source)


UNIT_ID_COLUMNS = ("unit_ids", "completion_ids")
"""The columns that say which tokens are a pair's or group's (``packing.core._pairs_groups``), read with any layout."""


def _with_units(parsed: Parsed, table: pa.Table, source: str) -> Parsed:
    """``parsed`` with the units of its tokens when ``table`` has ``unit_ids`` and ``completion_ids`` (one value
    per token): what the auditor needs to find a completion that can see its sibling. O(tokens)."""
    import dataclasses

    from packing.layouts.common import list_column

    if not set(UNIT_ID_COLUMNS) <= set(map(str, table.column_names)):
        return parsed
    values = []
    for name in UNIT_ID_COLUMNS:
        column = list_column(table, name, source)
        if column is None or len(column.values) != len(parsed.layout.input_ids):
            raise error(source, f"column '{name}' does not hold one value per token")
        values.append(column.values)
    packed = dataclasses.replace(parsed.layout, unit=values[0], completion=values[1])
    return dataclasses.replace(parsed, layout=packed)
