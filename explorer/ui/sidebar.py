"""The sidebar: where the data comes from and the packing settings, every choice bound to the page's URL with
Streamlit's own ``bind="query-params"`` (widget key = parameter name, today's names). Returns a ``Source`` and the
``packing.Recipe`` the choices make (the library checks it once; a choice it refuses is one short line)."""

from __future__ import annotations

import contextlib
from collections.abc import Sequence
from typing import Any, Literal

import streamlit as st

import packing
import packing.core
import packing.reading
import packing.recipe
import packing.strategies
from explorer.core import links
from explorer.core import runs as compute
from explorer.core.examples import DEFAULT_EXAMPLE, DISTRIBUTIONS, EXAMPLES, suggested_max_seq_length, workload_info
from explorer.core.model import (
    MAX_PAD_TOKEN_ID,
    MAX_SEED,
    MAX_SEQUENCES,
    MAX_UPLOAD_MB,
    seq_length_problem,
)
from explorer.core.parsing import FORMAT_HELP, InputError
from explorer.core.safety import describe, escape
from explorer.core.sources import (
    DATA_STRATEGY,
    DEFAULT_TEXT_ROWS,
    DEFAULT_TOKENIZER,
    EXAMPLE_STRATEGY,
    MAX_URL_TEXT,
    SOURCES,
    TEXT_MAX_SEQ_LENGTH,
    Paste,
    Source,
    Synthetic,
    Text,
    Upload,
    Workload,
    default_sample,
)
from explorer.core.text import EXAMPLE_TITLES, PREFERENCE_MAX_SEQ_LENGTH, example_text
from explorer.server import cache
from explorer.ui import page
from packing._workloads import WORKLOADS
from packing.core._loss import DEFAULT_ROLES, EOS_RULES
from packing.core._validation import MAX_SEQ_LENGTH
from packing.reading._files import extensions, listed

BIND: Literal["query-params"] = "query-params"
DEFAULT_TEXT = EXAMPLES[DEFAULT_EXAMPLE].text
DEFAULT_WORKLOAD = "openchat_v1_2048"
ORDER = {
    "input": "in input order",
    "longest_first": "longest first (equal lengths in input order)",
    "random": "in a random order drawn from the shuffle seed",
}
LOSS = {"completion": "assistant turns, completions", "last_turn": "the last assistant turn", "all": "every token"}
"""The ``loss`` control's captions (the rules are the library's: ``packing.recipe.LOSS_RULES``)."""
EOS = {
    "turn": "the end-of-turn tokens of every trained turn are trained",
    "last": "only the last trained turn's end-of-turn tokens are trained",
    "all": "every turn's end-of-turn tokens are trained, trained turn or not",
    "none": "no end-of-turn token is trained",
}
"""The ``train_on_eos`` control's words (the rules are the library's: ``packing.core._loss.EOS_RULES``)."""
PLAIN_ROLES = frozenset({"system", "user", "assistant"})
"""Roles every chat has: the roles control is offered when pasted chats have others (tool, ...)."""
STRATEGY_DEFAULTS = (
    f"Starts with `{EXAMPLE_STRATEGY}` on the pasted examples (the classic answer's plan) and `{DATA_STRATEGY}` "
    "on every data source (text rows, synthetic, distributions, files), as the library and the command line do."
)


def _forget_link_value(name: str) -> None:
    """Remove ``name`` from the address (public ``st.query_params``, before any widget binds it); its widget
    is not bound for this session (``_bind``), so it never reads the value."""
    with contextlib.suppress(Exception):  # already gone, or already bound (Streamlit then owns it)
        del st.query_params[name]


def _bind(key: str, default: Any) -> Literal["query-params"] | None:
    """The widget ``key``, starting at ``default``, bound to the address (Streamlit keeps its value there when it
    is not the default), unless this session's link carried a value the page dropped: Streamlit seeds a bound
    widget from the link as the session opened (a value like ``inf`` would stop the page), so that widget starts
    from its default, unbound, for the session. The default is noted for this run's share link (``share_params``),
    which reads the values where Streamlit keeps them (``st.session_state``)."""
    st.session_state.setdefault("_link_defaults", {})[key] = default
    return None if key in st.session_state.get("_unbound", ()) else BIND


