"""Versions every part reports: the release, and the wire protocol agents and collectors speak."""

__version__ = "0.1.0"

# The version of the tfprof.v1 stream protocol that agents say in their Hello and
# collectors accept; bump it when a change is not backwards compatible.
# 2: a hello carries its stream's secret (a resume without it is refused), batch
#    sequence numbers advance by a bounded step, capture replies name no stream id.
PROTOCOL_VERSION = 2
