"""Thrift's compact protocol, enough to read a Parquet footer, change a field and write it back: how the tests make
a file whose footer lies about its sizes (pyarrow writes only true footers).

>>> fields = decode(encode([(1, 5, 7), (3, 6, -2)]))
>>> fields, encode(fields) == encode([(1, 5, 7), (3, 6, -2)])
([(1, 5, 7), (3, 6, -2)], True)
"""

from __future__ import annotations

import struct
from typing import Any

Field = tuple[int, int, Any]
"""``(field id, compact type, value)``; a struct's value is its list of fields, a list's ``(element type, items)``."""


def _varint(data: bytes, at: int) -> tuple[int, int]:
    shift = result = 0
    while True:
        byte = data[at]
        at += 1
        result |= (byte & 0x7F) << shift
        shift += 7
        if not byte & 0x80:
            return result, at


def _zigzag(value: int) -> int:
    return (value >> 1) ^ -(value & 1)


def _put_varint(value: int) -> bytes:
    out = bytearray()
    while True:
        if value < 0x80:
            out.append(value)
            return bytes(out)
        out.append((value & 0x7F) | 0x80)
        value >>= 7


def _unzig(value: int) -> int:
    return (value << 1) ^ (value >> 63)


def _value(data: bytes, at: int, kind: int) -> tuple[Any, int]:
    if kind in (1, 2):
        return kind == 1, at
    if kind == 3:
        return struct.unpack_from("b", data, at)[0], at + 1
    if kind in (4, 5, 6):
        raw, at = _varint(data, at)
        return _zigzag(raw), at
    if kind == 7:
        return struct.unpack_from("<d", data, at)[0], at + 8
    if kind == 8:
        size, at = _varint(data, at)
        return bytes(data[at : at + size]), at + size
    if kind in (9, 10):
        header = data[at]
        at += 1
        size, element = header >> 4, header & 0x0F
        if size == 15:
            size, at = _varint(data, at)
        items = []
        for _ in range(size):
            if element in (1, 2):  # a bool in a list is one byte
                items.append(data[at] == 1)
                at += 1
                continue
            item, at = _value(data, at, element)
            items.append(item)
        return (element, items), at
    if kind == 12:
        return _struct(data, at)
    raise ValueError(f"compact type {kind} is not read here")


def _struct(data: bytes, at: int) -> tuple[list[Field], int]:
    fields: list[Field] = []
    last = 0
    while True:
        header = data[at]
        at += 1
        if header == 0:
            return fields, at
        kind, delta = header & 0x0F, header >> 4
        if delta:
            number = last + delta
        else:
            raw, at = _varint(data, at)
            number = _zigzag(raw)
        value, at = _value(data, at, kind)
        fields.append((number, kind, value))
        last = number


def decode(data: bytes) -> list[Field]:
    """A struct's fields, in order."""
    return _struct(data, 0)[0]


def _put_value(kind: int, value: Any) -> bytes:
    if kind in (1, 2):
        return b""
    if kind == 3:
        return struct.pack("b", value)
    if kind in (4, 5, 6):
        return _put_varint(_unzig(value) & (2**64 - 1))
    if kind == 7:
        return struct.pack("<d", value)
    if kind == 8:
        return _put_varint(len(value)) + value
    if kind in (9, 10):
        element, items = value
        header = (
            bytes([(len(items) << 4) | element])
            if len(items) < 15
            else bytes([0xF0 | element]) + _put_varint(len(items))
        )
        if element in (1, 2):
            return header + bytes(1 if item else 2 for item in items)
        return header + b"".join(_put_value(element, item) for item in items)
    if kind == 12:
        return encode(value)
    raise ValueError(f"compact type {kind} is not written here")


def encode(fields: list[Field]) -> bytes:
    """The struct of ``fields``."""
    out = bytearray()
    last = 0
    for number, kind, value in fields:
        wire = (2 if value is False else 1) if kind in (1, 2) else kind
        delta = number - last
        out += bytes([(delta << 4) | wire]) if 0 < delta <= 15 else bytes([wire]) + _put_varint(_unzig(number))
        out += _put_value(kind, value)
        last = number
    out.append(0)
    return bytes(out)


def with_field(fields: list[Field], path: tuple[int, ...], change: Any) -> list[Field]:
    """``fields`` with the value at ``path`` (field ids; in a list, every item) replaced by ``change(value)``."""
    head, rest = path[0], path[1:]
    out = []
    for number, kind, value in fields:
        if number == head:
            if not rest:
                value = change(value)
            elif kind == 12:
                value = with_field(value, rest, change)
            elif kind in (9, 10):
                element, items = value
                value = (element, [with_field(item, rest, change) for item in items])
        out.append((number, kind, value))
    return out


def parquet_with_footer(data: bytes, path: tuple[int, ...], change: Any) -> bytes:
    """A Parquet file's bytes with one field of its footer (``FileMetaData``) changed (``path``: field ids, through
    lists: ``(4, 1, 3, 5)`` is every column chunk's ``num_values``)."""
    size = struct.unpack("<I", data[-8:-4])[0]
    footer = encode(with_field(decode(data[-8 - size : -8]), path, change))
    return data[: -8 - size] + footer + struct.pack("<I", len(footer)) + b"PAR1"
