"""Packed arrays: ``pack`` and ``materialize`` turn a plan and samples into a ``PackedBatch``; the output schema
(``COLUMNS``) and the classic ``pack_sequences``. Internal: the public names are in ``packing``.
"""
