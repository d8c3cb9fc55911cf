"""Which lake a data dir compacts into, and what a ``--data-dir`` argument names.

A data dir compacts into ``<data-dir>/lake`` unless ``serve --lake URL`` named another
lake (shared storage, an object store); serve records that choice in
``<data-dir>/lake.url`` so readers of the data dir find its segments.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from tfprof.collector.errors import NotFound
from tfprof.collector.lake.fs import Lake, is_url, open_lake
from tfprof.collector.store.files import write_atomic

LAKE_URL = "lake.url"
DEFAULT_LAKE = "lake"


def lake_of(data_dir: Path) -> Lake:
    try:
        url = (data_dir / LAKE_URL).read_text().strip()
    except FileNotFoundError:
        url = ""
    return open_lake(url or data_dir / DEFAULT_LAKE)


def set_lake(data_dir: Path, url: str) -> Lake:
    """Make ``url`` (empty: the default) this data dir's lake; returns it."""
    lake = open_lake(url or data_dir / DEFAULT_LAKE)
    if url:
        write_atomic(data_dir / LAKE_URL, (url + "\n").encode())
    else:
        (data_dir / LAKE_URL).unlink(missing_ok=True)
    return lake


def is_data_dir(path: Path) -> bool:
    return (path / "jobs").is_dir()


@dataclass(frozen=True)
class Source:
    """One ``--data-dir`` argument: a lake, and the data dir whose logs feed it, if any."""

    lake: Lake
    data_dir: Path | None = None


def distinct_lakes(sources: list[Source]) -> list[Lake]:
    """The sources' lakes, each once (two data dirs may share one lake)."""
    return list({(s.lake.fs.type_name, s.lake.root): s.lake for s in sources}.values())


def resolve(argument: str) -> Source:
    """A collector data dir (its lake plus the logs not compacted yet), a lake directory,
    or a lake URL. A local path that does not exist is ``NotFound``."""
    local = argument[len("file://") :] if argument.startswith("file://") else argument
    if is_url(local):
        return Source(open_lake(argument))
    path = Path(local)
    if not path.is_dir():
        raise NotFound(f"no such data dir or lake: {argument}")
    if is_data_dir(path):
        return Source(lake_of(path), path)
    return Source(open_lake(argument))
