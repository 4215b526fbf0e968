"""One truth: every count the page shows, on every tab, is the library's for the packed batch the page shows
(``PackedBatch.stats``, ``loss_weights``, ``count_trainable``), for the classic example under every strategy and
for a chat source."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from streamlit.testing.v1 import AppTest

import packing
import packing.batches
import packing.strategies
import packing.weighting
from explorer.core.sources import Text
from explorer.server import cache

APP = str(Path(__file__).resolve().parents[2] / "app.py")
CLASSIC = [[1, 2], [3, 4, 5], [6]]
MODES = ("token", "sequence", "sequence_sum", "sqrt")


def _open(at: AppTest, tab: str) -> AppTest:
    at.session_state["tab"] = tab
    return at.run()


def _metrics(at: AppTest) -> dict[str, str]:
    return {m.label: m.value for m in at.metric}


def _library(
    samples: packing.Samples, max_seq_length: int, strategy: str, overflow: str = "truncate"
) -> dict[str, object]:
    """What the library says of ``batch``: its counts, and each document's share of the loss under every mode
    (``loss_weights`` summed over the document's tokens), by document number (1-based), for ``samples`` packed
    with these settings."""
    batch = packing.materialize(
        packing.plan(samples.lengths, max_seq_length, strategy=strategy, overflow=overflow), samples
    )
    ids = batch.sequence_ids.astype(np.int64)
    real = ids >= 0
    counts = packing.count_trainable(batch.plan, samples)
    targets = np.bincount(ids[real], weights=(batch.labels != -100)[real], minlength=len(batch.plan.lengths))
    shares = {
        mode: np.bincount(ids[real], weights=batch.loss_weights(mode)[real], minlength=len(batch.plan.lengths))
        for mode in MODES
    }
    documents = [int(d) for d in np.flatnonzero(targets > 0)]
    return {
        "blocks": batch.stats.num_blocks,
        "padding": batch.stats.padding_tokens,
        "loss mask": int(batch.loss_mask.sum()),
        "targets": int((batch.labels != -100).sum()),
        "counted": counts,
        "documents": len(documents),
        "weights": {d + 1: {m: float(shares[m][d]) for m in MODES} for d in documents},
        "per document": {d + 1: int(targets[d]) for d in documents},
    }


def _page(at: AppTest) -> dict[str, object]:
    """The same numbers as the page shows them: the Result tab's metrics and Blocks table, the Loss weights tab's
    metrics and table."""
    result = _metrics(at)
    blocks = at.table[-1].value  # the Blocks table, last on the Result tab
    _open(at, "Loss weights")
    assert not at.exception and not at.error, [e.value for e in at.exception]
    weights = _metrics(at)
    table = at.dataframe[0].value
    per_document = {}
    shares = {}
    for _, row in table.iterrows():
        number, rest = str(row["document"]).lstrip("#").split(" (", 1)
        per_document[int(number)] = int(rest.split(" ")[0])
        shares[int(number)] = {m: float(row[m]) for m in MODES}
    return {
        "blocks": int(result["Blocks"].replace(",", "")),
        "padding": int(result["Padding"].replace(",", "")),
        "loss mask": int(result["Tokens with mask 1"].replace(",", "")),
        "targets": int(result["Training targets"].replace(",", "")),
        "table loss mask": int(blocks["loss mask 1"].sum()),
        "table targets": int(blocks["training targets"].sum()),
        "weights targets": int(weights["Training targets"].replace(",", "")),
        "documents": int(weights["Documents"].replace(",", "")),
        "per document": per_document,
        "weights": shares,
    }


def _agree(page: dict[str, object], library: dict[str, object]) -> None:
    counted = library["counted"]
    assert isinstance(counted, packing.batches.TrainableCounts)
    assert page["blocks"] == library["blocks"] and page["padding"] == library["padding"]
    assert page["loss mask"] == page["table loss mask"] == library["loss mask"] == counted.trainable_tokens
    assert page["targets"] == page["table targets"] == page["weights targets"] == library["targets"]
    assert library["targets"] == counted.target_tokens
    assert page["documents"] == library["documents"]
    assert page["per document"] == {d: library["per document"][d] for d in page["per document"]}  # type: ignore[index]
    expected = library["weights"]
    assert isinstance(expected, dict)
    for document, shares in page["weights"].items():  # type: ignore[attr-defined]
        assert shares == pytest.approx(expected[document], abs=1e-4), document


@pytest.mark.slow
@pytest.mark.parametrize("strategy", list(packing.strategies.STRATEGIES))
def test_the_classic_example_counts_as_the_library_under_every_strategy(strategy: str) -> None:
    at = AppTest.from_file(APP, default_timeout=120)
    at.query_params.update({"sequences": "[[1,2],[3,4,5],[6]]", "max_seq_length": "4", "strategy": strategy})
    at.run()
    assert not at.exception and not at.error
    _agree(_page(at), _library(packing.read_rows(CLASSIC), 4, strategy))


def test_under_split_the_token_that_starts_a_block_is_not_a_training_target() -> None:
    """The classic answer's plan: token 5 starts block 2, so its label is -100 and documents #1 and #2 have one
    training target each; the Loss weights tab gives each 0.5 under a token mean, as ``loss_weights`` does."""
    at = AppTest.from_file(APP, default_timeout=120)
    at.query_params.update({"sequences": "[[1,2],[3,4,5],[6]]", "max_seq_length": "4", "strategy": "split"})
    at.run()
    page = _page(at)
    assert page["targets"] == page["weights targets"] == 2 and page["documents"] == 2
    assert page["per document"] == {1: 1, 2: 1}
    assert {d: w["token"] for d, w in page["weights"].items()} == {1: 0.5, 2: 0.5}  # type: ignore[attr-defined]
    _agree(page, _library(packing.read_rows(CLASSIC), 4, "split"))


@pytest.mark.slow
@pytest.mark.parametrize("strategy", ["split", "bfd"])
def test_a_chat_source_counts_as_the_library(strategy: str) -> None:
    at = AppTest.from_file(APP, default_timeout=120)
    at.query_params.update({"source": "text", "strategy": strategy})
    at.run()
    assert not at.exception and not at.error
    source = Text(str(at.session_state["text_rows"]), str(at.session_state["tokenizer"]))
    size = int(at.session_state["max_seq_length"])
    recipe = packing.Recipe(size, strategy=strategy, overflow=str(at.session_state["overflow"]))
    samples = cache.dataset(source, recipe).samples
    assert samples is not None
    library = _library(samples, size, strategy, recipe.overflow)
    assert int(library["documents"]) >= 2  # type: ignore[call-overload]  # several chats, each with a trained answer
    _agree(_page(at), library)


def test_a_lengths_only_source_counts_as_the_library() -> None:
    """Lengths only: every real token is in the loss mask, and each count on the Result and Loss weights tabs is the
    plan's (``PackingStats``) and each document's share of the loss ``effective_weights`` of its training targets."""
    from explorer.core.sources import Synthetic
    from packing.batches._packed import targets_per_sample

    at = AppTest.from_file(APP, default_timeout=120)
    at.query_params.update({"source": "synthetic", "count": "12", "max_length": "40", "max_seq_length": "64"})
    at.run()
    assert not at.exception and not at.error
    lengths = Synthetic(12, str(at.session_state["distribution"]), 0, 40).load().lengths
    layout = packing.plan(lengths, 64, strategy="bfd")
    page = _page(at)
    stats = layout.stats
    assert page["blocks"] == stats.num_blocks and page["padding"] == stats.padding_tokens
    assert page["loss mask"] == page["table loss mask"] == stats.trainable_tokens
    assert page["targets"] == page["table targets"] == page["weights targets"] == stats.target_tokens
    targets = targets_per_sample(layout)
    assert page["per document"] == {d: int(targets[d - 1]) for d in page["per document"]}  # type: ignore[attr-defined]
    for mode in MODES:
        shares = packing.weighting.effective_weights(targets, mode)  # type: ignore[arg-type]
        for document, weights in page["weights"].items():  # type: ignore[attr-defined]
            assert weights[mode] == pytest.approx(shares[document - 1], abs=1e-4)
