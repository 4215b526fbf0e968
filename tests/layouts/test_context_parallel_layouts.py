"""Context parallelism in the layouts: the auditor reads a THD batch (``cu_seq_lens_q`` inside
``cu_seqlens_padded``) and checks the two lists against each other; the NeMo / Megatron-Bridge export pads every
document for the context-parallel size and records it."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import packing
from packing.layouts._export import export, write_parquet
from packing.layouts.megatron import PARALLEL_METADATA

torch = pytest.importorskip("torch")
from packing.torch import collate  # noqa: E402

documents = st.lists(st.lists(st.integers(1, 99), min_size=1, max_size=30), min_size=1, max_size=6)


@settings(max_examples=60, deadline=None)
@given(docs=documents, cp=st.sampled_from([2, 4, 8]), prompts=st.booleans())
def test_a_thd_batch_audits_clean_with_its_documents_and_padding(docs: list[list[int]], cp: int, prompts: bool) -> None:
    rows = [{"prompt": d[:1], "completion": d[1:]} if prompts and len(d) > 1 else d for d in docs]
    batch = collate(rows, context_parallel_size=cp, loss_weights="token")
    report = packing.audit(batch)
    assert report.layout == "flattening" and report.packed.variant.startswith("THD")
    assert report.clean, report.describe()
    assert report.num_documents == len(docs)
    assert report.tokens == sum(map(len, docs))
    assert report.padding_tokens == batch["input_ids"].shape[1] - sum(map(len, docs))
    assert [d.tolist() for d in report.packed.documents()] == docs


def test_boundary_lists_mixed_up_are_found() -> None:
    batch = collate([[5, 6, 7], [8, 9, 10, 11, 12], [13]], context_parallel_size=2)

    def found(**changes: object) -> dict[str, int]:
        return packing.audit({**batch, **changes}).counts()

    swapped = found(cu_seq_lens_q=batch["cu_seqlens_padded"], cu_seqlens_padded=batch["cu_seq_lens_q"])
    assert swapped.get("inconsistent_boundaries", 0) >= 1  # the padded list does not cover the tokens
    assert found(cu_seq_lens_q=batch["cu_seq_lens_q"][:-1]) == {"inconsistent_boundaries": 1}  # a document short
    too_long = batch["cu_seq_lens_q"].clone()
    too_long[1] = 5  # the first document longer than its padded span of 4, the second's end read as padding
    assert found(cu_seq_lens_q=too_long) == {"inconsistent_boundaries": 1, "padding_trained": 2}
    assert found(labels=batch["input_ids"].clone()) == {"cross_document_label": 2, "padding_trained": 7}


def test_the_nemo_export_pads_for_context_parallelism_and_records_it(tmp_path: Path) -> None:
    rows = [[1 + i % 50] * n for i, n in enumerate([3, 2, 5, 9, 1, 4, 12, 6, 7, 2])]
    batch = packing.pack(rows, 32, context_parallel_size=2, tensor_parallel_size=2)
    table = export(batch, "megatron", loss_weights="sequence")
    multiple = 8
    assert json.loads(table.schema.metadata[PARALLEL_METADATA]) == {
        "context_parallel_size": 2,
        "tensor_parallel_size": 2,
        "pad_seq_to_mult": multiple,
    }
    found = []
    for ids, starts, mask, weights in zip(*(table.column(n).to_pylist() for n in table.column_names), strict=True):
        ends = [*starts[1:], len(ids)]
        assert len(mask) == len(weights) == len(ids)
        assert sum(e - s - 1 for s, e in zip(starts, ends, strict=True)) <= 32  # NeMo trains length - 1 positions
        for s, e in zip(starts, ends, strict=True):
            assert (e - s - 1) % multiple == 0  # what NeMo's loader trains of each document: a multiple
            doc = ids[s:e]
            real = len(doc) - next(i for i, t in enumerate(reversed(doc)) if t != 0)
            found.append(doc[:real])
            assert mask[s + real - 1 : e] == [0] * (e - s - real + 1)  # nothing trained from padding on
            assert weights[s + real - 1 : e] == [0.0] * (e - s - real + 1)
            assert sum(mask[s : s + real - 1]) == real - 1  # every real position trained (loss on all)
    assert sorted(found) == sorted(rows)
    target = tmp_path / "packed.idx.parquet"
    write_parquet(batch, target, layout="megatron")
    assert pq.read_table(target).schema.metadata[PARALLEL_METADATA] == table.schema.metadata[PARALLEL_METADATA]
    report = packing.audit(target)
    assert report.clean and "pad_seq_to_mult 8" in report.packed.variant and report.num_documents == len(rows)
    uneven = pa.table({"input_ids": [[1, 2, 3, 0, 0, 0]], "seq_start_id": [[0]], "loss_mask": [[1, 1, 0, 0, 0, 0]]})
    uneven = uneven.replace_schema_metadata(table.schema.metadata)
    assert packing.audit(uneven).counts() == {"inconsistent_boundaries": 1}  # 5 positions: not a multiple of 8


def test_without_context_parallelism_nothing_changes() -> None:
    batch = packing.pack([[1, 2, 3], [4, 5]], 8)
    table = export(batch, "megatron")
    assert table.schema.metadata is None or PARALLEL_METADATA not in table.schema.metadata
    assert table.to_pydict()["input_ids"] == [[1, 2, 3, 4, 5]]
    assert np.array_equal(batch.plan.parallel_sizes, (1, 1))
