"""The real tracer: CUPTI activity tracing through cupti-python, as a ``Source``.

Imported inside the user's process at start-up, so nothing heavy happens at import time:
cupti-python (and with it numpy and cuda.bindings) is imported in ``bind`` / ``start``.
This module owns the source's lifecycle (bind, start, the buffer callbacks, flush at
stop); turning a completed buffer into records is ``cupti_records.RecordConverter``'s,
finding and importing cupti-python ``cupti_loading``'s, the kinds it enables
``cupti_kinds``'s.
"""

from __future__ import annotations

import contextlib
import ctypes
import threading
from collections.abc import Callable, Sequence
from types import ModuleType
from typing import TYPE_CHECKING, Any

from tfprof.agent.inprocess.sources.base import Sink, SourceUnavailable
from tfprof.agent.inprocess.sources.cupti_kinds import (
    arming_kinds,
    host_kinds,
    optional_kinds,
    window_kinds,
)
from tfprof.agent.inprocess.sources.cupti_loading import import_cupti, loaded_libcupti

if TYPE_CHECKING:
    from tfprof.agent.inprocess.sources.cupti_records import RecordConverter


class CuptiSource:
    """CUPTI activity tracing through cupti-python.

    ``start`` registers the buffer callbacks and enables DEVICE and CONTEXT, and when
    capturing (always, unless a capture mode arms it idle) CONCURRENT_KERNEL, MEMCPY,
    MEMCPY2, MEMSET, and where the driver accepts them SYNCHRONIZATION and the host side:
    RUNTIME and DRIVER (``api``, filtered to the calls ``cupti_api`` names), MARKER
    (``markers``: NVTX ranges) and MEMORY2 (``memory``); capture windows switch all but
    DEVICE and CONTEXT on and off (``set_capturing``). CUPTI fills ``buffer_bytes``
    buffers and hands each completed one to ``buffer_completed``. ``flush_period_ms`` > 0 asks CUPTI
    to complete partial buffers that often, so records stream while the job runs rather
    than when a buffer fills up or at the end.
    """

    name = "cupti"
    capture_lead_ns = 0  # CUPTI acts when asked, not ahead

    def __init__(
        self,
        buffer_bytes: int = 8 << 20,
        flush_period_ms: int = 0,
        launcher_cupti: tuple[str, str] = ("", ""),
        *,
        api: bool = True,
        markers: bool = True,
        memory: bool = True,
        launcher_nvtx: str = "",
        finalize_after_window: bool = False,
    ) -> None:
        self.buffer_bytes = buffer_bytes
        self.api = api
        self.markers = markers
        self.memory = memory
        # The NVTX_INJECTION64_PATH the launcher set (see point_nvtx_here); "" if none.
        self.launcher_nvtx = launcher_nvtx
        self.launcher_cupti = launcher_cupti  # (folder, ABI): see import_cupti
        self.flush_period_ms = flush_period_ms
        self.dropped = 0  # records lost in our own callback (also reported to the sink)
        self._cupti: ModuleType | None = None
        self._sink: Sink | None = None
        self._converter: RecordConverter | None = None
        self.finalize_after_window = finalize_after_window
        self._enabled: list[int] = []
        self._warned = False
        self._window_warned = False
        self._capturing = False
        self._finalized = False
        self._lock = threading.Lock()
        self._control_lock = threading.Lock()  # capture windows against stop()

    @property
    def enabled_kinds(self) -> tuple[int, ...]:
        return tuple(self._enabled)

    @property
    def cupti_module(self) -> ModuleType | None:
        """cupti-python's module once bound (launch stacks subscribe through it)."""
        return self._cupti

    @property
    def converter(self) -> RecordConverter | None:
        """The buffer decoder (after ``bind``); the benchmark times it on its own."""
        return self._converter

    def bind(self, sink: Sink) -> None:
        """Import cupti-python and prepare the callbacks, without touching CUPTI itself."""
        cupti = import_cupti(*self.launcher_cupti)
        from tfprof.agent.inprocess.sources.cupti_records import RecordConverter

        self._cupti = cupti
        self._sink = sink
        self._converter = RecordConverter(sink, cupti)

    def start(self, sink: Sink, capturing: bool = True) -> None:
        self.bind(sink)
        try:
            self._arm()
            if capturing:
                self._enable_window_kinds()
                self._capturing = True
        except Exception as exc:
            self._disable_all()
            from tfprof.agent.inprocess.sources.cupti_errors import describe_cupti_failure

            raise SourceUnavailable(describe_cupti_failure(exc)) from exc

    def _arm(self) -> None:
        """Register the buffer callbacks and the per-device kinds (CUPTI attaches)."""
        cupti = self._cupti
        assert cupti is not None
        cupti.activity_register_callbacks(self.buffer_requested, self.buffer_completed)
        self._finalized = False
        for kind in arming_kinds(cupti):
            cupti.activity_enable(kind)
            self._enabled.append(kind)
        if self.flush_period_ms > 0:
            # an optimisation only: records still come when a buffer fills up
            with contextlib.suppress(Exception):
                cupti.activity_flush_period(self.flush_period_ms)

    def _enable_window_kinds(self) -> None:
        cupti = self._cupti
        assert cupti is not None
        for kind in window_kinds(cupti):
            cupti.activity_enable(kind)
            self._enabled.append(kind)
        for kind in optional_kinds(cupti):
            self._enable_optional(kind)  # e.g. an old driver: host waits go unrecorded
        self._enable_host_side(cupti)

    def set_capturing(self, on: bool, at_ns: int) -> None:
        """Open or close a capture window now (CUPTI cannot act ahead: ``at_ns`` is
        only the edge this call is for).

        Closing disables the per-operation kinds and flushes, so the window's records
        leave at once; with ``finalize_after_window`` it then detaches CUPTI
        (``finalize``) and the next window attaches it again. Runs on the hook's
        capture thread: flushing calls ``buffer_completed`` here, never from inside a
        buffer callback, which is what makes ``finalize`` safe.
        """
        cupti = self._cupti
        if cupti is None:
            return
        with self._control_lock:
            try:
                if on:
                    if self._finalized:
                        self._arm()
                    self._enable_window_kinds()
                    self._capturing = True
                    return
                if not self._capturing:
                    return
                self._capturing = False
                window = set(window_kinds(cupti) + optional_kinds(cupti) + host_kinds(cupti))
                self._disable(lambda kind: kind in window)
                self._flush(cupti)
                if self.finalize_after_window:
                    self._report_cupti_dropped(cupti)
                    self._enabled.clear()  # finalize disables everything
                    cupti.finalize()
                    self._finalized = True
            except Exception as exc:
                self._window_failed(on, exc)

    def _window_failed(self, on: bool, exc: BaseException) -> None:
        cupti = self._cupti
        if on and cupti is not None:
            window = set(window_kinds(cupti) + optional_kinds(cupti) + host_kinds(cupti))
            self._disable(lambda kind: kind in window)
        if self._sink is None or self._window_warned:
            return
        self._window_warned = True
        from tfprof.agent.inprocess.sources.cupti_errors import PREFIX, describe_cupti_failure

        why = describe_cupti_failure(exc).removeprefix(f"{PREFIX}: ")
        what = "open" if on else "close"
        with contextlib.suppress(Exception):
            self._sink.warn(
                f"cannot {what} a capture window: {why} (later failures are not reported)"
            )

    def _enable_optional(self, kind: int) -> bool:
        assert self._cupti is not None
        try:
            self._cupti.activity_enable(kind)
        except Exception:
            return False
        self._enabled.append(kind)
        return True

    def _enable_host_side(self, cupti: ModuleType) -> None:
        """API calls, NVTX markers and device memory: each optional, each on its switch."""
        ak = cupti.ActivityKind
        if self.api or self.markers:
            # OS thread ids (gettid), as host metrics and other tools show threads.
            with contextlib.suppress(Exception):
                cupti.set_thread_id_type(int(cupti.ActivityThreadIdType.SYSTEM))
        if self.api:
            from tfprof.agent.inprocess.sources.cupti_api import ApiNames, apply_filter
            from tfprof.core.cupti_labels import API_DRIVER, API_RUNTIME

            names = ApiNames(cupti)
            for kind, category in ((ak.RUNTIME, API_RUNTIME), (ak.DRIVER, API_DRIVER)):
                if not self._enable_optional(int(kind)):
                    continue
                try:
                    apply_filter(cupti, names, category)
                except Exception:
                    pass  # a CUPTI without per-call filters: every call is kept
        if self.markers and self._enable_optional(int(ak.MARKER)):
            self.point_nvtx_here()
        if self.memory:
            self._enable_optional(int(ak.MEMORY2))

    def point_nvtx_here(self) -> None:
        """Make NVTX inject the libcupti this process loaded, so NVTX ranges reach our
        MARKER records. The launcher points NVTX_INJECTION64_PATH at its own
        cupti-python's libcupti; a job with a cupti-python of its own loads another copy,
        and NVTX must load that one. A value the user set is left alone. NVTX reads the
        variable at its first call, which comes after this hook in a Python process."""
        from tfprof.agent.inprocess import config

        current = config.nvtx_injection_path()
        if current and current != self.launcher_nvtx:
            return
        loaded = loaded_libcupti()
        if loaded and loaded != current:
            config.set_nvtx_injection_path(loaded)

    # -- CUPTI callbacks: run on CUPTI's thread or inside activity_flush_all ------------

    def buffer_requested(self) -> tuple[int, int]:
        return self.buffer_bytes, 0  # 0: as many records as fit

    def buffer_completed(self, activities: Sequence[Any]) -> None:
        converter, sink = self._converter, self._sink
        if converter is None or sink is None:
            return
        try:
            with self._lock:
                table = converter.convert(activities)
            if table is not None:
                sink.submit(table)  # never wait: this may be the training thread
        except Exception as exc:
            self._drop(len(activities), exc)

    def _drop(self, count: int, exc: BaseException) -> None:
        try:
            self.dropped += count
            assert self._sink is not None
            self._sink.add_tracer_dropped(count)
            if not self._warned:
                self._warned = True
                self._sink.warn(
                    f"dropped CUPTI records: converting a buffer failed "
                    f"({type(exc).__name__}: {exc}); later failures are counted silently"
                )
        except Exception:
            pass

    # -- the rest of the Source protocol ------------------------------------------------

    def tracer_clock_ns(self) -> int | None:
        try:
            module: Any = self._cupti
            if module is None:
                from cupti import cupti as module
            return int(module.get_timestamp())
        except Exception:
            return None

    def stop(self, deadline: float) -> None:
        """Force out every buffer, report CUPTI's own losses, disable the kinds.

        ``activity_flush_all`` completes buffers synchronously through
        ``buffer_completed``, which never blocks on the sink, so this returns quickly;
        CUPTI offers no way to bound the flush itself by ``deadline``.
        """
        cupti = self._cupti
        with self._control_lock:
            if cupti is None or not self._enabled:
                return
            self._flush(cupti)
            self._close_open_ranges()
            self._report_cupti_dropped(cupti)
            self._disable_all()

    def _flush(self, cupti: ModuleType) -> None:
        try:
            flag = int(getattr(cupti.ActivityFlag, "FLUSH_FORCED", 1))
            cupti.activity_flush_all(flag)
        except Exception:
            pass

    def _close_open_ranges(self) -> None:
        """NVTX ranges still open at the end lasted until now: record them so."""
        converter, sink = self._converter, self._sink
        if converter is None or sink is None or not len(converter.markers):
            return
        open_ranges = len(converter.markers)
        try:
            now = self.tracer_clock_ns()
            with self._lock:
                table = converter.close_markers(now or 0)
            if table is not None:
                sink.submit(table, wait=True)  # at exit: delivery may wait for room
        except Exception as exc:
            self._drop(open_ranges, exc)

    def _report_cupti_dropped(self, cupti: ModuleType) -> None:
        try:
            dropped = ctypes.c_size_t(0)
            # context NULL, stream 0: the global queue, where all activity buffers go.
            cupti.activity_get_num_dropped_records(0, 0, ctypes.addressof(dropped))
            if dropped.value and self._sink is not None:
                self._sink.add_tracer_dropped(int(dropped.value))
        except Exception:
            pass

    def _disable_all(self) -> None:
        self._disable(lambda kind: True)

    def _disable(self, which: Callable[[int], bool]) -> None:
        cupti = self._cupti
        for kind in [k for k in self._enabled if which(k)]:
            self._enabled.remove(kind)
            try:
                if cupti is not None:
                    cupti.activity_disable(kind)
            except Exception:
                pass
