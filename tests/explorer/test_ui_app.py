"""The page driven through Streamlit's AppTest: every tab, strategy, example and source, bad input, and links."""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

import pytest
from streamlit.testing.v1 import AppTest

import packing
from explorer.examples import EXAMPLES
from explorer.views import TABS

APP = str(Path(__file__).resolve().parents[2] / "app.py")
CLASSIC = "Block 1: [1, 2, 3, 4] -> mask: [1, 1, 1, 1]\nBlock 2: [5, 6, 0, 0] -> mask: [1, 1, 0, 0]"
TIMEOUT = 60


def _app(**params: str) -> AppTest:
    at = AppTest.from_file(APP, default_timeout=TIMEOUT)
    at.query_params.update(params)
    return at.run()


def _clean(at: AppTest) -> None:
    """No exception and no error message on the page."""
    assert not at.exception, [e.value for e in at.exception]
    assert not at.error, [e.value for e in at.error]


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
    assert [c.value for c in at.code] == [CLASSIC]
    metrics = _metrics(at)
    assert metrics["Blocks"] == "2" and metrics["Efficiency"] == "75.00%" and metrics["Padding"] == "2"
    assert {"blocks", "util", "lengths"} <= set(_charts(at))
    assert at.dataframe[0].value["input_ids"].tolist() == ["[1, 2, 3, 4]", "[5, 6, 0, 0]"]


@pytest.mark.parametrize("strategy", list(packing.STRATEGIES))
def test_every_strategy_renders(strategy: str) -> None:
    at = _app()
    at.sidebar.selectbox(key="strategy").set_value(strategy).run()
    _clean(at)
    expected = packing.pack([[1, 2], [3, 4, 5], [6]], 4, strategy).num_blocks
    assert _metrics(at)["Blocks"] == str(expected)
    assert at.code[0].value.count("Block ") == expected


def test_every_tab_renders_with_its_content() -> None:
    at = _app()
    checks = {
        "Result": lambda: at.code[0].value == CLASSIC,
        "Compare": lambda: at.dataframe[0].value["strategy"].tolist() == list(packing.STRATEGIES),
        "Sweep": lambda: "sweep" in _charts(at),
        "Attention & positions": lambda: _metrics(at)["Cross-document pairs a plain causal mask allows"] == "4",
        "Step through": lambda: any("Step 1 of 3" in m.value for m in at.markdown),
        "Practice": lambda: any(b.label == "Check" for b in at.button),
        "Export": lambda: any("packing.pack(" in c.value for c in at.code),
    }
    assert set(checks) == set(TABS)
    for tab in TABS:
        _open(at, tab)
        _clean(at)
        assert checks[tab](), tab


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


def test_masking_example_masks_prompts() -> None:
    at = _app()
    at.sidebar.selectbox(key="example").set_value("masking").run()
    metrics = _metrics(at)
    assert metrics["Trainable tokens"] == "6"  # 15 tokens, 9 of them in prompts
    assert "masked prompt" in json.dumps(_charts(at)["blocks"])
    at.sidebar.toggle(key="completion_only").set_value(False).run()
    _clean(at)
    assert _metrics(at)["Trainable tokens"] == "15"


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("1 2\n3 x", "line 2: expected token ids"),
        ("[[1, 2], [3,", "line 1, column 13: invalid JSON"),
        ("[[1, 2],\n [99999999999999999999]]", "line 2 (sequence 2): token id 99999999999999999999 is too large"),
        ('{"prompt": [1]}', "'completion' is missing"),
        ("", "no sequences"),
    ],
)
def test_bad_input_shows_a_message_naming_the_line(text: str, message: str) -> None:
    at = _app()
    at.sidebar.text_area(key="sequences").set_value(text).run()
    assert not at.exception
    assert any(message in e.value for e in at.error), [e.value for e in at.error]
    _open(at, "Practice")  # the rest of the page keeps working
    assert not at.exception and any(b.label == "Check" for b in at.button)


def test_query_parameters_restore_the_state() -> None:
    at = _app(sequences="[[1,2],[3,4,5],[6]]", max_seq_length="4", strategy="ffd", overflow="drop")
    _clean(at)
    assert at.session_state["strategy"] == "ffd" and at.session_state["overflow"] == "drop"
    expected = packing.pack([[1, 2], [3, 4, 5], [6]], 4, "ffd").to_lists()[0]
    assert f"Block 1: {expected[0]}" in at.code[0].value
    classic = _app(sequences="[[1,2],[3,4,5],[6]]", max_seq_length="4", strategy="split")
    assert classic.code[0].value == CLASSIC


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
    assert at.session_state["syn_dist"] == "bimodal"
    assert at.dataframe[0].value["strategy"].tolist() == [s for s in packing.STRATEGIES if s != "optimal"]
    workload = _app(source="workload", workload="squad_1_1_bert_384", sample="2000", max_seq_length="384")
    _clean(workload)
    assert "2,000 sequences" in " ".join(c.value for c in workload.caption)


