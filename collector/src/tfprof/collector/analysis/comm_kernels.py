"""What a communication kernel's name says: NCCL's and RCCL's kernel name grammars.

- NCCL up to 2.18: ``ncclKernel_<Coll>_<ALGO>_<PROTO>_<RedOp>_<type>`` (params follow in
  parentheses). Only the LL kernel of each algorithm is compiled, so the protocol in the
  name is not the one that ran; the algorithm is the launch's first operation's.
- NCCL 2.19 and later: ``ncclDevKernel_<Coll>[_<RedOp>_<type>]_<RING|TREE>_LL``,
  ``ncclDevKernel_SendRecv``, ``ncclDevKernel_Generic``: ``RING`` there means "not tree"
  (NVLS, CollNet and PAT launches are named RING too).
- NCCL 2.27+ symmetric kernels: ``ncclSym[k]DevKernel_<Coll>_<algo>[_<red>_<type>]``: one
  operation per launch, its algorithm exact.
- RCCL (ROCm 6): ``ncclDevKernel_Generic`` for everything: no collective in the name.
- A one-rank communicator: no ring kernel; a reduction other than a plain sum runs
  ``oneRankReduce<FuncPreMulSum<T>>`` (a C++ name, mangled), the rest are copies.

A name says at best the first collective of its launch (NCCL's own words): the type a
view reports comes from Kineto's args, PyTorch's ``nccl:<op>`` range or NCCL's own NVTX
range when there is one (``lake.collective_sql``); the name gives the algorithm, never the protocol.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

COMM = re.compile(r"^(nccl|rccl)\w*kernel", re.IGNORECASE)
ONE_RANK = "onerankreduce"
_FAMILY = re.compile(
    r"^(ncclSymkDevKernel|ncclSymDevKernel|ncclDevKernelDebug|ncclDevKernel|ncclKernel|"
    r"rcclKernel)_(\w+)",
    re.IGNORECASE,
)
_COLLS = ("AllReduce", "AllGatherV", "AllGather", "ReduceScatter", "Reduce", "Broadcast",
          "SendRecv", "AllToAll")  # fmt: skip
_ALGOS = ("COLLNET_DIRECT", "COLLNET_CHAIN", "NVLS_TREE", "NVLS", "TREE", "RING", "PAT")


@dataclass(frozen=True)
class CommKernel:
    family: str  # ncclKernel, ncclDevKernel, ncclSymkDevKernel, rcclKernel...
    collective: str  # AllReduce... as named; "Generic": the name does not say
    algorithm: str  # "" when the name does not say; "not TREE" for a modern RING


def is_comm(name: str) -> bool:
    """HTA's communication class (``^nccl.*Kernel``), RCCL and lower case too, and NCCL's
    one-rank reduction (``oneRankReduce`` anywhere in the mangled name); the SQL side's
    LIKE test (``dist_sql.COMM_NAME``) is the same on every such name."""
    return COMM.match(name) is not None or ONE_RANK in name.lower()


def parse(name: str) -> CommKernel | None:
    """The name's family, collective and algorithm; None for a non-communication kernel."""
    if not is_comm(name):
        return None
    m = _FAMILY.match(name.split("(", 1)[0].strip())
    if m is None:
        return CommKernel("other", "Generic", "")
    family, rest = m.group(1), m.group(2)
    low = rest.lower()
    coll = next(
        (c for c in _COLLS if low == c.lower() or low.startswith(c.lower() + "_")), "Generic"
    )
    if coll == "Generic":
        return CommKernel(family, coll, "")
    tail = rest[len(coll) :].strip("_")
    if family.lower().startswith(("ncclsymdevkernel", "ncclsymkdevkernel")):
        parts = tail.split("_")
        if len(parts) >= 3 and parts[-2].lower() in ("sum", "avg", "prod", "min", "max"):
            parts = parts[:-2]
        return CommKernel(family, coll, "_".join(parts))
    tokens = tail.upper().split("_")
    joined = "_" + "_".join(tokens) + "_"
    algo = next((a for a in _ALGOS if f"_{a}_" in joined), "")
    if coll == "SendRecv":
        algo = ""  # p2p: SendRecv_RING_SIMPLE names no algorithm that ran
    elif family.lower().startswith("nccldevkernel") and algo and algo != "TREE":
        algo = "not TREE"
    return CommKernel(family, coll, algo)
