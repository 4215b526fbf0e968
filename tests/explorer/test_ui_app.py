"""The page driven through Streamlit's AppTest: every tab, strategy, example and source, bad input, hostile links
and files, and the defects of the first version (each test here failed on it)."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import pytest
from streamlit.testing.v1 import AppTest

import packing
import packing.reading
import packing.strategies
from explorer.core.examples import EXAMPLES
from explorer.server.memo import STORE
from explorer.ui.tabs import TITLES

APP = str(Path(__file__).resolve().parents[2] / "app.py")
CLASSIC = "Block 1: [1, 2, 3, 4] -> mask: [1, 1, 1, 1]\nBlock 2: [5, 6, 0, 0] -> mask: [1, 1, 0, 0]"
TIMEOUT = 120
MESSAGES = ("markdown", "caption", "warning", "error", "info", "success")


COMPARED = [*(n for n, s in packing.strategies.STRATEGIES.items() if s.keeps_boundaries), "bfd/1,000 (TRL's default)"]
"""The Compare tab's rows: every strategy, and bfd per window of 1,000 rows as TRL packs by default."""


def _app(**params: str) -> AppTest:
    at = AppTest.from_file(APP, default_timeout=TIMEOUT)
    at.query_params.update(params)
    return at.run()


def _plain(value: str) -> str:
    """A Markdown body as the reader sees it (backslash escapes removed)."""
    return re.sub(r"\\(.)", r"\1", value)


def _classic(at: AppTest) -> list[str]:
    """The classic forms on the page (Markdown, one code span per block), as text."""
    spans = [m.value for m in at.markdown if m.value.startswith("`Block ")]
    return [span.replace("`", "").replace("  \n", "\n") for span in spans]


def _texts(at: AppTest, kind: str) -> list[str]:
    return [_plain(str(e.value)) for e in at.get(kind)]


def _all_text(at: AppTest) -> str:
    return " ".join(t for kind in MESSAGES for t in _texts(at, kind))


def _clean(at: AppTest) -> None:
    """No exception and no error message on the page."""
    assert not at.exception, [e.value for e in at.exception]
    assert not at.error, [e.value for e in at.error]


def _no_markup_from_users(at: AppTest) -> None:
    """No Markdown link, image or HTML tag survives in any message body (escaped characters are text)."""
    for kind in MESSAGES:
        for element in at.get(kind):
            live = re.sub(r"\\.", "", str(element.value))  # what is left after escapes: the live Markdown
            assert "](" not in live and "<" not in live, (kind, element.value)


def _metrics(at: AppTest) -> dict[str, str]:
    return {m.label: m.value for m in at.metric}


def _charts(at: AppTest) -> dict[str, dict[str, Any]]:
    return {chart.key: json.loads(chart.proto.spec) for chart in at.get("plotly_chart")}


def _open(at: AppTest, tab: str) -> AppTest:
    at.session_state["tab"] = tab
    return at.run()


def test_default_page_shows_the_classic_example() -> None:
    at = _app()
    _clean(at)
    assert _classic(at) == [CLASSIC]
    metrics = _metrics(at)
    assert metrics["Blocks"] == "2" and metrics["Efficiency"] == "75.00%" and metrics["Padding"] == "2"
    assert {"blocks", "util", "lengths"} <= set(_charts(at))
    blocks = at.table[0].value  # the classic form above holds the ids and the mask
    assert blocks["documents"].tolist() == ["1, 2", "2, 3"] and blocks["training targets"].tolist() == [2, 0]


@pytest.mark.parametrize("strategy", list(packing.strategies.STRATEGIES))
def test_every_strategy_renders(strategy: str) -> None:
    at = _app()
    at.sidebar.selectbox(key="strategy").set_value(strategy).run()
    _clean(at)
    expected = packing.pack([[1, 2], [3, 4, 5], [6]], 4, strategy=strategy).num_blocks
    assert _metrics(at)["Blocks"] == str(expected)
    assert _classic(at)[0].count("Block ") == expected


