"""``python -m packing``: the command line (see ``packing._cli``).

>>> from packing._cli import main
>>> main(["pack", "data.jsonl", "--max-seq-length", "0", "--strategy", "bfd", "--output", "out.parquet"])
2

Internal: run ``python -m packing``.
"""

from packing._cli import main

if __name__ == "__main__":
    raise SystemExit(main())
