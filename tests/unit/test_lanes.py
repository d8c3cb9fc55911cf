"""assign_lanes: overlapping slices on one track split into lanes, as tf.timeline did."""

from __future__ import annotations

import itertools
import random

import numpy as np
import pytest

from tfprof.collector.timeline import lanes
from tfprof.collector.timeline.lanes import assign_lanes


def test_assign_lanes_hand_example() -> None:
    start = np.array([0, 1, 2, 6, 7, 20])
    end = np.array([5, 3, 4, 8, 9, 21])
    lane, n = assign_lanes(start, end)
    # [0,5] lane 0; [1,3] lane 1; [2,4] lane 2; [6,8] lane 0 (5 <= 6);
    # [7,9] lane 1 (lane 0 busy till 8, lane 1 free since 3); [20,21] alone: lane 0
    assert lane.tolist() == [0, 1, 2, 0, 1, 0]
    assert n == 3


def test_assign_lanes_touching_and_empty() -> None:
    lane, n = assign_lanes(np.array([0, 5, 5, 9]), np.array([5, 5, 9, 12]))
    assert lane.tolist() == [0, 0, 0, 0] and n == 1
    lane, n = assign_lanes(np.zeros(0, np.int64), np.zeros(0, np.int64))
    assert lane.tolist() == [] and n == 0


def _reference_lanes(start: list[int], end: list[int]) -> list[int]:
    lanes: list[int] = []
    out = []
    for s, e in zip(start, end, strict=True):
        for i, last in enumerate(lanes):
            if last <= s:
                lanes[i] = e
                out.append(i)
                break
        else:
            lanes.append(e)
            out.append(len(lanes) - 1)
    return out


@pytest.mark.parametrize("seed", range(5))
def test_assign_lanes_matches_plain_greedy(seed: int) -> None:
    rng = random.Random(seed)
    start = sorted(rng.randrange(0, 500) for _ in range(300))
    end = [s + rng.choice([0, 1, 3, 10, 40]) for s in start]
    lane, n = assign_lanes(np.array(start), np.array(end))
    expected = _reference_lanes(start, end)
    assert lane.tolist() == expected
    assert n == max(expected) + 1


@pytest.mark.parametrize("batch", [1, 2, 7])
def test_assign_lanes_in_small_batches_of_clusters_is_the_same(
    batch: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    rng = random.Random(batch)
    start = sorted(rng.randrange(0, 2000) for _ in range(400))
    end = [s + rng.choice([0, 1, 3, 10, 40]) for s in start]
    monkeypatch.setattr(lanes, "FIRST_FIT_BATCH", batch)
    lane, n = assign_lanes(np.array(start), np.array(end))
    expected = _reference_lanes(start, end)
    assert lane.tolist() == expected
    assert n == max(expected) + 1


@pytest.mark.parametrize("seed", range(3))
def test_assign_lanes_many_lanes_matches_plain_greedy(seed: int) -> None:
    """Dozens of slices at once: lanes past the chained ones come from the heap walk."""
    rng = random.Random(seed)
    start = sorted(rng.randrange(0, 200) for _ in range(600))
    end = [s + rng.choice([0, 5, 20, 60]) for s in start]
    lane, n = assign_lanes(np.array(start), np.array(end))
    expected = _reference_lanes(start, end)
    assert n > 2 * lanes.CHAINED_LANES
    assert lane.tolist() == expected
    assert n == max(expected) + 1


@pytest.mark.parametrize("seed", range(6))
def test_lanes_carried_chunk_to_chunk_are_those_of_the_whole_track(seed: int) -> None:
    """CarriedLanes over a track cut at any points (clusters running across a cut, many
    lanes at once, chunks of one slice) gives every slice the lane assign_lanes gives it
    over the whole track, and counts the same lanes."""
    rng = np.random.default_rng(seed)
    n = 3000
    start = np.sort(rng.integers(0, 40_000, n))
    end = start + rng.integers(0, 60 if seed % 2 else 600, n)  # sparse, or crowded
    whole, count = assign_lanes(start, end)
    cuts = np.unique(np.concatenate([[0, n], rng.integers(0, n, 40), [1, 2]]))
    carried = lanes.CarriedLanes()
    got = np.concatenate([
        carried.assign(7, start[a:b], end[a:b]) for a, b in itertools.pairwise(cuts.tolist())
    ])  # fmt: skip
    assert got.tolist() == whole.tolist()
    assert carried.lanes[7] == count > 1