def test_every_tab_renders_with_its_content() -> None:
    at = _app()
    checks = {
        "Result": lambda: _classic(at) == [CLASSIC],
        "Compare": lambda: at.dataframe[0].value["strategy"].tolist() == COMPARED,
        "Sweep": lambda: "sweep" in _charts(at),
        "Attention & positions": lambda: _metrics(at)["Cross-document pairs"] == "4",
        "Loss weights": lambda: "loss_weights" in _charts(at) and _metrics(at)["Training targets"] == "2",
        "Step through": lambda: any("Step 1 of 3" in m for m in _texts(at, "markdown")),
        "Practice": lambda: any(b.label == "Check" for b in at.button),
        "Export": lambda: any("packing.pack(" in c.value for c in at.code),
    }
    assert set(checks) <= set(TITLES)
    for tab in TITLES:
        _open(at, tab)
        _clean(at)
        if tab in checks:
            assert checks[tab](), tab


@pytest.mark.slow
@pytest.mark.parametrize(
    "params",
    [
        {"source": "synthetic", "count": "300", "max_length": "256"},
        {"source": "workload", "workload": "squad_1_1_bert_384", "sample": "3000"},
        {"sequences": "5 6 7 | 8 9\n10 | 11 12", "max_seq_length": "8"},
    ],
)
def test_every_tab_renders_for_every_source(params: dict[str, str]) -> None:
    at = _app(**params)
    for tab in TITLES:
        _open(at, tab)
        assert not at.exception, (tab, [e.value for e in at.exception])
        assert not at.error, (tab, [e.value for e in at.error])


@pytest.mark.parametrize("key", list(EXAMPLES))
def test_every_example_loads(key: str) -> None:
    at = _app()
    at.sidebar.selectbox(key="example").set_value(key).run()
    _clean(at)
    example = EXAMPLES[key]
    assert at.sidebar.text_area(key="sequences").value == example.text
    assert at.sidebar.number_input(key="max_seq_length").value == example.max_seq_length
    _open(at, example.look_at)
    _clean(at)


def test_masking_example_masks_prompts_and_tells_labels_from_the_loss_mask() -> None:
    at = _app()
    at.sidebar.selectbox(key="example").set_value("masking").run()
    metrics = _metrics(at)
    assert metrics["Tokens with mask 1"] == "6"  # 15 tokens, 9 of them in prompts
    example = EXAMPLES["masking"]
    from explorer.core.parsing import parse_sequences

    batch = packing.pack(parse_sequences(example.text).samples, example.max_seq_length, strategy=example.strategy)
    # kept whole (bfd): every response follows its prompt in its block, so each trained token is a target
    assert metrics["Training targets"] == str(int((batch.labels != -100).sum())) == "6"
    spec = json.dumps(_charts(at)["blocks"])
    assert "not trained (loss mask 0" in spec and "document start (loss mask 1, label -100)" in spec
    assert any("label is -100" in c for c in _texts(at, "caption"))
    at.sidebar.radio(key="loss").set_value("all").run()
    _clean(at)
    assert _metrics(at)["Tokens with mask 1"] == "15"


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("1 2\n3 x", "line 2: expected token ids"),
        ("[[1, 2], [3,", "line 1, column 13"),
        ("[[1, 2],\n [99999999999999999999]]", "line 2 (sequence 2)"),
        ('{"prompt": [1]}', "line 1 (sequence 1)"),
        ("", "no sequences"),
        ("[" * 20_000, "nested too deeply"),
        ("[[" + "9" * 5000 + "]]", "too many digits"),
    ],
)
def test_bad_input_shows_one_line_naming_the_line(text: str, message: str) -> None:
    at = _app()
    at.sidebar.text_area(key="sequences").set_value(text).run()
    assert not at.exception
    errors = _texts(at, "error")
    assert any(message in e for e in errors), errors
    assert all(len(e) < 400 and "\n" not in e for e in errors)
    _open(at, "Practice")  # the rest of the page keeps working
    assert not at.exception and any(b.label == "Check" for b in at.button)


