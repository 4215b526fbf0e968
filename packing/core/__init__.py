"""The values every layer shares: samples (flat tokens, masks, offsets), row forms, loss rules, argument checks
and array helpers. Imports nothing of the library but ``packing.errors``. Internal: the public names are in ``packing``.
"""
