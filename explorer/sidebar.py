"""The sidebar: where the data comes from and the packing settings. Returns what the user chose."""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from typing import Any

import streamlit as st

import packing
from explorer import cache, state
from explorer.data import MAX_UPLOAD_MB
from explorer.examples import DEFAULT_EXAMPLE, DISTRIBUTIONS, EXAMPLES, suggested_max_seq_length, workload_info
from explorer.parsing import FORMAT_HELP, InputError
from packing.workloads import WORKLOADS

MAX_WORKLOAD_SEQUENCES = 1_000_000
DEFAULT_WORKLOAD_SAMPLE = 200_000
"""Sequences used by default from a distribution larger than this (0 = all for smaller ones)."""


@dataclass(frozen=True)
class Settings:
    """How to pack."""

    max_seq_length: int
    strategy: str
    overflow: str
    pad_token_id: int
    completion_only: bool

    def key(self) -> str:
        return f"{self.max_seq_length}|{self.strategy}|{self.overflow}|{self.pad_token_id}|{self.completion_only}"


@dataclass(frozen=True)
class Choice:
    """The data specification (hashable), uploaded bytes if any, and the settings."""

    spec: tuple[Any, ...] | None
    upload: bytes | None
    settings: Settings


def restore_from_url() -> None:
    """On a session's first run, put URL parameters into the widgets (and say what was ignored).

    Every run also re-assigns the choices, so a widget that is hidden for a while (another data
    source) keeps its value instead of being reset.
    """
    if st.session_state.get("_restored"):
        for key in (*state.DEFAULTS, "example"):
            if key in st.session_state:
                st.session_state[key] = st.session_state[key]
        return
    st.session_state["_restored"] = True
    for key, value in state.DEFAULTS.items():
        st.session_state.setdefault(key, value)
    restored = state.read_params(st.query_params.to_dict())
    st.session_state.update(restored.values)
    st.session_state["_url_warnings"] = restored.warnings
    # a link to generated or real data that does not say how long blocks are: a size that fits that data
    source = st.session_state["source"]
    if "max_seq_length" not in restored.values and source == "synthetic":
        st.session_state["max_seq_length"] = st.session_state["syn_max"]
    elif "max_seq_length" not in restored.values and source == "workload":
        st.session_state["max_seq_length"] = workload_info(st.session_state["workload"]).max_seq_length
    if "workload_count" not in restored.values and source == "workload":
        big = workload_info(st.session_state["workload"]).sequences > DEFAULT_WORKLOAD_SAMPLE
        st.session_state["workload_count"] = DEFAULT_WORKLOAD_SAMPLE if big else 0
    example = state.example_for(st.session_state["sequences"])
    if example is not None:
        st.session_state["example"] = example


def share_in_url() -> None:
    """Write the current choices into the URL query string (only what changed)."""
    wanted = state.write_params(st.session_state.to_dict())
    current = st.query_params.to_dict()
    for name in state.PARAMS.values():
        if name in current and name not in wanted:
            del st.query_params[name]
    for name, value in wanted.items():
        if current.get(name) != value:
            st.query_params[name] = value


def _load_example() -> None:
    example = EXAMPLES[st.session_state.get("example", DEFAULT_EXAMPLE)]
    st.session_state.update(
        sequences=example.text,
        max_seq_length=example.max_seq_length,
        strategy=example.strategy,
        completion_only=example.completion_only_loss,
    )


def _source_changed() -> None:
    """Back to a source used before: its own max_seq_length again. A new one: a sensible max_seq_length for it.

    Pasted text is never replaced, except the untouched text of an example, which brings its settings back.
    """
    source, previous = st.session_state["source"], st.session_state.get("_source_shown")
    if previous:
        st.session_state[f"_max_seq_length_{previous}"] = st.session_state["max_seq_length"]
    remembered = st.session_state.get(f"_max_seq_length_{source}")
    if remembered is not None:
        st.session_state["max_seq_length"] = remembered
    elif source == "synthetic":
        st.session_state["max_seq_length"] = st.session_state["syn_max"]
    elif source == "workload":
        _workload_changed()
    elif source == "paste" and state.example_for(st.session_state.get("sequences", "")) is not None:
        _load_example()


def _workload_changed() -> None:
    """Use the distribution's own max_seq_length, and a sample of a very large one."""
    info = workload_info(st.session_state["workload"])
    st.session_state["max_seq_length"] = info.max_seq_length
    st.session_state["workload_count"] = 0 if info.sequences <= DEFAULT_WORKLOAD_SAMPLE else DEFAULT_WORKLOAD_SAMPLE


def _paste_inputs() -> tuple[Any, ...]:
    st.selectbox(
        "Load an example",
        list(EXAMPLES),
        key="example",
        format_func=lambda k: EXAMPLES[k].title,
        on_change=_load_example,
    )
    example = EXAMPLES[st.session_state["example"]]
    if st.session_state.get("sequences", "") == example.text:
        st.caption(f"{example.question} Look at the **{example.look_at}** tab.")
    else:
        st.caption("Your own sequences. Pick an example above to load it and its settings.")
    text = st.text_area("Sequences", key="sequences", height=140, help=FORMAT_HELP)
    if not state.sequences_in_url(st.session_state.to_dict()):
        st.caption("This text is too long to keep in the page's URL; the link shares the settings only.")
    return ("paste", text)


