"""The open-files limit of a long-running service (the collector, the node daemon).

Every client connection is a descriptor: with the usual soft limit of 1,024 (systemd's
default for a unit that sets no LimitNOFILE), a service runs out long before its other
limits bite. Both services lift the soft limit to the hard one at start and size their
connection caps by what they got. Standard library only.
"""

from __future__ import annotations

import resource

# Descriptors a service keeps for itself beyond its client connections (log files,
# spool and store files, the spare one a relay keeps for shedding at EMFILE).
RESERVED_FDS = 64


def raise_open_files_limit() -> int:
    """Lift the soft RLIMIT_NOFILE to the hard limit (where the platform lets us);
    returns the soft limit now in force (a large number when unlimited)."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft != resource.RLIM_INFINITY and (hard == resource.RLIM_INFINITY or soft < hard):
        try:
            resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
            soft = hard
        except (ValueError, OSError):  # some platforms cap it lower: keep what we have
            pass
    return soft if soft != resource.RLIM_INFINITY else 1 << 30