def check_link(tabs: Sequence[str]) -> None:
    """On a session's first run: drop (and report) link parameters no widget can use, a ``tab`` none of ``tabs``
    and names the page does not read; read the pasted text."""
    if st.session_state.get("_link_checked"):
        return
    st.session_state["_link_checked"] = True
    params: dict[str, str | list[str]] = dict(st.query_params.to_dict())  # a repeated name's last value
    for name, rule in links.PARAMS.items():
        if isinstance(rule, links.Names) and name in params:
            params[name] = st.query_params.get_all(name)  # every value of a multiselect's repeated name is checked
    drop, warnings = links.check_link(params, tabs)
    st.session_state["_unbound"] = frozenset(drop)
    for name in drop:
        _forget_link_value(name)
    st.session_state["_link_warnings"] = warnings
    st.session_state["sequences"] = params.get("sequences", DEFAULT_TEXT)
    example = next((k for k, e in EXAMPLES.items() if e.text == st.session_state["sequences"]), None)
    st.session_state["example"] = example or DEFAULT_EXAMPLE


def _load_example() -> None:
    example = EXAMPLES[st.session_state.get("example", DEFAULT_EXAMPLE)]
    st.session_state.update(
        sequences=example.text,
        max_seq_length=example.max_seq_length,
        strategy=example.strategy,
        loss=example.loss,
        share_prompt=example.share_prompt,
    )


def open_example(key: str) -> None:
    """A follow-up's one-click link (a button's callback): the pasted example ``key`` loaded with its settings, on
    the tab that shows its point."""
    st.session_state["source"] = "paste"
    st.session_state["example"] = key
    _load_example()
    st.session_state["tab"] = EXAMPLES[key].look_at


def _source_changed() -> None:
    """Back to a source used before: its own max_seq_length again. A new one: a size that fits its data."""
    source, previous = st.session_state["source"], st.session_state.get("_source_shown")
    if previous:
        st.session_state[f"_max_seq_length_{previous}"] = st.session_state.get("max_seq_length")
        st.session_state[f"_strategy_{previous}"] = st.session_state.get("strategy")
    st.session_state["strategy"] = st.session_state.get(f"_strategy_{source}") or SOURCES[source].default_strategy
    remembered = st.session_state.get(f"_max_seq_length_{source}")
    if remembered is not None:
        st.session_state["max_seq_length"] = remembered
    elif source == "synthetic":
        st.session_state["max_seq_length"] = int(st.session_state.get("max_length", 2048))
    elif source == "workload":
        _workload_changed()
    elif source == "paste" and st.session_state.get("sequences") in {e.text for e in EXAMPLES.values()}:
        _load_example()
    elif source == "text":
        st.session_state["_text_shown"] = True
        _load_text_example(rows=False)


def _workload_changed() -> None:
    """Use the distribution's own max_seq_length, and a sample of a very large one."""
    name = st.session_state.get("workload", DEFAULT_WORKLOAD)
    st.session_state["max_seq_length"] = workload_info(name).max_seq_length
    st.session_state["sample"] = default_sample(name)


def _paste_inputs() -> Paste:
    st.selectbox(
        "Load an example",
        list(EXAMPLES),
        key="example",
        format_func=lambda k: EXAMPLES[k].title,
        on_change=_load_example,
        persist_state="session",
    )
    example = EXAMPLES[st.session_state["example"]]
    if st.session_state.get("sequences", "") == example.text:
        st.caption(f"{example.question} Look at the **{example.look_at}** tab.")
    else:
        st.caption("Your own sequences. Pick an example above to load it and its settings.")
    text = st.text_area("Sequences", key="sequences", height=140, help=FORMAT_HELP, persist_state="session")
    if len(text) > MAX_URL_TEXT:
        st.caption(
            f"This text is longer than a link carries ({MAX_URL_TEXT:,} characters): the link shares the settings only."
        )
    return Paste(text)