def test_query_parameters_restore_the_state() -> None:
    at = _app(sequences="[[1,2],[3,4,5],[6]]", max_seq_length="4", strategy="ffd", overflow="drop")
    _clean(at)
    assert at.session_state["strategy"] == "ffd" and at.session_state["overflow"] == "drop"
    expected = packing.pack([[1, 2], [3, 4, 5], [6]], 4, strategy="ffd").to_lists()[0]
    assert f"Block 1: {expected[0]}" in _classic(at)[0]
    classic = _app(sequences="[[1,2],[3,4,5],[6]]", max_seq_length="4", strategy="split")
    assert _classic(classic)[0] == CLASSIC


def test_a_link_can_open_a_tab_and_other_sources() -> None:
    at = _app(
        source="synthetic",
        count="300",
        distribution="bimodal",
        seed="3",
        max_length="512",
        max_seq_length="512",
        tab="Compare",
    )
    _clean(at)
    assert at.session_state["distribution"] == "bimodal" and at.session_state["count"] == 300
    assert at.dataframe[0].value["strategy"].tolist() == COMPARED
    workload = _app(source="workload", workload="squad_1_1_bert_384", sample="2000", max_seq_length="384")
    _clean(workload)
    assert "2,000 sequences" in " ".join(_texts(workload, "caption"))
    loss = _app(sequences="1 2 | 3", loss="all")
    assert loss.session_state["loss"] == "all" and _metrics(loss)["Tokens with mask 1"] == "3"


def test_bad_link_parameters_are_reported_not_fatal() -> None:
    at = _app(max_seq_length="zero", strategy="magic")
    assert not at.exception
    warnings = " ".join(_texts(at, "warning"))
    assert "max_seq_length='zero'" in warnings and "strategy='magic'" in warnings
    assert _classic(at)[0] == CLASSIC


def test_an_unknown_tab_or_parameter_gets_the_one_line_warning() -> None:
    at = _app(tab="Nope", foo="1")
    _clean(at)
    warnings = _texts(at, "warning")
    assert any(w.startswith("Ignored a link parameter: tab='Nope' is not one of Result, Compare") for w in warnings)
    assert "Ignored a link parameter: foo is not a parameter this page reads" in warnings
    assert _classic(at) == [CLASSIC]  # the Result tab, as without the parameters


def test_switching_from_pasted_text_to_an_upload_logs_no_streamlit_warning() -> None:
    """The sidebar sets a source's settings through Session State on purpose (``_source_changed``); Streamlit's
    warning for a widget with a default whose value was set that way (with a stack trace in the server's log) is
    turned off in ``.streamlit/config.toml``."""
    import logging

    records: list[logging.LogRecord] = []
    handler = logging.Handler()
    handler.emit = records.append  # type: ignore[method-assign]
    logger = logging.getLogger("streamlit.elements.lib.policies")
    logger.addHandler(handler)
    try:
        at = _app()
        at.sidebar.radio(key="source").set_value("upload").run()
        at.sidebar.radio(key="source").set_value("paste").run()
    finally:
        logger.removeHandler(handler)
    assert not at.exception
    assert not [r for r in records if "Session State API" in r.getMessage()]


