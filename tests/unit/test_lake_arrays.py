"""Arrow columns to numpy without pyarrow's ``to_numpy`` (``lake.arrays``), and a lake
read for advice without pandas imported (``to_numpy`` imports it, at a cost:
bench/results/cpu-design-choices.txt)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import numpy as np
import pyarrow as pa
import pytest

from tests.traces import shared_traces
from tfprof.collector.lake.arrays import numbers
from tfprof.collector.lake.location import lake_of
from tfprof.collector.lake.publish import compact_data_dir
from tfprof.collector.lake.segments import collector_id
from tfprof.collector.store import Store
from tfprof.collector.store.importer import import_files

TYPES = [pa.int8(), pa.int16(), pa.int32(), pa.int64(), pa.uint16(), pa.uint32(),
         pa.uint64(), pa.float32(), pa.float64()]  # fmt: skip


@pytest.mark.parametrize("type_", TYPES)
def test_numbers_are_the_values_to_numpy_gives(type_: pa.DataType) -> None:
    values = pa.array(np.arange(-3 if pa.types.is_signed_integer(type_) else 0, 40), type_)
    for column in (values, values.slice(5, 20), pa.chunked_array([values.slice(1, 7), values])):
        got = numbers(column)
        assert got.dtype == column.to_numpy().dtype
        assert got.tolist() == column.to_numpy().tolist()
    empty = pa.chunked_array([], type_)
    assert numbers(empty).shape == (0,)


def test_nulls_read_as_asked_or_as_to_numpy_gives_them() -> None:
    column = pa.array([1, None, 3, None, 5], pa.uint32()).slice(1)
    assert numbers(column, null=0).tolist() == [0, 3, 0, 5]
    nan = numbers(column)
    assert np.isnan(nan[0]) and nan[1] == 3  # to_numpy's NaN for a null integer
    assert numbers(pa.array([True, False])).tolist() == [True, False]  # bits: converted


def test_a_lake_is_read_for_advice_without_pandas(tmp_path: Path) -> None:
    pytest.importorskip("pandas")  # where it is not installed nothing could import it
    data = tmp_path / "d"
    trace = shared_traces() / "kineto-hta/simple_add.json.gz"
    import_files(Store(data, fsync=False), [trace], "kineto", as_steps=False, run_id="r1")
    _done, failed = compact_data_dir(data, lake_of(data), collector_id(data))
    assert not failed
    script = (
        "import sys\n"
        "from tfprof.collector.advice import advise\n"
        "from tfprof.collector.lake.reader import open_jobs\n"
        "from tfprof.collector.read.lake_catalog import catalog\n"
        "from tfprof.collector.timeline.prepare import TimeWindow\n"
        f"cat = catalog(open_jobs([{str(data)!r}]).jobs, TimeWindow())\n"
        "read, findings = advise(cat)\n"
        "assert findings, 'no finding'\n"
        "print('pandas' in sys.modules)\n"
    )
    run = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True,
                         timeout=120, check=False)  # fmt: skip
    assert run.returncode == 0, run.stderr
    assert run.stdout.strip() == "False"
