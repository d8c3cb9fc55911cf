"""Where DuckDB spills what does not fit its memory limit: a directory only this user can
enter, since spilled blocks are the lake's records.

``$TMPDIR/tfprof-duckdb-<uid>``, made 0700; when that name is taken by a link, another
user's directory or one others can enter (someone made it first), a fresh private one
from ``mkdtemp`` instead.
"""

from __future__ import annotations

import os
import stat
import tempfile
from pathlib import Path


def spill_dir() -> str:
    """The directory (made if missing), as a SQL string literal's body."""
    path = Path(tempfile.gettempdir()) / f"tfprof-duckdb-{os.getuid()}"
    try:
        path.mkdir(mode=0o700)
    except FileExistsError:
        pass
    st = path.lstat()
    if not stat.S_ISDIR(st.st_mode) or st.st_uid != os.getuid() or st.st_mode & 0o077:
        path = Path(tempfile.mkdtemp(prefix="tfprof-duckdb-"))
    return str(path).replace("'", "''")