@pytest.mark.parametrize(
    "params",
    [
        {"strategy": "[Click here](https://example.com)"},
        {"sequences": "![x](https://example.com/x.png)"},
        {"sequences": "<img src=https://example.com/x.png>"},
        {"sequences": "[" * 5000},
        {"max_seq_length": "9" * 5000},
        {"max_seq_length": "1e400"},
        {"count": "9" * 400, "source": "synthetic"},
        {"seed": "-1", "source": "synthetic"},
        {"sample": "1" * 30, "source": "workload"},
        {"pad_token_id": "99999999999999999999"},
        {"source": "<b>x</b>"},
        {"workload": "../../etc/passwd", "source": "workload"},
        {"problem": "1e9999", "tab": "Practice"},
        {"tab": "[x](https://example.com)"},
    ],
)
def test_hostile_links_are_harmless(params: dict[str, str]) -> None:
    at = _app(**params)
    assert not at.exception, [e.value for e in at.exception]
    _no_markup_from_users(at)
    text = _all_text(at)
    assert "Traceback" not in text and "/work/" not in text and "site-packages" not in text
    assert all(len(t) < 600 for t in _texts(at, "warning") + _texts(at, "error"))


@pytest.mark.slow
def test_out_of_range_max_seq_length_is_answered_in_plain_words_where_the_user_looks() -> None:
    for value, words in ((0, "0 is too small"), (-5, "-5 is too small"), (2**24 + 1, "16,777,217 is too large")):
        at = _app()
        at.sidebar.number_input(key="max_seq_length").set_value(value).run()
        assert not at.exception
        main = [_plain(e.value) for e in at.main.get("error")]
        assert any(words in e and "max_seq_length must be a whole number from 1 to 16,777,216" in e for e in main), main
        assert not _classic(at) and "Blocks" not in _metrics(at)  # no stale result under the message
    at.sidebar.number_input(key="max_seq_length").set_value(2**24).run()  # the library's limit is usable
    assert not at.exception and not at.main.get("error")


def test_the_proven_optimum_runs_within_the_page_time_limit_and_shows_its_certificate() -> None:
    at = _app(source="synthetic", count="500", max_length="256", max_seq_length="256", strategy="optimal")
    _clean(at)
    assert any(c.startswith("Certified: no packing that keeps sequences whole") for c in _texts(at, "caption"))
    assert at.sidebar.number_input(key="time_limit").value == 5
    _open(at, "Compare")
    _clean(at)
    assert "optimal" in at.dataframe[0].value["strategy"].tolist()


def test_a_refusal_says_so_offers_bfd_and_the_rest_works(optimal_refuses: None) -> None:
    at = _app(source="synthetic", count="501", seed="77", max_length="256", max_seq_length="256", strategy="optimal")
    assert not at.exception
    assert any("40" in w and "501" in w for w in _texts(at, "warning"))
    _open(at, "Compare")
    _clean(at)
    table = at.dataframe[0].value.set_index("strategy")
    assert table.at["bfd", "blocks"] > 0 and "optimal" not in table.index  # no row of empty cells
    notes = [c for c in _texts(at, "caption") if "did not run" in c]
    assert notes and "Compare tab" not in notes[0]  # no pointer to the tab the user is on
    _open(at, "Result")
    at.button(key="use_bfd_result").click().run()
    _clean(at)
    assert at.session_state["strategy"] == "bfd" and "Blocks" in _metrics(at)


def test_too_long_blocks_are_not_drawn_but_counted() -> None:
    at = _app(source="synthetic", count="50", max_length="100000", max_seq_length="100000")
    assert not at.exception
    assert any("too large to draw" in w for w in _texts(at, "warning"))
    assert "Blocks" in _metrics(at)


def test_stepping_through_a_large_input_is_refused_in_plain_words() -> None:
    at = _app(source="synthetic", count="2000", max_length="512", max_seq_length="512", tab="Step through")
    assert not at.exception
    assert any("limited to" in w for w in _texts(at, "warning"))


def test_step_wording_reads_right_for_one_token() -> None:
    at = _app(sequences="[[1], [2, 3]]", max_seq_length="2", strategy="split", tab="Step through")
    _clean(at)
    step = next(m for m in _texts(at, "markdown") if "Step 1 of" in m)
    assert "token 0 (1 token)" in step and "1 tokens" not in step


