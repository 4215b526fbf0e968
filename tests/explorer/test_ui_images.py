"""The Images tab: the bundled multimodal example opens from a link, its counts are the example's packing, its
control reaches the packing (a shorter block cuts text and leaves whole images out), and the chosen block's
position rows are the library's."""

from __future__ import annotations

import base64
import json
from typing import Any

import numpy as np
import numpy.typing as npt
from streamlit.testing.v1 import AppTest

from explorer.core import multimodal
from tests.helpers.apptest import no_leak, open_link


def _array(value: Any) -> npt.NDArray[Any]:
    """An array of a chart's Plotly JSON: a nested list, or Plotly's typed-array encoding."""
    if isinstance(value, dict):
        values = np.frombuffer(base64.b64decode(value["bdata"]), dtype=np.dtype(value["dtype"]))
        return values.reshape(tuple(int(n) for n in str(value.get("shape", len(values))).split(",")))
    return np.asarray(value)


def _metrics(at: AppTest) -> dict[str, int]:
    return {m.label: int(str(m.value).replace(",", "")) for m in at.metric}


def _charts(at: AppTest) -> dict[str, dict[str, Any]]:
    return {chart.key: json.loads(chart.proto.spec) for chart in at.get("plotly_chart")}


def _check(at: AppTest, size: int) -> multimodal.MultimodalPacking:
    no_leak(at)
    assert not at.error and not at.warning, ([e.value for e in at.error], [w.value for w in at.warning])
    packed = multimodal.example(size)
    assert _metrics(at) == {
        "Documents": packed.documents,
        "Images": packed.images,
        "Blocks": packed.num_blocks,
        "Padding": packed.padding,
        "Tokens cut": packed.tokens_cut,
        "Images left out": packed.images_left_out,
    }
    charts = _charts(at)
    assert set(charts) == {"images_blocks", "images_rows", "images_plain", "images_rope"}
    assert _array(charts["images_blocks"]["data"][0]["z"]).shape == (packed.num_blocks, size)
    table = at.dataframe[0].value
    assert table["block"].tolist() == list(range(1, packed.num_blocks + 1))
    return packed


def test_the_images_tab_shows_the_example_and_its_control_reaches_the_packing() -> None:
    at = open_link({"tab": "Images"})
    packed = _check(at, multimodal.DEFAULT_MAX_SEQ_LENGTH)
    assert packed.tokens_cut == 0 and packed.num_blocks < packed.documents  # documents share blocks
    rows = _charts(at)["images_rows"]["data"][0]
    start = multimodal.default_window(packed, 0)
    assert rows["y"] == ["1-D (text-only)", "text", "temporal", "height", "width"]
    shown = np.asarray(rows["text"]).astype(int)
    assert (shown[1:] == packed.positions[:, 0, start : start + multimodal.WINDOW]).all()

    at.number_input(key="images_max_seq_length").set_value(16).run()
    short = _check(at, 16)
    assert short.tokens_cut > 0 and short.images_left_out > 0

    at.number_input(key="images_block").set_value(short.num_blocks).run()
    no_leak(at)
    last = short.num_blocks - 1
    used = int((short.document[last] >= 0).sum())
    rope = _charts(at)["images_rope"]["data"]
    assert [trace["name"] for trace in rope] == list(multimodal.ROW_NAMES)
    for row, trace in enumerate(rope):
        assert _array(trace["y"]).tolist() == short.positions[row, last, :used].tolist()

    at.number_input(key="images_max_seq_length").set_value(256).run()  # fewer blocks: the block picker follows
    wide = _check(at, 256)
    assert at.number_input(key="images_block").value == wide.num_blocks