def _load_text_example(rows: bool = True) -> None:
    """The chosen text example (``rows``: its text too) with blocks narrow enough to print every token, and
    over-long rows split across blocks so the whole conversation is seen."""
    example = st.session_state.get("text_example", "chats")
    if rows:
        st.session_state["text_rows"] = example_text(example)
    if example == "preference":  # a pair is never split: kept whole, its completions cut if need be
        st.session_state.update(max_seq_length=PREFERENCE_MAX_SEQ_LENGTH, overflow="truncate")
        return
    st.session_state.update(max_seq_length=TEXT_MAX_SEQ_LENGTH, overflow="split")


def _text_inputs() -> Text:
    st.selectbox(
        "Load an example",
        list(EXAMPLE_TITLES),
        index=list(EXAMPLE_TITLES).index("chats"),
        key="text_example",
        format_func=lambda k: EXAMPLE_TITLES[k],
        on_change=_load_text_example,
        persist_state="session",
    )
    st.session_state.setdefault("text_rows", DEFAULT_TEXT_ROWS)
    if not st.session_state.get("_text_shown"):  # opened on this source (a link): the example's settings
        st.session_state["_text_shown"] = True
        if "max_seq_length" not in st.query_params and "overflow" not in st.query_params:
            _load_text_example(rows=False)
    text = st.text_area(
        "Text rows",
        key="text_rows",
        height=160,
        persist_state="session",
        help='One JSON object per line: {"text": ...}, {"prompt": ..., "completion": ...}, {"messages": '
        '[{"role": ..., "content": ...}, ...]}, a preference pair {"prompt": ..., "chosen": ..., "rejected": ...} or '
        'a group {"prompt": ..., "completions": [...]}. Plain text (not JSON) is one text row.',
    )
    tokenizer = _tokenizer_input()
    st.caption("Chats are rendered with the tokenizer's chat template; the loss settings below say what is trained.")
    return Text(str(text), tokenizer)


def _tokenizer_input(note: str = "") -> str:
    """The tokenizer of text rows (one widget, ``tokenizer`` in the link, for pasted text and uploaded files)."""
    tokenizer = st.text_input(
        "Tokenizer",
        value=DEFAULT_TOKENIZER,
        key="tokenizer",
        bind=_bind("tokenizer", DEFAULT_TOKENIZER),
        help="bytes: the built-in UTF-8 byte tokenizer (ids 0-255 are bytes, then special tokens). With transformers "
        "installed: the name of a tokenizer folder the server's operator offers (PACKING_EXPLORER_TOKENIZERS); "
        "nothing is downloaded and no other path is read." + note,
    )
    return str(tokenizer)


def _synthetic_inputs() -> Synthetic:
    count = st.number_input(
        "Sequences",
        value=10_000,
        min_value=1,
        max_value=MAX_SEQUENCES,
        step=1000,
        key="count",
        bind=_bind("count", 10_000),
    )
    names = list(DISTRIBUTIONS)
    dist = st.selectbox("Length distribution", names, key="distribution", bind=_bind("distribution", names[0]))
    st.caption(DISTRIBUTIONS[dist])
    seed = st.number_input("Seed", value=0, min_value=0, max_value=MAX_SEED, step=1, key="seed", bind=_bind("seed", 0))
    longest = st.number_input(
        "Longest length",
        value=2048,
        min_value=1,
        max_value=MAX_SEQ_LENGTH,
        step=256,
        key="max_length",
        bind=_bind("max_length", 2048),
    )
    return Synthetic(int(count), str(dist), int(seed), int(longest))