def test_large_inputs_show_a_window_of_blocks() -> None:
    at = _app(source="synthetic", count="10000", max_length="2048", max_seq_length="2048", strategy="bfd")
    _clean(at)
    total = int(_metrics(at)["Blocks"].replace(",", ""))
    assert any(f"of {total:,}" in c for c in _texts(at, "caption"))
    assert len(_charts(at)["blocks"]["data"][0]["y"]) == 16  # only the window is drawn
    at.number_input(key="result_first").set_value(total).run()
    _clean(at)
    assert _charts(at)["blocks"]["data"][0]["y"] == [f"Block {total}"]


def test_practice_checks_blocks_and_masks_and_keeps_its_problem_in_the_link() -> None:
    from explorer.core.practice import new_problem

    at = _app(tab="Practice", problem="7")
    _clean(at)
    assert at.session_state["problem"] == 7
    blocks, masks = new_problem(7).expected()
    ids_only = "\n".join(" ".join(map(str, b)) for b in blocks)
    at.text_area(key="practice_answer").set_value(ids_only).run()
    assert any("loss mask" in e for e in _texts(at, "error"))  # right ids, no masks: not yet correct
    full = "\n".join(f"{' '.join(map(str, b))} -> {' '.join(map(str, m))}" for b, m in zip(blocks, masks, strict=True))
    at.text_area(key="practice_answer").set_value(full).run()
    assert any("Correct" in s for s in _texts(at, "success"))
    at.text_area(key="practice_answer").set_value("1 two").run()
    assert any("Could not read your answer" in e for e in _texts(at, "error"))


@pytest.mark.slow
def test_uploads_are_packed_and_hostile_files_give_one_line() -> None:
    at = _app(source="upload")
    assert any("Upload a file" in i for i in _texts(at, "info"))
    at.sidebar.get("file_uploader")[0].upload("train.jsonl", b'{"input_ids": [1, 2, 3]}\n{"input_ids": [4, 5]}\n').run()
    _clean(at)
    assert _classic(at)[0].startswith("Block 1: [1, 2, 3")
    for name, data in (
        ("bad.json", b'[[1, 2], [3, "x"]]'),
        ("h.json", b'{"histogram": [0, 1000000000000]}'),
        ("deep.json", b"[" * 200_000),
        ("digits.csv", b"length\n" + b"9" * 6000 + b"\n"),
        ("[x](https:__e.com).jsonl", b"[1, 2]\n"),
    ):
        bad = _app(source="upload")
        bad.sidebar.get("file_uploader")[0].upload(name, data).run()
        assert not bad.exception, name
        _no_markup_from_users(bad)
        errors = _texts(bad, "error")
        assert all(len(e) < 400 for e in errors), (name, errors)


def test_the_upload_widget_takes_every_format_the_reader_reads() -> None:
    import io

    import pyarrow as pa

    from packing.reading._files import FORMATS, extensions

    at = _app(source="upload")
    uploader = at.sidebar.get("file_uploader")[0]
    assert {f".{extension}" for extension in extensions(FORMATS)} <= set(uploader.proto.type)
    assert ".arrow" in uploader.proto.type
    buffer = io.BytesIO()
    with pa.ipc.new_file(buffer, pa.schema([("input_ids", pa.list_(pa.int64()))])) as writer:
        writer.write_table(pa.table({"input_ids": [[1, 2, 3], [4, 5]]}))
    uploader.upload("train.arrow", buffer.getvalue()).run()
    _clean(at)
    assert _classic(at)[0].startswith("Block 1: [1, 2, 3")


def test_an_uploaded_file_of_chats_is_tokenized_with_the_chosen_tokenizer() -> None:
    chats = b'{"messages": [{"role": "user", "content": "Hi"}, {"role": "assistant", "content": "Hello!"}]}\n' * 2
    at = _app(source="upload")
    at.sidebar.get("file_uploader")[0].upload("chats.jsonl", chats).run()
    _clean(at)
    assert any("2 text rows, tokenized with 'bytes'" in c for c in _texts(at, "caption"))
    # a tokenizer that cannot be loaded (from the box or a link) is answered in one line, naming the file
    bad = _app(source="upload", tokenizer="[x](https://e.com)")
    bad.sidebar.get("file_uploader")[0].upload("chats.jsonl", chats).run()
    assert not bad.exception
    _no_markup_from_users(bad)
    errors = _texts(bad, "error")
    assert len(errors) == 1 and "chats.jsonl holds text rows" in errors[0] and "\n" not in errors[0], errors


