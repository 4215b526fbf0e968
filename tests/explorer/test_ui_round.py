"""The page's promises of this round, each through Streamlit's AppTest: a source is read once per run (its
tokenizer resolved once), the defaults (``split`` for the classic example, ``bfd`` for data, said on the page), the
learner's sentence on mask and labels before any warning, and the optimum's time limit, bound and gap."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from streamlit.testing.v1 import AppTest

import packing
from explorer.core import sources
from explorer.core.runs import PAGE_TIME_LIMIT
from explorer.server.memo import STORE
from explorer.views import tables
from packing.comparison import Contender, Row

APP = str(Path(__file__).resolve().parents[2] / "app.py")


def _app(**params: str) -> AppTest:
    at = AppTest.from_file(APP, default_timeout=120)
    at.query_params.update(params)
    return at.run()


def test_a_text_source_resolves_its_tokenizer_once_per_render(monkeypatch: pytest.MonkeyPatch) -> None:
    """The Result tab of text rows draws cells, the turns and the figures from one resolution of the tokenizer
    (it used to be resolved three times on one trip: reading, cell labels, turns)."""
    STORE.clear()
    calls: list[str] = []
    real = sources.choose_tokenizer

    def counting(spec: str) -> object:
        calls.append(spec)
        return real(spec)

    monkeypatch.setattr(sources, "choose_tokenizer", counting)
    at = _app(source="text")
    assert not at.exception, [e.value for e in at.exception]
    assert calls == ["bytes"]
    assert any("Turns" in str(h.value) for h in at.subheader)


def test_the_classic_example_starts_with_split_and_every_data_source_with_bfd() -> None:
    at = _app()
    assert at.selectbox(key="strategy").value == "split"
    assert any("`bfd`" in str(c.value) and "`split`" in str(c.value) for c in at.sidebar.caption)  # said on the page
    for params in ({"source": "synthetic", "count": "200"}, {"source": "text"}):
        assert _app(**params).selectbox(key="strategy").value == "bfd", params
    assert all(cls.default_strategy == "bfd" for cls in sources.SOURCES.values() if cls is not sources.Paste)


def test_switching_to_a_data_source_switches_to_bfd_and_back_to_split() -> None:
    at = _app()
    at.radio(key="source").set_value("synthetic").run()
    assert at.selectbox(key="strategy").value == "bfd"
    at.radio(key="source").set_value("paste").run()
    assert at.selectbox(key="strategy").value == "split"


def test_the_first_screen_answers_before_the_numbers_and_explains_labels_once() -> None:
    at = _app()
    main = [str(e.value) for e in at.main if e.type in ("markdown", "warning", "info", "alert", "caption")]
    answer = next(i for i, text in enumerate(main) if text.startswith("`Block 1: [1, 2, 3, 4] -> mask: [1, 1, 1, 1]`"))
    labels = [i for i, text in enumerate(main) if "-100" in text]
    assert labels and answer < labels[0]
    assert main[labels[0]].startswith("**From mask to labels.**")  # the one explanation, in words
    assert sum("predict" in text and "-100" in text for text in main) == 1


def test_the_optimum_says_when_its_time_ran_out_with_the_proven_bound_and_the_gap() -> None:
    stats = packing.plan(np.array([3, 3, 3]), 4, strategy="bfd").stats  # 3 blocks
    ran_out = tables.optimum_note(Row(Contender("optimal"), stats, 2, float(PAGE_TIME_LIMIT)), PAGE_TIME_LIMIT)
    assert f"stopped at its {PAGE_TIME_LIMIT} s limit" in ran_out and "3 blocks" in ran_out
    assert "fewer than 2 blocks" in ran_out and "at most 1 block above" in ran_out
    proven = tables.optimum_note(Row(Contender("optimal"), stats, 3, 0.1), PAGE_TIME_LIMIT)
    assert "proved its 3 blocks optimal" in proven


def test_a_gap_on_the_compare_tab_offers_a_longer_search(monkeypatch: pytest.MonkeyPatch) -> None:
    """The optimum's row comes back with a gap (as when its limit runs out): the tab says so and offers a longer
    search, which plans in the long lane with the page's longest limit."""
    from explorer.server import cache

    real = cache.compare

    def with_gap(*args: object) -> tuple[list[Row], dict[str, packing.ComputeCost]]:
        rows, costs = real(*args)  # type: ignore[arg-type]
        gapped = [
            Row(r.contender, r.stats, r.bound - 1, r.seconds) if r.contender.strategy == "optimal" else r for r in rows
        ]
        return gapped, costs

    monkeypatch.setattr(cache, "compare", with_gap)
    STORE.clear()
    at = _app(sequences="[[3, 3], [5], [2, 2, 2], [4]]", max_seq_length="6", tab="Compare")
    assert any("limit" in str(i.value) and "proven bound" in str(i.value) for i in at.info)
    longer = [b for b in at.button if b.label.startswith("Search up to")]
    assert len(longer) == 1
    longer[0].click().run()
    assert not at.exception, [e.value for e in at.exception]
    assert any("proved its" in str(s.value) for s in at.success)  # the small input: proven within the limit


