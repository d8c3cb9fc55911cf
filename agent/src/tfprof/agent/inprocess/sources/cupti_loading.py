"""Finding and loading cupti-python and its libcupti: the job's own, else the launcher's.

What a compiled extension needs of this interpreter (``interpreter_abi``), the one line
a job without cupti-python gets, and which libcupti is installed or loaded.
"""

from __future__ import annotations

import os
import shlex
import sys
from types import ModuleType

from tfprof.agent.inprocess.sources.base import SourceUnavailable


def interpreter_abi() -> str:
    """What a compiled extension such as cupti-python needs of the interpreter running
    it: implementation and version, ABI flags (e.g. free-threaded) and platform."""
    import sysconfig

    tag = sys.implementation.cache_tag or sys.implementation.name
    return f"{tag}{getattr(sys, 'abiflags', '')}-{sysconfig.get_platform()}"


def not_installed(why: str = "") -> str:
    """The one line a job without cupti-python gets: the install command for its Python."""
    return (
        f"cupti-python is not installed in this interpreter{why} (install it with "
        f"`{shlex.quote(sys.executable)} -m pip install cupti-python`)"
    )


# In TFPROF_CUPTI_PATH: this interpreter's ABI (the bundle's folder for it).
ABI_PLACEHOLDER = "{abi}"


def import_cupti(launcher_path: str = "", launcher_abi: str = "") -> ModuleType:
    """cupti-python's ``cupti`` module: the job's own, else the launcher's (``launcher_path``,
    built for ``launcher_abi``) when this interpreter can load it."""
    try:
        from cupti import cupti

        return cupti
    except ImportError as exc:
        if exc.name != "cupti" or not launcher_path:
            # Installed but broken (a missing library, say) is its own problem.
            raise SourceUnavailable(not_installed() if exc.name == "cupti" else str(exc)) from exc
    abi = interpreter_abi()
    if ABI_PLACEHOLDER in launcher_path:
        # A bundle (tfprof-agent bundle) holds one cupti-python folder per ABI.
        launcher_path = launcher_path.replace(ABI_PLACEHOLDER, abi)
        if not os.path.isdir(launcher_path):
            raise SourceUnavailable(not_installed(f", and the tfprof bundle has none for {abi}"))
        launcher_abi = abi
    if launcher_abi != abi:
        raise SourceUnavailable(
            not_installed(f", and the launcher's is built for {launcher_abi}, not {abi}")
        )
    # Last on the path: the job's own packages (numpy, say) still come first.
    sys.path.append(launcher_path)
    try:
        from cupti import cupti
    except ImportError as exc:
        raise SourceUnavailable(not_installed(f", and the launcher's failed: {exc}")) from exc
    return cupti


def libcupti_path() -> str:
    """The libcupti of the cupti-python installed here (the NVIDIA wheel it requires),
    found from package metadata without loading anything; "" when there is none.

    cupti-python loads this library (through cuda-pathfinder, which looks in the
    installed wheels first), so NVTX pointed at it injects into the same copy."""
    from importlib import metadata

    for dist in metadata.distributions():
        name = (dist.metadata["Name"] or "").lower().replace("_", "-")
        if not name.startswith("nvidia-cuda-cupti"):
            continue
        for file in dist.files or ():
            if file.name.startswith("libcupti.so"):
                return os.path.realpath(file.locate())
    return ""


def loaded_libcupti() -> str:
    """The libcupti this process has loaded (from /proc/self/maps); "" when none."""
    try:
        with open("/proc/self/maps") as maps:
            for line in maps:
                path = line.rstrip("\n").partition("/")[2]
                if path and "/libcupti.so" in f"/{path}":
                    return f"/{path}"
    except OSError:
        pass
    return ""