def test_a_link_to_an_example_shows_it_and_edited_text_says_so() -> None:
    masking = EXAMPLES["masking"]
    at = _app(sequences=masking.text, max_seq_length="8")
    _clean(at)
    assert at.session_state["example"] == "masking"
    assert any(masking.question in c for c in _texts(at.sidebar, "caption"))
    at.sidebar.text_area(key="sequences").set_value("1 2 3\n4 5").run()
    assert any("Your own sequences" in c for c in _texts(at.sidebar, "caption"))


def test_padding_cells_show_the_chosen_pad_token_id() -> None:
    at = _app(sequences="[[1,2],[3,4,5],[6]]", max_seq_length="4", strategy="split", pad_token_id="7")
    _clean(at)
    assert _classic(at)[0].startswith("Block 1: [1, 2, 3, 4]") and "[5, 6, 7, 7]" in _classic(at)[0]
    assert _charts(at)["blocks"]["data"][0]["text"][1] == ["5", "6", "7", "7"]


def test_an_upload_gets_blocks_that_fit_its_longest_sequence_and_big_losses_are_flagged() -> None:
    at = _app(source="upload")
    rows = "length\n" + "\n".join(str(n) for n in (299, 120, 64, 7))
    at.sidebar.get("file_uploader")[0].upload("lengths.csv", rows.encode()).run()
    _clean(at)
    assert at.session_state["max_seq_length"] == 512
    assert not any("are lost" in w for w in _texts(at, "warning"))
    at.sidebar.number_input(key="max_seq_length").set_value(16).run()  # the user's choice is kept
    _clean(at)
    assert at.session_state["max_seq_length"] == 16
    assert any("are lost" in w and "longest has 299 tokens" in w for w in _texts(at, "warning"))


@pytest.mark.slow
def test_share_links_say_honestly_what_they_reproduce() -> None:
    at = _open(_app(sequences="[[1,2],[3]]", max_seq_length="3", strategy="ffd"), "Export")
    _clean(at)
    link = at.code[-1].value
    assert "sequences=" in link and "strategy=ffd" in link and "max_seq_length=3" in link
    assert any("same sequences and settings" in c for c in _texts(at, "caption"))
    long = _app()
    long.sidebar.text_area(key="sequences").set_value("1 2 3\n" * 1500).run()
    _open(long, "Export")
    _clean(long)
    assert "sequences=" not in long.code[-1].value
    assert any("more than a link carries" in c for c in _texts(long, "caption"))
    upload = _app(source="upload")
    upload.sidebar.get("file_uploader")[0].upload("a.csv", b"length\n3\n").run()
    _open(upload, "Export")
    assert any("cannot carry an uploaded file" in c for c in _texts(upload, "caption"))


@pytest.mark.slow
def test_a_shared_link_reopens_the_same_result() -> None:
    at = _app(source="synthetic", count="700", max_length="300", seed="4", strategy="first_fit")
    blocks = _metrics(at)["Blocks"]
    _open(at, "Export")
    query = at.code[-1].value.split("?", 1)[1]
    from urllib.parse import parse_qsl

    again = _app(**dict(parse_qsl(query)))
    _clean(again)
    assert _metrics(again)["Blocks"] == blocks and again.session_state["strategy"] == "first_fit"