def _synthetic_inputs() -> tuple[Any, ...]:
    count = st.number_input("Sequences", min_value=1, max_value=1_000_000, step=1000, key="syn_count")
    dist = st.selectbox(
        "Length distribution", list(DISTRIBUTIONS), format_func=lambda k: DISTRIBUTIONS[k], key="syn_dist"
    )
    seed = st.number_input("Seed", min_value=0, max_value=2**31 - 1, step=1, key="syn_seed")
    longest = st.number_input("Longest length", min_value=1, max_value=state.MAX_SEQ_LENGTH, step=256, key="syn_max")
    return ("synthetic", int(count), str(dist), int(seed), int(longest))


def _workload_inputs() -> tuple[Any, ...]:
    name = st.selectbox(
        "Distribution",
        list(WORKLOADS),
        key="workload",
        format_func=lambda n: workload_info(n).title,
        on_change=_workload_changed,
    )
    total = workload_info(name).sequences
    count = st.number_input(
        "Sequences to use (0 = all)",
        min_value=0,
        max_value=100_000_000,
        step=10_000,
        key="workload_count",
        help=f"A seeded random sample; this distribution has {total:,} sequences. "
        f"The page works with up to {MAX_WORKLOAD_SEQUENCES:,} at a time.",
    )
    used = total if count == 0 else min(int(count), total)
    if used > MAX_WORKLOAD_SEQUENCES:
        st.warning(
            f"{used:,} sequences is more than this page handles at once ({MAX_WORKLOAD_SEQUENCES:,}); "
            f"using {MAX_WORKLOAD_SEQUENCES:,}. The Export tab's snippet packs all of them with the library."
        )
        used = MAX_WORKLOAD_SEQUENCES
    return ("workload", str(name), used)


def _upload_inputs() -> tuple[tuple[Any, ...] | None, bytes | None]:
    file = st.file_uploader(
        "JSONL, JSON, CSV or Parquet",
        type=["jsonl", "json", "csv", "parquet"],
        help="Columns or keys: input_ids (optionally loss_mask), prompt and completion, or length "
        f"(lengths only). Up to {MAX_UPLOAD_MB} MB.",
    )
    if file is None:
        return None, None
    raw = file.getvalue()
    spec = ("upload", file.name, hashlib.sha1(raw).hexdigest())
    if st.session_state.get("_upload_seen") != spec:
        # a new file: size the blocks to its longest sequence (the user can change it afterwards)
        st.session_state["_upload_seen"] = spec
        try:
            dataset = cache.load_dataset(cache.spec_key(spec), spec, raw)
        except InputError:
            return spec, raw  # the page reports the problem
        if len(dataset.lengths):
            longest = int(dataset.lengths.max())
            st.session_state["max_seq_length"] = suggested_max_seq_length(longest, state.MAX_SEQ_LENGTH)
    return spec, raw


def _settings() -> Settings:
    st.header("Settings")
    size = st.number_input("max_seq_length", min_value=1, max_value=state.MAX_SEQ_LENGTH, step=1, key="max_seq_length")
    strategy = st.selectbox(
        "Strategy", list(packing.STRATEGIES), key="strategy", format_func=lambda s: packing.STRATEGIES[s].title
    )
    info = packing.STRATEGIES[strategy]
    st.caption(f"{info.description} Cost: {info.complexity}.")
    overflow = st.selectbox("Over-long sequences", list(packing.OVERFLOW_POLICIES), key="overflow")
    st.caption(f"**{overflow}**: {packing.OVERFLOW_POLICIES[overflow]}.")
    pad = st.number_input("Pad token id", min_value=0, max_value=2**31 - 1, step=1, key="pad_token_id")
    completion_only = st.toggle(
        "Loss on completions only",
        key="completion_only",
        help="On: prompt tokens of prompt/completion samples get loss mask 0. Off: loss on all tokens.",
    )
    return Settings(int(size), str(strategy), str(overflow), int(pad), bool(completion_only))


def render() -> Choice:
    """Draw the sidebar and return the choices."""
    with st.sidebar:
        st.header("Data")
        source = st.radio(
            "Source", list(state.SOURCES), key="source", format_func=state.SOURCES.get, on_change=_source_changed
        )
        st.session_state["_source_shown"] = source
        upload = None
        if source == "paste":
            spec: tuple[Any, ...] | None = _paste_inputs()
        elif source == "synthetic":
            spec = _synthetic_inputs()
        elif source == "workload":
            spec = _workload_inputs()
        else:
            spec, upload = _upload_inputs()
        settings = _settings()
        st.caption("The page's URL keeps these choices: copy it to share this view.")
    return Choice(spec, upload, settings)
