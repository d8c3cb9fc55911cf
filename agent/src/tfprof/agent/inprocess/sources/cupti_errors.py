"""Why CUPTI could not be armed, as the one line a user sees.

Each line starts with what could not be done, then says why and what fixes it. Only
called on the failure path, so the ctypes probe of the driver costs the job nothing.
"""

from __future__ import annotations

import ctypes
import re
from importlib import metadata

PREFIX = "could not start GPU tracing"

# CUpti_Result names (cupti.cupti.Result) this module explains.
_VERSION_MISMATCH = {"ERROR_NOT_INITIALIZED", "ERROR_NOT_COMPATIBLE"}
_PRIVILEGES = {"ERROR_INSUFFICIENT_PRIVILEGES", "ERROR_VIRTUALIZED_DEVICE_INSUFFICIENT_PRIVILEGES"}
# cupti-python needs the CUDA 12.8 driver API or newer (its first release).
_OLDEST_CUPTI_PYTHON = (12, 8)


def cupti_python_version() -> str | None:
    try:
        return metadata.version("cupti-python")
    except metadata.PackageNotFoundError:
        return None


def driver_cuda_version() -> tuple[int, int] | None:
    """The CUDA version the installed driver supports (cuDriverGetVersion), if any."""
    try:
        libcuda = ctypes.CDLL("libcuda.so.1")
        version = ctypes.c_int(0)
        if libcuda.cuDriverGetVersion(ctypes.byref(version)) != 0 or version.value <= 0:
            return None
    except (OSError, AttributeError):
        return None
    return version.value // 1000, (version.value % 1000) // 10


def _status_name(exc: BaseException) -> str:
    status = getattr(exc, "status", None)
    if status is None:
        return type(exc).__name__
    try:
        from cupti import cupti

        return str(cupti.Result(status).name)
    except Exception:
        return f"status {status}"


def _is_not_supported(exc: BaseException) -> bool:
    try:
        from cupti._internal.utils import NotSupportedError
    except Exception:
        return type(exc).__name__ == "NotSupportedError"
    return isinstance(exc, NotSupportedError)


def _is_cupti_error(exc: BaseException) -> bool:
    try:
        from cupti import cupti
    except Exception:
        return type(exc).__name__ == "cuptiError"
    return isinstance(exc, cupti.cuptiError)


def _version_advice(name: str, installed: str | None, driver: tuple[int, int] | None) -> str:
    """Line for a CUPTI that will not initialise, usually a driver older than CUPTI."""
    package = f"cupti-python {installed}" if installed else "the installed cupti-python"
    if driver is None:
        return (
            f"{PREFIX}: CUPTI did not initialise ({name}); {package} may need a newer "
            "NVIDIA driver than this one: upgrade the driver or install the cupti-python "
            "release matching its CUDA version"
        )
    d_major, d_minor = driver
    driver_text = f"the NVIDIA driver supports CUDA {d_major}.{d_minor}"
    try:
        wanted = tuple(int(part) for part in (installed or "").split(".")[:2])
    except ValueError:
        wanted = ()
    if len(wanted) == 2 and driver >= wanted:
        return (
            f"{PREFIX}: CUPTI did not initialise ({name}) although {driver_text} and "
            f"{package} is installed; check that a GPU is visible to this process "
            "(CUDA_VISIBLE_DEVICES, container device mounts)"
        )
    upgrade = (
        "upgrade the NVIDIA driver: cupti-python needs a driver for CUDA "
        f"{_OLDEST_CUPTI_PYTHON[0]}.{_OLDEST_CUPTI_PYTHON[1]} or newer"
    )
    if d_major < _OLDEST_CUPTI_PYTHON[0]:
        fix = upgrade
    elif len(wanted) == 2 and d_major < wanted[0]:
        fix = (
            f"install cupti-python {d_major}.x for CUDA {d_major} drivers "
            f"(pip install 'cupti-python<{d_major + 1}'), or upgrade the driver"
        )
    elif driver < _OLDEST_CUPTI_PYTHON:
        fix = upgrade
    else:
        fix = (
            f"install an older cupti-python matching CUDA {d_major}.{d_minor} "
            f"(pip install 'cupti-python<{d_major}.{d_minor + 1}'), or upgrade the driver"
        )
    return (
        f"{PREFIX}: CUPTI did not initialise ({name}): {driver_text} but {package} "
        f"needs a newer one; {fix}"
    )


def describe_cupti_failure(exc: BaseException) -> str:
    """One line saying what could not be done, why, and the fix."""
    if isinstance(exc, ImportError):
        return (
            f"{PREFIX}: cupti-python could not be imported ({exc}); "
            "pip install cupti-python into the job's interpreter"
        )
    if _is_not_supported(exc):
        text = str(exc)
        if "driver" in text.lower() or "libcuda" in text:
            # cupti-python says "CUDA driver is not found (<dlopen error>)": keep the cause.
            match = re.search(r"\((.+)\)\s*$", text)
            return (
                f"{PREFIX}: no CUDA driver found ({match.group(1) if match else text}); "
                "the job runs untraced. Run it on a "
                "host with an NVIDIA GPU and driver, or trace a recording with the replay source"
            )
        return f"{PREFIX}: cupti-python cannot run here ({text})"
    if not _is_cupti_error(exc):
        return f"{PREFIX}: arming CUPTI failed ({type(exc).__name__}: {exc})"
    name = _status_name(exc)
    if name in _VERSION_MISMATCH:
        return _version_advice(name, cupti_python_version(), driver_cuda_version())
    if name == "ERROR_MULTIPLE_SUBSCRIBERS_NOT_SUPPORTED":
        return (
            f"{PREFIX}: another profiler already holds CUPTI in this process ({name}), e.g. "
            "Nsight Systems, the PyTorch or TensorFlow profiler, or DCGM profiling; stop it "
            "or run the job without it"
        )
    if name in _PRIVILEGES:
        return (
            f"{PREFIX}: the NVIDIA driver restricts GPU profiling to administrators ({name}, "
            "NVreg_RestrictProfilingToAdminUsers=1); run the job as root, or set "
            "'options nvidia NVreg_RestrictProfilingToAdminUsers=0' in a file under "
            "/etc/modprobe.d and reload the nvidia module (or reboot)"
        )
    return f"{PREFIX}: CUPTI failed: {name}"
