"""Reading rows: the one reader of rows (Python rows, Arrow tables and record batches, CSV cells), the one
file reader, read limits, and ``read_dataset``. Internal: the public names are in ``packing``.
"""