def _workload_inputs() -> Workload:
    name = st.selectbox(
        "Distribution",
        list(WORKLOADS),
        index=list(WORKLOADS).index(DEFAULT_WORKLOAD),
        key="workload",
        on_change=_workload_changed,
        bind=_bind("workload", DEFAULT_WORKLOAD),
    )
    st.caption(workload_info(name).title)
    total = workload_info(name).sequences
    count = st.number_input(
        "Sequences to use (0 = all)",
        value=default_sample(name),
        min_value=0,
        max_value=100_000_000,
        step=10_000,
        key="sample",
        bind=_bind("sample", default_sample(name)),
        help=f"This distribution has {total:,} sequences. All of them are used in the file's order (as `packing "
        f"compare` reads them); fewer are a seeded random sample. The page works with up to {MAX_SEQUENCES:,} at a time.",
    )
    source = Workload(str(name), int(count))
    if (total if count == 0 else min(int(count), total)) > MAX_SEQUENCES:
        st.warning(
            f"That is more sequences than this page handles at once ({MAX_SEQUENCES:,}); using a random sample of "
            f"{MAX_SEQUENCES:,}. The Export tab's snippet packs all of them with the library."
        )
    return source


def _upload_inputs() -> Upload | None:
    file = st.file_uploader(
        f"A {listed()} file",
        type=extensions(),
        help="Columns or keys: input_ids (optionally loss_mask, or labels with -100), prompt and completion, or length "
        f"(lengths only). Up to {MAX_UPLOAD_MB} MB and {MAX_SEQUENCES:,} sequences.",
    )
    tokenizer = _tokenizer_input(
        " Used only when the file holds text, prompt/completion text or chats; token files are read as they are."
    )
    if file is None:
        return None
    source = Upload.of(file.name, file.getvalue(), tokenizer)
    if st.session_state.get("_upload_seen") != source.cache_key:
        # a new file: size the blocks to its longest sequence (the user can change it afterwards)
        st.session_state["_upload_seen"] = source.cache_key
        try:
            with page.reading(source.reading()):
                data = cache.dataset(source, _reading_value())
        except InputError:
            return source  # the page reports the problem
        if data.sequences:
            longest = int(data.lengths.max())
            st.session_state["max_seq_length"] = suggested_max_seq_length(longest, MAX_SEQ_LENGTH)
    return source


def _reading_value() -> packing.Recipe:
    """The recipe an upload is read with: the loss rules chosen on the last run (the upload is read before the
    controls are drawn), the library's defaults if they are refused."""
    state = st.session_state
    try:
        return packing.Recipe.for_reading(
            loss=state.get("loss", "completion"),
            roles_to_train=tuple(state.get("roles_to_train") or DEFAULT_ROLES),
            train_on_eos=state.get("train_on_eos", "turn"),
        )
    except packing.SettingError:
        return packing.Recipe.for_reading()


def _recipe(source: Source | None) -> tuple[packing.Recipe, str]:
    """The packing controls, and the ``packing.Recipe`` they make with why it cannot be used ('' when it can): an
    out-of-range ``max_seq_length`` is said in the page's words and planned as 1 meanwhile; any other choice the
    recipe refuses is its ``SettingError`` in one short line, with the library's defaults standing in."""
    st.header("Settings")
    default = source.default_max_seq_length() if source is not None else 4
    size = st.number_input(
        "max_seq_length",
        value=default,
        step=1,
        key="max_seq_length",
        bind=_bind("max_seq_length", default),
        help=f"Tokens per block: a whole number from 1 to {MAX_SEQ_LENGTH:,}.",
    )
    problem = seq_length_problem(size) or ""
    if problem:
        st.error(problem)
    first = source.default_strategy if source is not None else DATA_STRATEGY
    names = list(packing.strategies.STRATEGIES)
    strategy = st.selectbox("Strategy", names, index=names.index(first), key="strategy", bind=_bind("strategy", first))
    info = packing.strategies.STRATEGIES[strategy]
    st.caption(f"**{info.title}.** {info.description} Places documents {ORDER[info.order]}. Cost: {info.complexity}.")
    if info.warning:  # the auditor's finding about its blocks (the registry's), where it is chosen
        st.warning(info.warning)
    st.caption(STRATEGY_DEFAULTS)
    options = _strategy_options(info)
    policies = list(packing.recipe.OVERFLOW_POLICIES)
    overflow = st.selectbox("Over-long sequences", policies, key="overflow", bind=_bind("overflow", policies[0]))
    st.caption(f"**{overflow}**: {packing.recipe.OVERFLOW_POLICIES[overflow]}.")
    share = _share_prompt_input(source)
    pad = st.number_input(
        "Pad token id",
        value=None,
        min_value=0,
        max_value=MAX_PAD_TOKEN_ID,
        step=1,
        key="pad_token_id",
        bind=_bind("pad_token_id", None),
        placeholder="library's rule",
        help="Empty: the library's rule (packing.pack, the command line): the tokenizer's pad id (its end-of-text id "
        "when it has none; 257 for bytes), 0 for token ids. A number: that id.",
    )
    rules = _loss_inputs(source)
    valid = int(size) if not problem else 1
    try:
        recipe = packing.Recipe.of(
            None,
            valid,
            strategy=str(strategy),
            overflow=str(overflow),
            pad_token_id=None if pad is None else int(pad),
            share_prompt=share,
            **rules,
            **options,
        )
    except packing.SettingError as error:
        refused = describe(error)
        st.error(escape(refused))
        return packing.Recipe(valid), problem or refused
    return recipe, problem