def test_a_wrong_practice_answer_hides_the_solution_and_offers_a_replay() -> None:
    at = _open(_app(), "Practice")
    at.text_area(key="practice_answer").set_value("1").run()
    assert at.error and not at.exception
    table = at.dataframe[0].value
    assert "expected" not in table and set(table["ids"]) <= {"✓", "✗"}
    at.button[-1].click().run()  # "Replay this problem step by step"
    _clean(at)
    from explorer.core.practice import new_problem

    problem = new_problem(at.session_state["problem"])
    assert at.session_state["tab"] == "Step through" and at.session_state["strategy"] == problem.strategy
    assert any("Step 1 of" in m for m in _texts(at, "markdown"))


def test_reruns_reuse_the_loaded_distribution() -> None:
    at = _app(source="workload", workload="squad_1_1_bert_384", max_seq_length="384", strategy="bfd")
    _clean(at)
    before = STORE.stats()
    at.run()
    after = STORE.stats()
    assert after.misses == before.misses and after.hits > before.hits  # nothing recomputed


def test_the_export_snippet_packs_what_the_sidebar_asked_for() -> None:
    at = _app(source="workload", workload="openchat_v1_2048", sample="0", max_seq_length="2048", tab="Export")
    _clean(at)
    snippet = next(c.value for c in at.code if "load_workload" in c.value)
    assert "permutation" not in snippet  # every sequence, in the file's order, as the page uses them
    at.sidebar.number_input(key="sample").set_value(1000).run()
    _clean(at)
    assert any("permutation(len(lengths))[:1000]]" in c.value for c in at.code)


@pytest.mark.slow
def test_choices_made_in_a_tab_survive_a_visit_to_another_tab() -> None:
    at = _app(source="synthetic", count="2000", max_length="512", max_seq_length="512", strategy="bfd")
    at.number_input(key="result_first").set_value(5).run()
    at.number_input(key="result_count").set_value(3).run()
    _open(at, "Sweep")
    at.multiselect(key="sweep_strategies").set_value(["bfd", "none"]).run()
    _open(at, "Practice")
    at.text_area(key="practice_answer").set_value("1 2 3").run()
    _open(at, "Compare")
    _open(at, "Result")
    _clean(at)
    assert (at.number_input(key="result_first").value, at.number_input(key="result_count").value) == (5, 3)
    assert _charts(at)["blocks"]["data"][0]["y"] == ["Block 5", "Block 6", "Block 7"]
    _open(at, "Sweep")
    _clean(at)
    assert at.multiselect(key="sweep_strategies").value == ["bfd", "none"]
    _open(at, "Practice")
    assert at.text_area(key="practice_answer").value == "1 2 3"


def test_going_back_to_pasted_text_keeps_it_and_its_max_seq_length() -> None:
    at = _app()
    at.sidebar.text_area(key="sequences").set_value("1 2 3\n4 5").run()
    at.sidebar.number_input(key="max_seq_length").set_value(5).run()
    at.sidebar.radio(key="source").set_value("synthetic").run()
    _clean(at)
    assert at.session_state["max_seq_length"] == 2048  # a size that fits the synthetic lengths
    at.sidebar.number_input(key="max_seq_length").set_value(1024).run()
    at.sidebar.radio(key="source").set_value("paste").run()
    _clean(at)
    assert at.session_state["sequences"] == "1 2 3\n4 5" and at.session_state["max_seq_length"] == 5
    assert _classic(at)[0] == "Block 1: [1, 2, 3, 4, 5] -> mask: [1, 1, 1, 1, 1]"
    at.sidebar.radio(key="source").set_value("synthetic").run()
    assert at.session_state["max_seq_length"] == 1024


def test_a_link_to_generated_or_real_data_without_a_block_size_gets_one_that_fits() -> None:
    at = _app(source="workload", workload="openchat_v1_2048")
    _clean(at)
    assert at.session_state["max_seq_length"] == 2048 and not any("are lost" in w for w in _texts(at, "warning"))
    synthetic = _app(source="synthetic", count="500", max_length="300")
    _clean(synthetic)
    assert synthetic.session_state["max_seq_length"] == 300
    chosen = _app(source="synthetic", count="500", max_length="300", max_seq_length="64")
    assert chosen.session_state["max_seq_length"] == 64  # what the link says wins


