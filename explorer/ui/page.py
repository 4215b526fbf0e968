"""Page plumbing shared by ``app.py`` and the tabs: the warm-up behind one message, the error guard, the
``Context`` of a run, and the stop check the server's waits use."""

from __future__ import annotations

import importlib
import logging
import secrets
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

import streamlit as st

import packing
from explorer.core import runs as compute
from explorer.core.context import Context
from explorer.core.model import grammar_count, plan_problem
from explorer.core.parsing import InputError
from explorer.core.safety import describe, escape
from explorer.core.sources import Source
from explorer.server import cache, memo, warmup, workers
from packing.reading._files import listed

_LOG = logging.getLogger("explorer")
PAGE_MODULES = ("explorer.ui.sidebar", "explorer.ui.tabs", "plotly.graph_objects")
"""What a visit imports: loaded by the server's warm-up, before the first visit."""


def streamlit_stop_check() -> Callable[[], None]:
    """What ends the calling script run once Streamlit has stopped it (the visitor left, or the page reruns), to be
    called now and then while waiting. Streamlit acts on a stop or rerun it was asked for at the run's next call
    into Streamlit; a wait that calls nothing would never learn it. Reading ``st.session_state`` is such a call
    (Streamlit's own yield point, where it raises its stop), and draws nothing. Public API only. O(1) a call.

    >>> check = streamlit_stop_check()
    """
    return _read_session_state


def _read_session_state() -> None:
    "_stop_check" in st.session_state  # noqa: B015  Streamlit raises its stop (or rerun) here once it should end


def streamlit_session() -> str:
    """The calling script run's session, named by a token its ``st.session_state`` keeps (public API only): the
    load lane gives a session one call at a time (``workers.set_session``). O(1).

    >>> len(streamlit_session())
    16
    """
    token: str = st.session_state.setdefault("_session", secrets.token_hex(8))
    return token


def preload() -> None:
    """The server's warm-up (``explorer.server.warmup``): the page's modules imported and every kernel loaded,
    before the first visit."""
    memo.set_stop_check(streamlit_stop_check)
    workers.set_session(streamlit_session)
    for module in PAGE_MODULES:
        importlib.import_module(module)
    warmup.prepare()


def warm_up() -> None:
    """Warm once per process behind one progress message; later sessions pass straight through."""
    memo.set_stop_check(streamlit_stop_check)
    workers.set_session(streamlit_session)
    if warmup.is_warm():
        return
    # every session that arrives meanwhile shows the same message and waits for the one compilation
    with st.spinner("Preparing the packing kernels (the first start after installing compiles them once)…"):
        warmup.prepare()


def limits_note(recipe: packing.Recipe) -> str:
    """What the page does not do as the link asked, in plain words ('' when it does all of it)."""
    return compute.time_limit_note(recipe)


@contextmanager
def guard(what: str) -> Iterator[None]:
    """Show an unexpected failure as one short line instead of a traceback; the rest of the page goes on."""
    try:
        yield
    except Exception as error:  # the page must never show a traceback or a server path
        _LOG.exception("%s failed", what)
        st.error(f"{what} could not be shown: {escape(describe(error))}")


def planning(recipe: packing.Recipe, sequences: int) -> str:
    """The status line while the chosen strategy plans: what runs, on how much, and a search's time limit."""
    r = recipe
    text = f"Planning {grammar_count(sequences, 'sequence')} with {r.strategy} into blocks of {r.max_seq_length:,}"
    if compute.search_lane(compute.capped(r)) is not None:
        text += f", searching for the optimum for up to {compute.search_seconds(r):,} s"
    return text + "…"


@contextmanager
def reading(what: str) -> Iterator[None]:
    """A spinner naming ``what`` with the time it has run, and, once the work reports how far it is
    (``workers.report``), a bar with the rows done of all: never silent, however long a read takes."""
    bar: list[Any] = []

    def show(done: int, total: int) -> None:
        if total <= 0:
            return
        if not bar:
            bar.append(st.progress(0.0))
        bar[0].progress(min(done / total, 1.0), text=f"{done:,} of {total:,} rows read")

    with st.spinner(f"{what}…", show_time=True), workers.listening(show):
        yield
    if bar:
        bar[0].empty()


def build_context(source: Source | None, recipe: packing.Recipe, problem: str) -> Context:
    """Load the data and plan it; every problem is put in plain words in ``Context.problem``."""
    if source is None:
        return Context(None, recipe, problem=f"Upload a file in the sidebar ({listed()}) to pack it.")
    try:
        with reading(source.reading()):
            dataset = cache.dataset(source, recipe)
    except InputError as error:
        return Context(source, recipe, problem=f"Could not read the data: {error}")
    if not dataset.sequences:
        return Context(source, recipe, dataset, problem="The data holds no sequences.")
    r = recipe
    problem = problem or plan_problem(dataset.lengths, r.max_seq_length, r.strategy, r.overflow)
    if problem:
        return Context(
            source, recipe, dataset, problem=problem + " The tabs show the last valid result again once it is."
        )
    try:
        with st.spinner(planning(recipe, dataset.sequences), show_time=True):
            run = cache.plan(source, recipe)
    except (workers.TimedOut, workers.WorkerDied) as error:
        return Context(source, recipe, dataset, problem=f"Planning the data: {error}.")
    refusal = ""
    if run.plan is None:
        from explorer.views.tables import refusal as word

        refusal = word(run)
    return Context(source, recipe, dataset, run.plan, refusal, run.stats)
