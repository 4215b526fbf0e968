"""Bad vision rows and configs: each a typed error of one line naming the sample (its index among the rows packed),
the field and what was expected; and the numbers read from the models' own configs."""

from __future__ import annotations

import copy
from typing import Any

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from packing.errors import SampleError, SettingError
from packing.vision import VisionConfig, packed_position_ids, rope_index, row_positions
from tests.helpers.tiny_vlms import IMAGE, MERGE, START, VIDEO, random_document

CONFIG = VisionConfig(IMAGE, VIDEO, START, MERGE, tokens_per_second=4)


def _image_run(row: dict[str, Any]) -> int:
    """Where the first run of image tokens of ``row`` starts."""
    return row["input_ids"].index(IMAGE)


def _fewer_tokens(row: dict[str, Any]) -> tuple[str, int | None]:
    """One token fewer in the first image of at least two tokens (earlier images stay right)."""
    ids = row["input_ids"]
    starts = [i for i, token in enumerate(ids) if token == IMAGE and (i == 0 or ids[i - 1] != IMAGE)]
    start = next((i for i in starts if ids[i + 1] == IMAGE), None)
    if start is None:  # every image of one token: one more instead
        return _more_tokens(row)
    ids.pop(start)
    return "input_ids", start


def _more_tokens(row: dict[str, Any]) -> tuple[str, int | None]:
    row["input_ids"].insert(_image_run(row), IMAGE)
    return "input_ids", _image_run(row)


def _fewer_pixels(row: dict[str, Any]) -> tuple[str, int | None]:
    row["pixel_values"] = row["pixel_values"][1:]
    return "pixel_values", None


def _odd_grid(row: dict[str, Any]) -> tuple[str, int | None]:
    row["image_grid_thw"][-1][2] += 1
    return "image_grid_thw", len(row["image_grid_thw"]) - 1


def _extra_grid(row: dict[str, Any]) -> tuple[str, int | None]:
    row["image_grid_thw"].append([1, 2, 2])
    row.pop("pixel_values")
    return "image_grid_thw", None


def _no_grid(row: dict[str, Any]) -> tuple[str, int | None]:
    row.pop("image_grid_thw")
    row.pop("pixel_values")
    return "image_grid_thw", None


TAMPERINGS = [_fewer_tokens, _more_tokens, _fewer_pixels, _odd_grid, _extra_grid, _no_grid]


@settings(max_examples=80, deadline=None)
@given(
    seed=st.integers(0, 2**32 - 1),
    count=st.integers(1, 4),
    where=st.integers(0, 3),
    tamper=st.sampled_from(TAMPERINGS),
)
def test_a_tampered_row_is_named_with_its_field(seed: int, count: int, where: int, tamper: Any) -> None:
    rng = np.random.default_rng(seed)
    rows = [random_document(rng, int(rng.integers(1, 4)), int(rng.integers(0, 2))) for _ in range(count)]
    where %= count
    field, position = tamper(rows[where])
    with pytest.raises(SampleError) as caught:
        packed_position_ids(rows, CONFIG)
    error = caught.value
    assert (error.sample, error.field, error.position) == (where, field, position)
    assert str(error).startswith(f"sample {where}, {field!r}") and "\n" not in str(error)


def test_the_good_rows_pass_and_a_copy_is_not_changed() -> None:
    rng = np.random.default_rng(1)
    rows = [random_document(rng, 2, 1), random_document(rng, 0)]
    kept = copy.deepcopy(rows)
    assert packed_position_ids(rows, CONFIG).shape == (4, 1, sum(len(row["input_ids"]) for row in rows))
    assert [row["input_ids"] for row in rows] == [row["input_ids"] for row in kept]


@pytest.mark.parametrize("field", ["image_grid_thw", "pixel_values", "video_grid_thw", "pixel_values_videos"])
def test_images_without_a_vision_config_are_refused(field: str) -> None:
    row = random_document(np.random.default_rng(0), 1, 1)
    for other in ("image_grid_thw", "pixel_values", "video_grid_thw", "pixel_values_videos"):
        if other != field:
            row.pop(other)
    with pytest.raises(SampleError, match=rf"sample 2, '{field}': expected no images or videos without a vision"):
        row_positions(row, None, sample=2)
    text = {"input_ids": [3, 4, 5]}
    assert packed_position_ids([text, text])[:, 0].tolist() == [[0, 1, 2, 0, 1, 2]] * 4


@pytest.mark.parametrize(
    ("arguments", "field"),
    [
        ({"input_ids": [[1, 2]]}, "input_ids"),
        ({"input_ids": ["a"]}, "input_ids"),
        ({"input_ids": None}, "input_ids"),
        ({"input_ids": [IMAGE], "image_grid_thw": [[1, 2]]}, "image_grid_thw"),
        ({"input_ids": [IMAGE], "image_grid_thw": [[1, 2, 2], [1, 2]]}, "image_grid_thw"),
        ({"input_ids": [IMAGE], "image_grid_thw": [[0, 2, 2]]}, "image_grid_thw"),
        ({"input_ids": [VIDEO], "video_grid_thw": [[1, 2, 2]], "second_per_grid_ts": [1.0, 2.0]}, "second_per_grid_ts"),
    ],
)
def test_malformed_fields_are_named(arguments: dict[str, Any], field: str) -> None:
    with pytest.raises(SampleError) as caught:
        rope_index(**arguments, config=CONFIG, sample=5)
    assert (caught.value.sample, caught.value.field) == (5, field)


NUMBERS = {"image_token_id": IMAGE, "video_token_id": VIDEO, "vision_start_token_id": START, "spatial_merge_size": 2}


@pytest.mark.parametrize("missing", sorted(NUMBERS))
def test_a_config_without_a_number_is_refused(missing: str) -> None:
    given = {name: value for name, value in NUMBERS.items() if name != missing}
    with pytest.raises(SettingError, match=f"vision: expected a Qwen2-VL-family config or a mapping with '{missing}'"):
        VisionConfig.of(given)


@pytest.mark.parametrize(
    ("change", "name"),
    [
        ({"spatial_merge_size": 0}, "vision.spatial_merge_size"),
        ({"image_token_id": -1}, "vision.image_token_id"),
        ({"video_token_id": IMAGE}, "vision.image_token_id"),
        ({"tokens_per_second": 0}, "vision.tokens_per_second"),
        ({"tokens_per_second": True}, "vision.tokens_per_second"),
        ({"spatial_merge_size": 2.0}, "vision.spatial_merge_size"),
    ],
)
def test_bad_numbers_are_refused(change: dict[str, Any], name: str) -> None:
    with pytest.raises(SettingError) as caught:
        VisionConfig.of(NUMBERS | change)
    assert caught.value.name == name


def test_the_numbers_are_read_from_the_models_configs_and_from_mappings() -> None:
    transformers = pytest.importorskip("transformers")
    for kind, rate, apart in (
        (transformers.Qwen2VLConfig, None, False),
        (transformers.Qwen2_5_VLConfig, 7, False),
        (transformers.Qwen3VLConfig, None, True),
    ):
        vision = {"spatial_merge_size": 4} | ({"tokens_per_second": rate} if rate else {})
        config = kind(image_token_id=11, video_token_id=12, vision_start_token_id=13, vision_config=vision)
        read = VisionConfig.of(config)
        assert read == VisionConfig(11, 12, 13, 4, rate, apart)
        assert VisionConfig.of(config.to_dict()) == read  # the nested mapping a saved config.json holds
    assert VisionConfig.of(NUMBERS) == VisionConfig(IMAGE, VIDEO, START, 2)
    assert VisionConfig.of(CONFIG) is CONFIG