def _share_prompt_input(source: Source | None) -> bool:
    """The recipe's ``share_prompt``: how preference pairs and completion groups are laid out (data with tokens;
    lengths-only data has no prompt to share)."""
    if source is not None and not source.has_tokens:
        return False
    return bool(
        st.toggle(
            "Share the prompt (share_prompt)",
            value=False,
            key="share_prompt",
            bind=_bind("share_prompt", False),
            help="For preference pairs ({prompt, chosen, rejected}) and completion groups ({prompt, completions}). "
            "Off: each completion is its own document, the prompt before it (the layout TRL uses). On: the prompt "
            "is stored once and each completion follows it, attending to its prompt and itself, never to a "
            "sibling (an attention mask says so). Plain sequences are packed the same either way.",
        )
    )


def _loss_inputs(source: Source | None) -> dict[str, Any]:
    """What is trained, shown where it applies: the ``loss`` rule for data with tokens (pasted tokens, text rows,
    files), whose end-of-turn tokens are trained and which roles for text and chat rows, as the recipe's options
    (``loss``, ``roles_to_train``, ``train_on_eos``; the recipe checks them). Lengths-only data trains nothing, so it
    keeps the defaults."""
    if source is not None and not source.has_tokens:
        return {}
    names = list(packing.recipe.LOSS_RULES)
    loss = st.radio(
        "Loss on",
        names,
        captions=[LOSS[name] for name in names],
        key="loss",
        bind=_bind("loss", names[0]),
        help=" ".join(f"**{name}**: {words}." for name, words in packing.recipe.LOSS_RULES.items()),
    )
    if isinstance(source, Paste):
        st.caption(
            "Token rows keep their own loss_mask; a prompt/completion pair's prompt is trained only under all "
            "(last_turn is completion here: token rows have no turns)."
        )
        return {"loss": loss}
    eos = st.selectbox(
        "End-of-turn tokens trained",
        list(EOS_RULES),
        key="train_on_eos",
        bind=_bind("train_on_eos", next(iter(EOS_RULES))),
        disabled=loss == "all",
        help=" ".join(f"**{name}**: {words}." for name, words in EOS_RULES.items()),
    )
    st.caption(f"**{eos}**: {EOS[eos]}." if loss != "all" else "Under loss all every token is trained.")
    return {"loss": loss, "roles_to_train": _roles_input(source), "train_on_eos": eos}


