"""The live view: GPUs and jobs, refreshed every interval, sorted and filtered by keys.

Keys: ``s`` next sort order, ``/`` type a filter (Enter or Esc leaves it), ``q`` or
Ctrl-C quits. Scrapes run in a worker thread, so a slow collector never freezes the
keys; a failed scrape is shown in the status line and retried at the next tick.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import ClassVar

from textual.app import App, ComposeResult
from textual.binding import Binding, BindingType
from textual.widgets import DataTable, Footer, Input, Static

from tfprof.collector.errors import CollectorError
from tfprof.collector.top.scrape import Scrape
from tfprof.collector.top.screen import Table, gpu_table, job_table
from tfprof.collector.top.snapshot import NOTE, SORT_KEYS, Snapshot, between

_EMPTY = Snapshot(1.0, (), ())


class TopApp(App[None]):
    TITLE = "tfprof-collector top"
    CSS = """
    #note { color: $text-muted; }
    .title { text-style: bold; margin-top: 1; }
    DataTable { height: auto; max-height: 45%; }
    """
    BINDINGS: ClassVar[list[BindingType]] = [
        Binding("q", "quit", "quit"),
        Binding("ctrl+c", "quit", "quit", show=False, priority=True),
        Binding("s", "next_sort", "sort"),
        Binding("slash", "focus_filter", "filter"),
        Binding("escape", "leave_filter", "leave filter", show=False),
    ]

    def __init__(
        self,
        read: Callable[[], Scrape],
        collector: str,
        interval_s: float = 1.0,
        sort: str = "busy",
        filter_text: str = "",
    ) -> None:
        super().__init__()
        self._read = read
        self.collector = collector
        self.interval_s = interval_s
        self.sort = sort
        self.filter_text = filter_text
        self.snapshot: Snapshot | None = None  # the latest rates, before filter and sort
        self.error: str | None = None
        self._last: Scrape | None = None
        self._reading = False

    def compose(self) -> ComposeResult:
        yield Static(f"{NOTE}.", id="note")
        yield Static("", id="status")
        yield Static("GPUs", classes="title")
        yield DataTable(id="gpus", cursor_type="row", zebra_stripes=True)
        yield Static("Jobs", classes="title")
        yield DataTable(id="jobs", cursor_type="row", zebra_stripes=True)
        yield Input(
            value=self.filter_text,
            placeholder="filter: part of a job, host or GPU name (press / to type here)",
            id="filter",
        )
        yield Footer()

    async def on_mount(self) -> None:
        self.query_one("#jobs", DataTable).focus()
        self._show()
        await self.poll()
        self.set_interval(self.interval_s, self.poll)

    async def poll(self) -> None:
        if self._reading:  # the previous scrape is still running: skip this tick
            return
        self._reading = True
        try:
            scrape = await asyncio.to_thread(self._read)
        except CollectorError as exc:  # down, refused: said in the status line
            self.error = f"{exc}; retrying every {self.interval_s:g} s"
        else:
            if self._last is not None:
                self.snapshot = between(self._last, scrape)
            self._last, self.error = scrape, None
        finally:
            self._reading = False
        self._show()

    def shown(self) -> Snapshot:
        """What the tables hold now: the latest rates, filtered and sorted."""
        return (self.snapshot or _EMPTY).matching(self.filter_text).sorted_by(self.sort)

    def _show(self) -> None:
        snapshot = self.shown()
        self._fill("#gpus", gpu_table(snapshot))
        self._fill("#jobs", job_table(snapshot))
        if self.error:
            status = self.error
        elif self.snapshot is None:
            status = f"reading {self.collector} ..."
        else:
            status = f"{self.collector}: rates over {self.snapshot.interval_s:.1f} s"
        shown = f" · filter {self.filter_text!r}" if self.filter_text else ""
        self.query_one("#status", Static).update(f"{status} · sort: {self.sort}{shown}")

    def _fill(self, selector: str, table: Table) -> None:
        widget = self.query_one(selector, DataTable)
        if not widget.columns:
            widget.add_columns(*table.header)
        widget.clear()
        widget.add_rows(table.rows)

    # -- keys ----------------------------------------------------------------------------

    def action_next_sort(self) -> None:
        self.sort = SORT_KEYS[(SORT_KEYS.index(self.sort) + 1) % len(SORT_KEYS)]
        self._show()

    def action_focus_filter(self) -> None:
        self.query_one("#filter", Input).focus()

    def action_leave_filter(self) -> None:
        self.query_one("#jobs", DataTable).focus()

    def on_input_changed(self, event: Input.Changed) -> None:
        self.filter_text = event.value
        self._show()

    def on_input_submitted(self, event: Input.Submitted) -> None:
        self.action_leave_filter()
