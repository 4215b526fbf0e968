"""What a recipe needs before a door reads or fills: its tokenizer loaded and its pad id, once per recipe.

``Recipe`` is a pure value (it loads nothing); :func:`prepare` is the one place its tokenizer spec becomes a
tokenizer object and its padding id is chosen.

Internal: the public names are in ``packing`` and ``packing.text``.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass
from typing import Any

from packing.core.fingerprint import digest, tokenizer_fingerprint
from packing.core.validation import is_integer
from packing.recipe import Recipe
from packing.text.tokenizers import load_tokenizer


@dataclass(frozen=True)
class Prepared:
    """A recipe with its tokenizer loaded (None without one) and the id padding is filled with."""

    recipe: Recipe
    tokenizer: Any
    pad_id: int

    @functools.cached_property
    def fingerprint(self) -> str:
        """A digest of everything that decides the packed output: every option's value (``Recipe.describe``), the
        loaded tokenizer's content (``packing.core.fingerprint.tokenizer_fingerprint``: a tokenizer path whose
        files changed, or another object of the same name, gives another) and the pad id. What caches are keyed by.
        O(vocabulary) once.

        >>> prepare(Recipe(8, roles_to_train="user")).fingerprint == prepare(Recipe(8)).fingerprint
        False
        >>> prepare(Recipe(8, tokenizer="bytes")).fingerprint == prepare(Recipe(8, tokenizer="bytes")).fingerprint
        True
        """
        loaded = "none" if self.tokenizer is None else tokenizer_fingerprint(self.tokenizer)
        return digest("\n".join((self.recipe.describe(), loaded, str(self.pad_id))), 16)

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


@functools.lru_cache(maxsize=16)
def prepare(recipe: Recipe) -> Prepared:
    """``recipe`` with its tokenizer loaded (``packing.load_tokenizer`` of ``tokenizer`` with ``chat_template``)
    and its pad id: ``pad_token_id``, else the tokenizer's pad id, else its EOS id, else 0. The last few
    recipes are remembered, so a door may call this freely. O(loading the tokenizer) once, then O(1).

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
    tokenizer = (
        None if recipe.tokenizer is None else load_tokenizer(recipe.tokenizer, chat_template=recipe.chat_template)
    )
    return Prepared(recipe, tokenizer, _pad_id(recipe, tokenizer))