# ---------------------------------------------------------------- the hostile pass: one test per finding

HUB_VISIT = """
import sys
from streamlit.testing.v1 import AppTest
at = AppTest.from_file(sys.argv[1], default_timeout=120)
at.query_params.update({"source": "text", "tokenizer": "openai-community/gpt2"})
at.run()
at = AppTest.from_file(sys.argv[1], default_timeout=120)
at.query_params.update({"source": "upload", "tokenizer": "meta-llama/Llama-3.2-1B"})
at.run()
at.sidebar.get("file_uploader")[0].upload("chats.jsonl", b'{"text": "hello"}\\n').run()
print("errors", len(at.error))
"""


@pytest.mark.slow
def test_a_hub_name_in_the_tokenizer_box_never_reaches_the_hub(tmp_path: Path) -> None:
    """A local endpoint stands in for the model hub (``HF_ENDPOINT``): a hub-style name typed in the tokenizer
    box, for pasted rows and for an uploaded file, sends it no request (it got four before)."""
    import http.server
    import os
    import subprocess
    import sys
    import threading

    requests: list[str] = []

    class Hub(http.server.BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            requests.append(self.path)
            self.send_response(404)
            self.end_headers()

        do_HEAD = do_GET

        def log_message(self, *args: object) -> None:
            return None

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Hub)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        env = {
            **{k: v for k, v in os.environ.items() if k not in ("HF_HUB_OFFLINE", "TRANSFORMERS_OFFLINE")},
            "HF_ENDPOINT": f"http://127.0.0.1:{server.server_address[1]}",
            "HF_HOME": str(tmp_path),
            "PACKING_EXPLORER_WORKERS": "0",
        }
        done = subprocess.run(
            [sys.executable, "-c", HUB_VISIT, APP], env=env, cwd=Path(APP).parent, capture_output=True, text=True
        )
    finally:
        server.shutdown()
    assert done.returncode == 0, done.stderr[-2000:]
    assert "errors 1" in done.stdout  # the one refusal, in one line
    assert requests == []


@pytest.mark.slow
def test_a_crafted_lengths_only_upload_is_refused_before_its_plan_is_built() -> None:
    """Four lengths of 16 M tokens, cut at every token by ``split``: 67 M pieces, refused in one line before the
    plan is built (``plans._split_layout`` ran out of memory on it)."""
    at = _app(source="upload", strategy="split", max_seq_length="1")
    at.sidebar.get("file_uploader")[0].upload("crafted.csv", b"length\n" + b"16000000\n" * 4).run()
    at.number_input(key="max_seq_length").set_value(1).run()
    assert not at.exception, [e.value for e in at.exception]
    assert any("pieces; the explorer plans up to" in str(e.value) for e in at.error), [e.value for e in at.error]
    assert not at.get("plotly_chart")


def test_an_upload_says_what_runs_while_it_is_read() -> None:
    """The status line of a long upload names the file, its size, and that it runs in a worker it stops with the
    session (``explorer.core.sources.Upload.reading``); before it is read nobody knows whether it holds text, so
    it says nothing of tokenizing (the data's line says it afterwards, when it did)."""
    line = sources.Upload.of("chats.jsonl", b"x" * 4_300_000, "bytes").reading()
    assert "chats.jsonl" in line and "4.1 MB" in line and "worker" in line and "tokenize" not in line
    assert sources.Text('{"text": "a"}\n{"text": "b"}').reading() == "Tokenizing 2 text rows with 'bytes'"
