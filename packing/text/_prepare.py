"""What a recipe needs before a door reads or fills: its tokenizer loaded and its pad id, once per recipe.

``Recipe`` is a pure value (it loads nothing); :func:`prepare` is the one place its tokenizer spec becomes a
tokenizer object and its padding id is chosen.

Internal: the public names are in ``packing`` and ``packing.text``.
"""

from __future__ import annotations

import functools
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from packing.core._fingerprint import digest, tokenizer_fingerprint
from packing.core._validation import is_integer
from packing.recipe import Recipe
from packing.text._tokenizers import load_tokenizer


@dataclass(frozen=True)
class Prepared:
    """A recipe with its tokenizer loaded (None without one) and the id padding is filled with."""

    recipe: Recipe
    tokenizer: Any
    pad_id: int

    @property
    def description(self) -> str:
        """What a saved state (a stream's, a sampler's) is checked against: ``Recipe.describe()`` and, with a
        tokenizer, ``tokenizer_content=`` a digest of the loaded tokenizer (its files or its template may change
        under the same path). O(vocabulary) once.

        >>> prepare(Recipe(8, tokenizer="bytes")).description  # doctest: +ELLIPSIS
        'max_seq_length=8, tokenizer=bytes, tokenizer_content=...'
        """
        if self.tokenizer is None:
            return self.recipe.describe()
        return f"{self.recipe.describe()}, tokenizer_content={self._tokenizer_print[:8]}"

    @functools.cached_property
    def _tokenizer_print(self) -> str:
        return "none" if self.tokenizer is None else tokenizer_fingerprint(self.tokenizer)

    @functools.cached_property
    def fingerprint(self) -> str:
        """A digest of everything that decides the packed output: every option's value (``Recipe.describe``), the
        loaded tokenizer's content (``packing.core._fingerprint.tokenizer_fingerprint``: a tokenizer path whose
        files changed, or another object of the same name, gives another) and the pad id. What caches are keyed by.
        O(vocabulary) once.

        >>> prepare(Recipe(8, roles_to_train="user")).fingerprint == prepare(Recipe(8)).fingerprint
        False
        >>> prepare(Recipe(8, tokenizer="bytes")).fingerprint == prepare(Recipe(8, tokenizer="bytes")).fingerprint
        True
        """
        return digest("\n".join((self.recipe.describe(), self._tokenizer_print, str(self.pad_id))), 16)

    @property
    def read_options(self) -> dict[str, Any]:
        """The reader's keywords (``packing.read_rows``, ``packing.reading.read_table``): what the recipe says about
        reading rows (the loss rules, the loaded tokenizer, the processes, the layout of pairs and groups).

        >>> sorted(prepare(Recipe(8, loss="all")).read_options)
        ['loss_rules', 'num_proc', 'share_prompt', 'tokenizer']
        """
        recipe = self.recipe
        return {
            "tokenizer": self.tokenizer,
            "loss_rules": recipe.loss_rules,
            "num_proc": recipe.num_proc,
            "share_prompt": recipe.share_prompt,
        }


def _pad_id(recipe: Recipe, tokenizer: Any) -> int:
    if recipe.pad_token_id is not None:
        return recipe.pad_token_id
    for name in ("pad_token_id", "eos_token_id"):
        value = getattr(tokenizer, name, None)
        if isinstance(value, list):  # some configs list several EOS ids
            value = value[0] if value else None
        if is_integer(value) and value >= 0:
            return int(value)
    return 0


def prepare(recipe: Recipe) -> Prepared:
    """``recipe`` with its tokenizer loaded (``packing.load_tokenizer`` of ``tokenizer`` with ``chat_template``)
    and its pad id: ``pad_token_id``, else the tokenizer's pad id, else its EOS id, else 0. The last few
    recipes are remembered, so a door may call this freely; a remembered one is loaded again when what it was
    loaded from changed (:func:`_stamp`: a tokenizer folder's or a template file's files, a tokenizer object's
    template, special tokens or size). O(loading the tokenizer) once, then O(files of the spec).

    >>> prepare(Recipe(8)).pad_id
    0
    >>> prepare(Recipe(8, tokenizer="bytes")).pad_id  # the byte tokenizer's own pad id, not the NUL byte
    257
    >>> prepare(Recipe(8, pad_token_id=7, tokenizer="bytes")).pad_id
    7
    """
    if not isinstance(recipe, Recipe):
        from packing.errors import SettingError

        raise SettingError("recipe", "a packing.Recipe", recipe)
    return _prepare(recipe, _stamp(recipe))


@functools.lru_cache(maxsize=16)
def _prepare(recipe: Recipe, stamp: tuple[Any, ...]) -> Prepared:
    """:func:`prepare`'s loading, remembered per recipe and :func:`_stamp` (``stamp`` is only the cache's key)."""
    del stamp
    tokenizer = (
        None if recipe.tokenizer is None else load_tokenizer(recipe.tokenizer, chat_template=recipe.chat_template)
    )
    return Prepared(recipe, tokenizer, _pad_id(recipe, tokenizer))


def _stamp(recipe: Recipe) -> tuple[Any, ...]:
    """What tells whether a remembered recipe's tokenizer is still what it would load now: the size and modification
    time of the files of a tokenizer path and a template path (a folder's files, not its subfolders), and for a
    tokenizer object its size, template and special-token ids (what ``add_tokens`` and a new ``chat_template``
    change). Cheap: O(files) ``stat`` calls, no reading.

    >>> _stamp(Recipe(8)), _stamp(Recipe(8, tokenizer="bytes"))
    ((None, None), (None, None))
    """
    spec, template = recipe.tokenizer, recipe.chat_template
    tokenizer = _object_stamp(spec) if spec is not None and not isinstance(spec, (str, os.PathLike)) else _files(spec)
    is_text = isinstance(template, str) and ("{{" in template or "{%" in template)
    return tokenizer, None if is_text else _files(template)


def _files(spec: Any) -> Any:
    """``(name, size, mtime)`` of a path's file, or of each file of a folder; None for no path (a hub name)."""
    if not isinstance(spec, (str, os.PathLike)):
        return None
    try:
        path = Path(os.fspath(spec)).expanduser()
        if not path.is_dir():
            status = path.stat()
            return (status.st_size, status.st_mtime_ns)
        entries = sorted(os.scandir(path), key=lambda entry: entry.name)
        return tuple((e.name, e.stat().st_size, e.stat().st_mtime_ns) for e in entries if e.is_file())
    except OSError:  # not a path: a hub name, or "bytes"
        return None


def _object_stamp(tokenizer: Any) -> tuple[Any, ...]:
    """A tokenizer object's identity and what changes it cheaply: its size, template and special-token ids."""
    try:
        size = len(tokenizer)
    except TypeError:
        size = None
    template = getattr(tokenizer, "chat_template", None)
    ids = tuple(getattr(tokenizer, f"{name}_token_id", None) for name in ("bos", "eos", "pad", "unk"))
    return (id(tokenizer), size, template if isinstance(template, str) else repr(template), repr(ids))
