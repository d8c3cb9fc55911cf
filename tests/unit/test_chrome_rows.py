"""Chrome events written as fixed-width rows (export/text_columns.py, chrome_rows.py):
every number, string and arg reads back as the value a compact writer would give."""

from __future__ import annotations

import io
import json
import math
from typing import Any

import numpy as np

from tests.unit.mixed_timeline import INT64_MAX, INT64_MIN, expected_events, mixed_timeline
from tfprof.collector.export import ChromeReporter
from tfprof.collector.export.text_columns import (
    int_width,
    millis_width,
    text_table,
    write_int,
    write_millis,
)
from tfprof.collector.merged.whole import WholeTimeline as Timeline


def _texts(out: np.ndarray) -> list[str]:
    return [bytes(row).decode() for row in out]


def test_integers_right_aligned_after_spaces() -> None:
    rng = np.random.default_rng(3)
    values = np.concatenate(
        [
            np.array([0, 1, -1, 9, 10, 9999, 10000, -10000, 10**12, INT64_MIN, INT64_MAX]),
            rng.integers(INT64_MIN, INT64_MAX, 500, dtype=np.int64),
            rng.integers(-(10**6), 10**6, 500),
        ]
    )
    out = np.zeros((values.shape[0], int_width(values)), dtype=np.uint8)
    write_int(out, values)
    texts = _texts(out)
    assert int_width(values) == len(str(INT64_MIN))
    for value, text in zip(values.tolist(), texts, strict=True):
        assert text.lstrip(" ") == str(value), text
    small = np.array([3, 12], dtype=np.uint64)
    out = np.zeros((2, int_width(small)), dtype=np.uint8)
    write_int(out, small)
    assert _texts(out) == [" 3", "12"]


def test_millis_are_the_exact_quotient() -> None:
    rng = np.random.default_rng(4)
    values = np.concatenate(
        [
            np.array([0, 1, 999, 1000, 1001, -1, -999, -1000, -1500, INT64_MAX, INT64_MIN]),
            rng.integers(-(1 << 62), 1 << 62, 1000, dtype=np.int64),
            rng.integers(0, 10**7, 1000),
        ]
    )
    out = np.zeros((values.shape[0], millis_width(values)), dtype=np.uint8)
    write_millis(out, values)
    for value, text in zip(values.tolist(), _texts(out), strict=True):
        number = text.lstrip(" ")
        assert json.loads(number) == value / 1000, (value, text)  # correctly rounded
        if abs(value) < 1 << 53:  # 104 days: the float division a compact writer does
            assert json.loads(number) == float(value) / 1000.0
        sign = "-" if value < 0 else ""
        assert number == f"{sign}{abs(value) // 1000}.{abs(value) % 1000:03d}"


def test_text_table_pads_after_each_fragment() -> None:
    table = text_table([b'"a"', b'"(1, 2, 3)"'])
    assert _texts(table) == ['"a"        ', '"(1, 2, 3)"']


def _render(timeline: Timeline, **kw: Any) -> dict[str, Any]:
    out = io.BytesIO()
    ChromeReporter(timeline, **kw).render(out)
    trace: dict[str, Any] = json.loads(out.getvalue())
    return trace


def _key(event: dict[str, Any]) -> str:
    # NaN (a rate with no duration) as null, the way JSON writes it.
    def clean(value: Any) -> Any:
        return None if isinstance(value, float) and math.isnan(value) else value

    return json.dumps(
        {k: clean(v) for k, v in event.items() if k not in ("ph", "cat")}
        | {"args": {k: clean(v) for k, v in event["args"].items()}},
        sort_keys=False,
    )


def test_every_slice_reads_back_as_its_columns() -> None:
    timeline = mixed_timeline(3000)
    trace = _render(timeline)
    written = [e for e in trace["traceEvents"] if e["ph"] == "X"]
    assert sorted(map(_key, written)) == sorted(map(_key, expected_events(timeline)))
    cats = {e["cat"] for e in written}
    assert cats == {"kernel", "memcpy", "memset", "sync", "activity"}


def test_order_does_not_depend_on_the_chunk_size() -> None:
    timeline = mixed_timeline(700, seed=6)
    whole = _render(timeline)
    assert _render(timeline, chunk_events=1) == whole
    assert _render(timeline, chunk_events=37) == whole


def test_dim3_codes_stay_the_same_across_chunks() -> None:
    from tfprof.collector.export.args import Dim3Codes, dim3_column

    codes = Dim3Codes()
    rng = np.random.default_rng(12)
    seen: dict[str, int] = {}
    for chunk in range(12):
        x = rng.choice([1, 128, 1024, (1 << 31) - 1], 40)
        if chunk == 5:
            x = np.full(40, 1 << 40)  # too wide to pack: still one code per text
        y, z = rng.choice([1, 2, 65535], 40), rng.choice([1, 3], 40)
        got = codes.codes(x, y, z)
        assert [codes.texts[c] for c in got.tolist()] == dim3_column(x, y, z)
        for c in got.tolist():
            assert seen.setdefault(codes.texts[c], c) == c
    assert len(codes.texts) == len(set(codes.texts))
