"""The host-side rows of CUPTI records: API calls, NVTX ranges and memory events."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from tfprof.agent.inprocess.sources.cupti_markers import OBJECT_THREAD, MarkerRanges, MarkerRow
from tfprof.core.cupti_labels import API_DRIVER, API_RUNTIME
from tfprof.core.records import COLUMN_INDEX, NUM_COLUMNS, RecordKind

if TYPE_CHECKING:
    import numpy as np
from tfprof.agent.inprocess.sources.cupti_name_ids import NameIds

_C = COLUMN_INDEX  # short alias for the column rows below


class HostRows(NameIds):
    """The host-side half of ``RecordConverter``, which sets the state declared here."""

    _runtime_kind: int
    markers: MarkerRanges

    def _fill_api(self, recs: Any) -> np.ndarray:
        import numpy as np

        out = np.zeros((NUM_COLUMNS, len(recs)), dtype=np.int64)
        start = recs["start"].astype(np.int64)
        out[_C["kind"]] = RecordKind.API
        out[_C["start_ns"]] = start
        np.maximum(recs["end"].astype(np.int64) - start, 0, out=out[_C["duration_ns"]])
        out[_C["thread"]] = recs["thread_id"]
        out[_C["correlation"]] = recs["correlation_id"]
        cbid = recs["cbid"].astype(np.int64)
        out[_C["cbid"]] = cbid
        out[_C["return_value"]] = recs["return_value"]
        category = np.where(recs["kind"] == self._runtime_kind, API_RUNTIME, API_DRIVER)
        out[_C["category"]] = category
        out[_C["name"]] = self._map_distinct((category << 32) | cbid, self._api_name_id)
        return out

    def _fill_markers(self, recs: Any) -> np.ndarray:
        import numpy as np

        on_thread = recs["object_kind"] == OBJECT_THREAD
        threads = np.where(on_thread, recs["object_id"]["pt"]["thread_id"], 0)
        rows = self.markers.add(
            zip(
                recs["flags_"].tolist(),
                recs["timestamp"].tolist(),
                recs["id"].tolist(),
                threads.tolist(),
                recs["name"].tolist(),
                recs["domain"].tolist(),
                strict=True,
            ),
            self._marker_name_id,
            self._domain_id,
        )
        return self._marker_rows(rows)

    def _marker_rows(self, rows: list[MarkerRow]) -> np.ndarray:
        import numpy as np

        out = np.zeros((NUM_COLUMNS, len(rows)), dtype=np.int64)
        if rows:
            start, end, thread, name, domain, marker = np.array(rows, dtype=np.int64).T
            out[_C["kind"]] = RecordKind.MARKER
            out[_C["start_ns"]] = start
            out[_C["duration_ns"]] = end - start
            out[_C["thread"]] = thread
            out[_C["name"]] = name
            out[_C["category"]] = domain
            out[_C["external_id"]] = marker
        return out

    def _fill_memory(self, recs: Any) -> np.ndarray:
        import numpy as np

        out = np.zeros((NUM_COLUMNS, len(recs)), dtype=np.int64)
        out[_C["kind"]] = RecordKind.MEMORY
        out[_C["start_ns"]] = recs["timestamp"].astype(np.int64)
        out[_C["device"]] = recs["device_id"]
        out[_C["context"]] = recs["context_id"]
        out[_C["stream"]] = recs["stream_id"]
        out[_C["correlation"]] = recs["correlation_id"]
        out[_C["bytes"]] = recs["bytes"].astype(np.int64)
        out[_C["address"]] = recs["address"].astype(np.int64)
        out[_C["memory_op"]] = recs["memory_operation_type"]
        out[_C["src_kind"]] = recs["memory_kind"]
        return out
