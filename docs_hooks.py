"""MkDocs hooks for the documentation site (``mkdocs.yml`` names this file twice).

- ``on_files``: the measurement files of ``benchmarks/`` join the site under ``benchmarks/`` as they are, so the
  pages link to them instead of copying their numbers (``benchmarks/README.md`` becomes ``benchmarks/methods.md``).
- ``Doctests``: a griffe extension for the reference pages. The library's docstrings are written for ``pydoc`` and
  doctest: ``>>>`` examples become ``pycon`` code blocks (Markdown would read ``>>>`` as quotes), Sphinx roles such as
  ``:class:`~packing.Recipe``` become code, and a paragraph's closing ``::`` a colon.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import griffe
from mkdocs.config.defaults import MkDocsConfig
from mkdocs.structure.files import File, Files

BENCHMARKS = Path(__file__).parent / "benchmarks"
ROLE = re.compile(r":(?:class|func|meth|attr|data|mod|exc|obj):`~?(?:[\w.]*\.)?(\w+)`")


def on_files(files: Files, config: MkDocsConfig) -> Files:
    """Add ``benchmarks/*.md`` to the site's files."""
    for path in sorted(BENCHMARKS.glob("*.md")):
        name = "methods.md" if path.name == "README.md" else path.name
        files.append(File.generated(config, f"benchmarks/{name}", abs_src_path=str(path)))
    return files


def fence_doctests(text: str) -> str:
    """``text`` with every run of doctest lines (from ``>>>`` to the next blank line) fenced as ``pycon``.

    >>> fence_doctests("Adds.\\n\\n>>> 1 + 1\\n2\\n\\nSee :class:`~packing.Recipe`::").splitlines()
    ['Adds.', '', '```pycon', '>>> 1 + 1', '2', '```', '', 'See `Recipe`:']
    """
    out: list[str] = []
    fence: str | None = None
    for line in text.splitlines():
        stripped = line.lstrip()
        if fence is None and stripped.startswith(">>>"):
            fence = line[: len(line) - len(stripped)]
            out.append(f"{fence}```pycon")
        elif fence is not None and not stripped:
            out.append(f"{fence}```")
            fence = None
        out.append(line if fence is not None else ROLE.sub(r"`\1`", re.sub(r"(\S)::$", r"\1:", line)))
    if fence is not None:
        out.append(f"{fence}```")
    return "\n".join(out)


class Doctests(griffe.Extension):
    """Fence the doctests of every docstring griffe loads (see :func:`fence_doctests`)."""

    def on_instance(self, *, obj: griffe.Object, **kwargs: Any) -> None:
        if obj.docstring is not None:
            obj.docstring.value = fence_doctests(obj.docstring.value)
