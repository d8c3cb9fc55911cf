"""How the host pass links a process's GPU records to its API calls by correlation id
(``analysis.host_pass._Links``): a record links when exactly one call has its id, in
one batch or across batches; ids looked up by index and by their bit and rank."""

from __future__ import annotations

import numpy as np
import pytest

from tfprof.collector.analysis import host_pass

# GPU rows' correlation ids (0: none). 68 and 69 sit on either side of a 64-id word
# boundary from the smallest id (5).
GPU_IDS = [0, 5, 7, 7, 70, 200, 9, 68, 69]


def _link(
    batches: list[list[int]],
) -> tuple[list[int], list[int], list[int], list[int]]:
    links = host_pass._Links(np.array(GPU_IDS, dtype=np.uint32))
    for ids in batches:
        corr = np.array(ids, dtype=np.int64)
        # A call's end and duration from its id: what linked where is visible.
        links.add(corr, corr * 1000 + 500, corr * 10, corr.astype(np.int32))
    start = np.arange(len(GPU_IDS), dtype=np.int64) * 100_000
    api = np.full(len(GPU_IDS), -1, dtype=np.int32)
    found, rows, late = links.finish(start, api, first_call=10)
    latency = np.zeros(len(GPU_IDS), dtype=np.int64)
    latency[rows] = late
    return api.tolist(), found.duration.tolist(), found.name.tolist(), latency.tolist()


@pytest.fixture(params=["by id", "by bit and rank", "by bit and rank, numpy 1"])
def lookup(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> str:
    if request.param != "by id":
        monkeypatch.setattr(host_pass, "DENSE_IDS", 0)
        monkeypatch.setattr(host_pass, "DENSE_MIN_IDS", 0)
    if request.param.endswith("numpy 1"):
        monkeypatch.setattr(host_pass, "popcount", host_pass._swar_popcount)
    return str(request.param)


def test_an_id_called_once_links_and_one_called_twice_does_not(lookup: str) -> None:
    # 7 twice in one batch, 70 once in each of two; 3, 1000 and 4 are waited for by none.
    api, duration, name, latency = _link([[5, 7, 3, 7, 70, 68], [1000, 70, 200, 9, 4, 69]])
    # Calls numbered from 10 in id order: 5, 9, 68, 69, 200.
    assert api == [-1, 10, -1, -1, -1, 14, 11, 12, 13], lookup
    assert duration == [50, 90, 680, 690, 2000]
    assert name == [5, 9, 68, 69, 200]
    # start - the call's end, 0 when the record starts first.
    assert latency == [0, 100_000 - 5_500, 0, 0, 0, 500_000 - 200_500, 600_000 - 9_500,
                       700_000 - 68_500, 800_000 - 69_500]  # fmt: skip


def test_popcount_without_bitwise_count_counts_every_bit() -> None:
    rng = np.random.default_rng(7)
    words = rng.integers(0, np.iinfo(np.int64).max, 1000, dtype=np.int64).astype(np.uint64)
    words[:3] = [0, np.iinfo(np.uint64).max, 1 << 63]
    expected = [bin(int(w)).count("1") for w in words]
    assert host_pass._swar_popcount(words).tolist() == expected
    assert host_pass.popcount(words).tolist() == expected