def test_the_sweep_shows_tokens_lost_and_names_the_best_setting() -> None:
    at = _app(source="workload", workload="squad_1_1_bert_384", sample="5000", max_seq_length="384", tab="Sweep")
    _clean(at)
    table = at.dataframe[0].value
    assert "tokens lost (%)" in table
    small = table[table["max_seq_length"] == table["max_seq_length"].min()]
    assert (small["tokens lost (%)"] > 0).all()  # the smallest size truncates: the chart says how much
    best = next(i for i in _texts(at, "info") if i.startswith("Best without losing a token"))
    size = int(re.search(r"max_seq_length ([\d,]+)", best).group(1).replace(",", ""))
    assert size > table["max_seq_length"].min()
    spec = _charts(at)["sweep"]
    assert any("Tokens lost" in a["text"] for a in spec["layout"]["annotations"])


def test_every_sentence_reads_right_for_one() -> None:
    at = _app(sequences="[[1, 2, 3]]", max_seq_length="4")
    _clean(at)
    text = _all_text(at)
    assert "1 sequence, pasted." in text and "1 sequences" not in text
    _open(at, "Compare")
    _clean(at)
    assert not re.search(r"\b1 blocks\b", _all_text(at))


def test_the_inspect_tab_audits_an_uploaded_packed_file() -> None:
    from explorer.core import export

    batch = packing.pack([[1, 2], [3, 4, 5], [6]], 4, strategy="split")
    at = _app(tab="Inspect")
    _clean(at)
    assert any("Upload a packed file" in i for i in _texts(at, "info"))
    at.get("file_uploader")[0].upload("blocks.jsonl", export.jsonl_bytes(batch)).run()
    _clean(at)
    summary = at.dataframe[0].value
    assert summary.iloc[1, 1] == "2" and "packing" in summary.iloc[0, 1]  # 2 blocks, this project's layout
    assert "inspect" in _charts(at)
    bad = _app(tab="Inspect")
    bad.get("file_uploader")[0].upload("[x](https:__e.com).jsonl", b"not json\n").run()
    assert not bad.exception
    _no_markup_from_users(bad)
    errors = _texts(bad, "error")
    assert errors and all(len(e) < 400 for e in errors)


@pytest.mark.slow
def test_samples_that_train_nothing_are_said_on_the_page_not_only_in_a_tooltip() -> None:
    at = _app(sequences="[[1], [2, 3], [4]]", max_seq_length="4", strategy="split")
    _clean(at)
    labels = [t for t in _texts(at, "markdown") if t.startswith("**From mask to labels.**")]
    assert len(labels) == 1 and "2 packed documents (#1, #3) have none at all" in labels[0]
    one = _app(sequences="[[1], [2, 3]]", max_seq_length="4", strategy="split")
    assert any("1 packed document (#1) has none at all" in t for t in _texts(one, "markdown"))
    none = _app(sequences="[[1, 2], [3, 4]]", max_seq_length="4", strategy="split")
    assert not any("none at all" in t for t in _texts(none, "markdown"))


def test_the_classic_form_opens_the_result_tab_for_small_blocks_and_follows_the_charts_for_wide_ones() -> None:
    small = _app(sequences="[[1,2],[3,4,5],[6]]", max_seq_length="4", strategy="split")
    wide = _app(sequences="[[1,2,3,4,5,6,7,8,9,10],[11,12,13,14,15,16,17,18,19,20,21,22]]", max_seq_length="20")
    for at in (small, wide):
        _clean(at)
        assert len(_classic(at)) == 1 and _classic(at)[0].startswith("Block 1: [1, 2, 3")
    assert "Classic form" not in [h.value for h in small.subheader]  # first, above the drawing: no heading
    assert "Classic form" in [h.value for h in wide.subheader]