def test_bad_link_parameters_are_reported_not_fatal() -> None:
    at = _app(max_seq_length="zero", strategy="magic")
    assert not at.exception
    warnings = " ".join(w.value for w in at.warning)
    assert "max_seq_length='zero'" in warnings and "strategy='magic'" in warnings
    assert at.code[0].value == CLASSIC


def test_optimal_on_a_large_input_says_so_and_the_rest_works() -> None:
    at = _app(source="synthetic", count="500", max_length="256", max_seq_length="256", strategy="optimal")
    assert not at.exception
    assert any("only feasible for up to 40 sequences; this data has 500" in w.value for w in at.warning)
    _open(at, "Compare")
    _clean(at)
    table = at.dataframe[0].value.set_index("strategy")
    assert table.at["bfd", "blocks"] > 0 and "optimal" not in table.index  # no row of empty cells
    assert any("optimal** did not run" in c.value and "40" in c.value for c in at.caption)
    _open(at, "Result")
    at.button(key="use_bfd_Result").click().run()
    _clean(at)
    assert at.session_state["strategy"] == "bfd" and "Blocks" in _metrics(at)


def test_too_long_blocks_are_not_drawn_but_counted() -> None:
    at = _app(source="synthetic", count="50", max_length="100000", max_seq_length="100000")
    assert not at.exception
    assert any("too large to draw" in w.value for w in at.warning)
    assert "Blocks" in _metrics(at)


def test_stepping_through_a_large_input_is_refused_in_plain_words() -> None:
    at = _app(source="synthetic", count="2000", max_length="512", max_seq_length="512", tab="Step through")
    assert not at.exception
    assert any("limited to" in w.value for w in at.warning)


def test_large_inputs_show_a_window_and_rerender_quickly() -> None:
    at = _app(source="synthetic", count="10000", max_length="2048", max_seq_length="2048", strategy="bfd")
    _clean(at)
    total = int(_metrics(at)["Blocks"].replace(",", ""))
    assert any(f"of {total:,}" in c.value for c in at.caption)
    assert len(_charts(at)["blocks"]["data"][0]["y"]) == 16  # only the window is drawn
    timings = []
    for strategy in ("ffd", "split", "bfd"):
        at.sidebar.selectbox(key="strategy").set_value(strategy)
        started = time.perf_counter()
        at.run()
        timings.append(time.perf_counter() - started)
        _clean(at)
    assert min(timings) < 3.0, timings
    at.number_input(key="result_first").set_value(total).run()
    _clean(at)
    assert _charts(at)["blocks"]["data"][0]["y"] == [f"Block {total}"]


def test_practice_checks_an_answer() -> None:
    at = _open(_app(), "Practice")
    seed = at.session_state["practice_seed"]
    from explorer.practice import new_problem

    expected = new_problem(seed).expected()
    at.text_area(key="practice_answer").set_value("\n".join(" ".join(map(str, b)) for b in expected)).run()
    assert any("Correct" in s.value for s in at.success)
    at.text_area(key="practice_answer").set_value("1 2 3 4 5 6 7 8 9").run()
    assert not at.exception and at.error
    at.text_area(key="practice_answer").set_value("1 two").run()
    assert any("Could not read your answer" in e.value for e in at.error)


def test_uploads_are_packed() -> None:
    pytest.importorskip("packing.io")
    at = _app(source="upload")
    assert any("Upload a file" in i.value for i in at.info)
    at.sidebar.get("file_uploader")[0].upload("train.jsonl", b'{"input_ids": [1, 2, 3]}\n{"input_ids": [4, 5]}\n').run()
    _clean(at)
    assert at.code[0].value.startswith("Block 1: [1, 2, 3, 4]")
    bad = _app(source="upload")
    bad.sidebar.get("file_uploader")[0].upload("bad.json", b'[[1, 2], [3, "x"]]').run()
    assert not bad.exception and any("bad.json" in e.value for e in bad.error)


def test_a_link_to_an_example_shows_it_and_edited_text_says_so() -> None:
    masking = EXAMPLES["masking"]
    at = _app(sequences=masking.text, max_seq_length="8")
    _clean(at)
    assert at.session_state["example"] == "masking"
    assert any(masking.question in c.value for c in at.sidebar.caption)
    at.sidebar.text_area(key="sequences").set_value("1 2 3\n4 5").run()
    assert any("Your own sequences" in c.value for c in at.sidebar.caption)
    assert not any(masking.question in c.value for c in at.sidebar.caption)


