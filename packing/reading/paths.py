"""The files a source's paths stand for, each real file once: a file met again through a link, a folder and a file in
it, or a path given twice is read once; a recursive glob through a symbolic link back to one of its folders is
refused, naming the link, before the glob follows it. Internal: :func:`packing.reading.files.resolve` uses it.
"""

from __future__ import annotations

import glob
import os
import re
from pathlib import Path
from typing import Any, TypeVar

from packing.errors import DatasetError

F = TypeVar("F", bound=Any)

_MAGIC = re.compile(r"[*?[]")


def once(files: list[F]) -> list[F]:
    """``files`` (:class:`packing.reading.files.File`, in reading order) with each real file once: the first of the paths that lead to it (two names
    for one file, a folder and a file in it, a link). A recursive glob through a symbolic link back to one of its
    folders (``sub/up -> ..``) is refused, naming the link (:func:`refuse_cycles`). O(files).

    >>> import os, tempfile
    >>> folder = tempfile.mkdtemp()
    >>> _ = open(os.path.join(folder, "a.jsonl"), "w").write("[1]\\n")
    >>> os.symlink(folder, os.path.join(folder, "up"))
    >>> from packing.reading.files import resolve
    >>> [os.path.relpath(f.label, folder) for f in resolve([folder, os.path.join(folder, "a.jsonl")]).files]
    ['a.jsonl']
    >>> resolve(os.path.join(folder, "**", "*.jsonl"))
    Traceback (most recent call last):
    ...
    packing.errors.DatasetError: .../**/*.jsonl: a symbolic link cycle: .../up leads back to ..., so the same files would be found again and again; remove the link or match without it
    """
    kept: dict[str, F] = {}
    for file in files:
        if not isinstance(file.source, (str, os.PathLike)):
            return files
        real = os.path.realpath(file.source)
        kept.setdefault(real, file)
    return list(kept.values())


def refuse_cycles(pattern: str) -> None:
    """Refuse a recursive glob (a ``**`` part) whose folders hold a symbolic link back to a folder it is in
    (``sub/up -> ..``): the glob would follow it 40 levels deep, and through two such links in 2**40 ways, finding
    the same files again and again. The folders ``**`` walks (not hidden ones, as the glob) are walked once
    first, each real folder at most once on a path. O(folders × depth)."""
    parts = Path(pattern).parts
    if "**" not in parts:
        return
    head = os.path.join(*parts[: parts.index("**")]) if parts.index("**") else os.curdir
    for root in sorted(glob.glob(head)) if _MAGIC.search(head) else [head]:
        stack: list[tuple[str, dict[str, str]]] = [(root, {os.path.realpath(root): root})]
        while stack:
            folder, above = stack.pop()
            try:
                entries = sorted(os.scandir(folder), key=lambda found: found.name, reverse=True)  # popped in order
            except OSError:
                continue
            for entry in entries:
                try:
                    inside = not entry.name.startswith(".") and entry.is_dir()
                except OSError:
                    continue
                if not inside:
                    continue
                real = os.path.realpath(entry.path)
                if real in above:
                    reason = (
                        f"a symbolic link cycle: {entry.path} leads back to {above[real]}, so the same files would "
                        "be found again and again; remove the link or match without it"
                    )
                    raise DatasetError(pattern, None, reason)
                stack.append((entry.path, {**above, real: entry.path}))