def _roles_input(source: Source | None) -> tuple[str, ...]:
    """Which roles' turns are trained: a choice among the pasted chats' roles (or any typed), offered when they
    have roles other than system, user and assistant, when a link chose others, and for files."""
    seen = source.roles() if isinstance(source, Text) else ()
    chosen = st.session_state.get("roles_to_train") or st.query_params.get_all("roles_to_train") or DEFAULT_ROLES
    shown = isinstance(source, Upload | None) or set(seen) - PLAIN_ROLES or list(chosen) != list(DEFAULT_ROLES)
    if not shown:
        return DEFAULT_ROLES
    roles = st.multiselect(
        "Roles trained",
        list(dict.fromkeys([*DEFAULT_ROLES, *seen, *chosen])),
        default=list(DEFAULT_ROLES),
        key="roles_to_train",
        bind=_bind("roles_to_train", list(DEFAULT_ROLES)),
        accept_new_options=True,
        help="The turns of these roles are trained (roles_to_train); type a role to add it.",
    )
    if not roles:
        st.warning("No role chosen: the assistant's turns are trained.")
        return DEFAULT_ROLES
    return tuple(str(role) for role in roles)


def _strategy_options(info: packing.strategies.Strategy) -> dict[str, int]:
    """Widgets for the options the chosen strategy accepts (``Strategy.options``), as the recipe's options; an
    option left at 0 where 0 means "no cap" is not passed."""
    widgets = (  # option, label, default, smallest, largest, help
        ("seed", "Shuffle seed", 0, 0, MAX_SEED, None),
        (
            "time_limit",
            "Time limit (s)",
            compute.PAGE_TIME_LIMIT,
            1,
            600,
            "After this long the search returns its best plan with a certified gap to the optimum.",
        ),
        ("max_sequences_per_block", "Most sequences per block (0 = no cap)", 0, 0, MAX_SEQUENCES, None),
    )
    options: dict[str, int] = {}
    for name, label, default, smallest, largest, help in widgets:
        if name not in info.options:
            continue
        key = "strategy_seed" if name == "seed" else name
        value = st.number_input(
            label,
            value=default,
            min_value=smallest,
            max_value=largest,
            step=1,
            key=key,
            bind=_bind(key, default),
            help=help,
        )
        if value or name != "max_sequences_per_block":
            options[name] = int(value)
    return options


def render() -> tuple[Source | None, packing.Recipe, str]:
    """Draw the sidebar; return the source (None before a file is uploaded), the recipe of the choices, and why
    it cannot be used (empty when it can)."""
    st.session_state["_link_defaults"] = {}  # the bound widgets of this run (``_bind``)
    with st.sidebar:
        st.header("Data")
        kind = st.radio(
            "Source",
            list(SOURCES),
            captions=[s.title for s in SOURCES.values()],
            key="source",
            on_change=_source_changed,
            bind=_bind("source", next(iter(SOURCES))),
        )
        st.session_state["_source_shown"] = kind
        source: Source | None
        if kind == "paste":
            source = _paste_inputs()
        elif kind == "text":
            source = _text_inputs()
        elif kind == "synthetic":
            source = _synthetic_inputs()
        elif kind == "workload":
            source = _workload_inputs()
        else:
            source = _upload_inputs()
        recipe, problem = _recipe(source)
        st.caption("The page's address keeps these choices: copy it to share this view.")
    _sync_sequences(source)
    return source, recipe, problem


def _sync_sequences(source: Source | None) -> None:
    """Keep short pasted text in the address (``sequences``, as links always had it); drop long text."""
    text = st.session_state.get("sequences", DEFAULT_TEXT)
    wanted = isinstance(source, Paste) and text != DEFAULT_TEXT and len(text) <= MAX_URL_TEXT
    current = st.query_params.get("sequences")
    if wanted and current != text:
        st.query_params["sequences"] = text
    elif not wanted and current is not None:
        del st.query_params["sequences"]


def share_params(source: Source | None) -> dict[str, str | list[str]]:
    """The query parameters of a link that reopens this view on the Result tab: every bound choice that differs
    from its default, and pasted text short enough for a link."""
    params: dict[str, str | list[str]] = {}
    for key, default in st.session_state.get("_link_defaults", {}).items():
        value = st.session_state.get(key)
        if value is None or value == default or value == []:
            continue
        params[key] = [str(v) for v in value] if isinstance(value, list) else str(value)
    if isinstance(source, Paste) and source.text != DEFAULT_TEXT and source.in_link:
        params["sequences"] = source.text
    return params