def test_padding_cells_show_the_chosen_pad_token_id() -> None:
    at = _app(sequences="[[1,2],[3,4,5],[6]]", max_seq_length="4", strategy="split", pad_token_id="7")
    _clean(at)
    assert at.code[0].value.startswith("Block 1: [1, 2, 3, 4]") and "[5, 6, 7, 7]" in at.code[0].value
    assert _charts(at)["blocks"]["data"][0]["text"][1] == ["5", "6", "7", "7"]


def test_an_upload_gets_blocks_that_fit_its_longest_sequence_and_big_losses_are_flagged() -> None:
    pytest.importorskip("packing.io")
    at = _app(source="upload")  # max_seq_length is still the classic example's 4
    rows = "length\n" + "\n".join(str(n) for n in (299, 120, 64, 7))
    at.sidebar.get("file_uploader")[0].upload("lengths.csv", rows.encode()).run()
    _clean(at)
    assert at.session_state["max_seq_length"] == 512
    assert not any("are lost" in w.value for w in at.warning)
    at.sidebar.number_input(key="max_seq_length").set_value(16).run()  # the user's choice is kept
    _clean(at)
    assert at.session_state["max_seq_length"] == 16
    assert any("are lost" in w.value and "longest has 299 tokens" in w.value for w in at.warning)


def test_share_link_and_tab_captions() -> None:
    at = _open(_app(sequences="[[1,2],[3]]", max_seq_length="3", strategy="ffd"), "Export")
    _clean(at)
    link = at.code[-1].value
    assert link.startswith("?source=paste") and "strategy=ffd" in link  # AppTest has no page address
    for tab, words in {
        "Sweep": "Efficiency = real tokens",
        "Attention & positions": "block-diagonal mask",
        "Step through": "replayed one sequence at a time",
    }.items():
        _open(at, tab)
        _clean(at)
        assert any(words in c.value for c in at.caption), tab


def test_a_wrong_practice_answer_hides_the_solution_and_offers_a_replay() -> None:
    at = _open(_app(), "Practice")
    at.text_area(key="practice_answer").set_value("1").run()
    assert at.error and not at.exception
    table = at.dataframe[0].value
    assert "expected" not in table and set(table["match"]) <= {"✓", "✗"}
    at.button[-1].click().run()  # "Replay this problem step by step"
    _clean(at)
    from explorer.practice import new_problem

    problem = new_problem(at.session_state["practice_seed"])
    assert at.session_state["tab"] == "Step through" and at.session_state["strategy"] == problem.strategy
    assert any("Step 1 of" in m.value for m in at.markdown)


def test_reruns_on_a_real_distribution_do_not_reload_every_distribution() -> None:
    at = _app(source="workload", workload="squad_1_1_bert_384", max_seq_length="384", strategy="bfd")
    _clean(at)
    timings = []
    for _ in range(2):
        started = time.perf_counter()
        at.run()
        timings.append(time.perf_counter() - started)
    _clean(at)
    assert min(timings) < 0.5, timings  # loading the 16-million-sequence distribution takes 0.7-1.2 s


def test_the_export_snippet_packs_what_the_sidebar_asked_for() -> None:
    at = _app(source="workload", workload="openchat_v1_2048", sample="0", max_seq_length="2048", tab="Export")
    _clean(at)
    snippet = next(c.value for c in at.code if "load_workload" in c.value)
    assert "permutation(len(lengths))]" in snippet  # every sequence, not a slice of them
    at.sidebar.number_input(key="workload_count").set_value(1000).run()
    _clean(at)
    assert any("permutation(len(lengths))[:1000]]" in c.value for c in at.code)


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
    assert at.code[0].value == "Block 1: [1, 2, 3, 4, 5] -> mask: [1, 1, 1, 1, 1]"
    at.sidebar.radio(key="source").set_value("synthetic").run()
    assert at.session_state["max_seq_length"] == 1024


def test_a_link_to_generated_or_real_data_without_a_block_size_gets_one_that_fits() -> None:
    at = _app(source="workload", workload="openchat_v1_2048")
    _clean(at)
    assert at.session_state["max_seq_length"] == 2048 and not any("are lost" in w.value for w in at.warning)
    synthetic = _app(source="synthetic", count="500", max_length="300")
    _clean(synthetic)
    assert synthetic.session_state["max_seq_length"] == 300
    chosen = _app(source="synthetic", count="500", max_length="300", max_seq_length="64")
    assert chosen.session_state["max_seq_length"] == 64  # what the link says wins
