"""Text rows through a tokenizer: a dependency-free :class:`ByteTokenizer`, and :func:`prepare`, a recipe's
tokenizer and padding id resolved once. ``load_tokenizer``, ``encode_rows`` and ``decode_documents`` are at the
top level (``packing``). Chat-template rendering, chat turn spans and encoding are internal modules.

>>> from packing.text import ByteTokenizer
>>> ByteTokenizer().encode("hi")
[104, 105]
"""

from packing.text._prepare import Prepared as Prepared
from packing.text._prepare import prepare as prepare
from packing.text._tokenizers import ByteTokenizer as ByteTokenizer

__all__ = [
    "ByteTokenizer",
    "Prepared",
    "prepare",
]
