"""A chat template that runs forever or builds a string past any memory, chosen from a link or for an upload: the
library renders it as transformers does (unbounded: the user's own template is the user's to run), and the explorer
renders it in a worker of its load lane, under a deadline and a memory limit. The visitor reads one short line, no
traceback; the worker is stopped and the page goes on serving (the next tokenizer packs)."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import pytest

import packing
from explorer.core.parsing import InputError
from explorer.core.sources import Text, Upload
from explorer.server import cache, workers
from tests.helpers.apptest import errors_of, no_leak, open_link
from tests.helpers.processes import busy_pids

pytest.importorskip("transformers")
pytest.importorskip("tokenizers")

from tests.helpers.text_fixtures import CHATML, save_tokenizer

LOOPS = "{%- for a in range(90000) -%}{%- for b in range(90000) -%}{%- endfor -%}{%- endfor -%}"
"""Eight billion empty iterations: hours of work without writing a character."""
HUGE = "{{- messages[0]['content'] * 2 ** 33 -}}"
"""Sixteen GiB of text from a two-character message: past the load lane's memory limit at once."""
CHAT = {"messages": [{"role": "user", "content": "Hi"}, {"role": "assistant", "content": "Hello"}]}
SECONDS = 10.0
"""The load deadline here (60 s on a server): a healthy tokenizer loads and renders well within it."""


@pytest.fixture
def offered(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    """The operator's tokenizer folder (``PACKING_EXPLORER_TOKENIZERS``, inherited by the workers) with a looping,
    a memory-hungry and a plain ChatML template; one load worker, the deadline ``SECONDS``."""
    for name, template in (("loops", LOOPS), ("huge", HUGE), ("chatml", CHATML)):
        save_tokenizer(tmp_path / name, template)
    monkeypatch.setenv("PACKING_EXPLORER_TOKENIZERS", str(tmp_path))
    monkeypatch.setattr(workers, "WORKERS", 1)
    monkeypatch.setattr(cache, "LOAD_SECONDS", SECONDS)
    workers.shutdown()
    yield tmp_path
    workers.shutdown()


@pytest.mark.slow
@pytest.mark.timeout(300)
@pytest.mark.parametrize("source", ["text rows", "upload"])
def test_a_template_that_loops_is_stopped_at_the_deadline_in_one_line(offered: Path, source: str) -> None:
    rows = json.dumps(CHAT) + "\n"
    looping = Text(rows, "loops") if source == "text rows" else Upload.of("chats.jsonl", rows.encode(), "loops")
    with pytest.raises(InputError, match=rf"^it took longer than the {SECONDS:g} s the explorer gives it, and was"):
        cache.dataset(looping, packing.Recipe.for_reading())
    assert busy_pids() == []  # its worker killed
    plain = Text(rows, "chatml") if source == "text rows" else Upload.of("chats.jsonl", rows.encode(), "chatml")
    read = cache.dataset(plain, packing.Recipe.for_reading())  # a fresh worker reads the next one
    assert read.samples is not None and read.samples.loss_mask is not None and int(read.samples.loss_mask.sum()) > 0


@pytest.mark.slow
@pytest.mark.timeout(300)
def test_a_template_past_the_memory_limit_is_one_line(offered: Path) -> None:
    assert workers.limit_memory(0) is False and workers.LOAD_MEMORY_MB > 0  # the lane's limit is on
    with pytest.raises(InputError, match=r"^the data expands to more than this server can hold$"):
        cache.dataset(Text(json.dumps(CHAT), "huge"), packing.Recipe.for_reading())
    assert busy_pids() == []
    read = cache.dataset(Text(json.dumps(CHAT), "chatml"), packing.Recipe.for_reading())
    assert read.samples is not None


@pytest.mark.slow
@pytest.mark.timeout(300)
def test_a_link_to_a_looping_template_is_one_line_and_the_page_goes_on(offered: Path) -> None:
    at = open_link({"source": "text", "tokenizer": "loops"})
    no_leak(at, "loops")
    errors = errors_of(at)
    assert len(errors) == 1 and f"took longer than the {SECONDS:g} s the explorer gives it" in errors[0], errors
    assert busy_pids() == []
    at.sidebar.text_input(key="tokenizer").set_value("chatml").run()
    no_leak(at, "chatml")
    assert not errors_of(at) and at.get("plotly_chart")  # packed and drawn by the next worker
