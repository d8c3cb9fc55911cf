"""CUPTI failures become one clear line, tested with the exceptions cupti-python raises."""

from __future__ import annotations

from typing import Any

import pytest
from cupti import cupti

from tfprof.agent.inprocess.sources import cupti_errors
from tfprof.agent.inprocess.sources.cupti_errors import describe_cupti_failure, driver_cuda_version

HAVE_DRIVER = driver_cuda_version() is not None
R = cupti.Result


def error(status: Any) -> BaseException:
    return cupti.cuptiError(status)


def with_versions(
    monkeypatch: pytest.MonkeyPatch, installed: str | None, driver: tuple[int, int] | None
) -> None:
    monkeypatch.setattr(cupti_errors, "cupti_python_version", lambda: installed)
    monkeypatch.setattr(cupti_errors, "driver_cuda_version", lambda: driver)


@pytest.mark.skipif(HAVE_DRIVER, reason="a CUDA driver is present")
def test_real_not_supported_error_from_activity_enable_says_no_driver() -> None:
    with pytest.raises(RuntimeError) as info:
        cupti.activity_enable(cupti.ActivityKind.CONCURRENT_KERNEL)
    assert not isinstance(info.value, cupti.cuptiError)
    line = describe_cupti_failure(info.value)
    assert line.startswith("could not start GPU tracing: no CUDA driver found (libcuda.so.1")
    assert "CUDA driver is not found" not in line  # cupti-python's wording, not repeated
    assert "\n" not in line


@pytest.mark.skipif(HAVE_DRIVER, reason="a CUDA driver is present")
def test_driver_version_is_none_without_libcuda() -> None:
    assert driver_cuda_version() is None


@pytest.mark.parametrize("status", [R.ERROR_NOT_INITIALIZED, R.ERROR_NOT_COMPATIBLE])
def test_old_driver_names_versions_and_the_package_that_fits(
    monkeypatch: pytest.MonkeyPatch, status: object
) -> None:
    with_versions(monkeypatch, "13.4.0", (12, 4))
    line = describe_cupti_failure(error(status))
    assert line.startswith("could not start GPU tracing: CUPTI did not initialise")
    assert status.name in line  # type: ignore[attr-defined]
    assert "driver supports CUDA 12.4" in line
    assert "cupti-python 13.4.0" in line
    assert "install cupti-python 12.x for CUDA 12 drivers" in line
    assert "pip install 'cupti-python<13'" in line


def test_driver_of_the_same_major_but_older_minor(monkeypatch: pytest.MonkeyPatch) -> None:
    with_versions(monkeypatch, "13.4.0", (13, 0))
    line = describe_cupti_failure(error(R.ERROR_NOT_INITIALIZED))
    assert "driver supports CUDA 13.0" in line
    assert "pip install 'cupti-python<13.1'" in line
    assert "upgrade the driver" in line


@pytest.mark.parametrize(("installed", "driver"), [("13.4.0", (11, 8)), ("12.8.0", (12, 4))])
def test_driver_too_old_for_any_cupti_python(
    monkeypatch: pytest.MonkeyPatch, installed: str, driver: tuple[int, int]
) -> None:
    with_versions(monkeypatch, installed, driver)
    line = describe_cupti_failure(error(R.ERROR_NOT_COMPATIBLE))
    assert f"driver supports CUDA {driver[0]}.{driver[1]}" in line
    assert "upgrade the NVIDIA driver: cupti-python needs a driver for CUDA 12.8 or newer" in line


def test_unknown_driver_version_still_names_the_installed_package(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    with_versions(monkeypatch, "13.4.0", None)
    line = describe_cupti_failure(error(R.ERROR_NOT_INITIALIZED))
    assert "cupti-python 13.4.0" in line
    assert "newer NVIDIA driver" in line


def test_new_enough_driver_points_at_device_visibility(monkeypatch: pytest.MonkeyPatch) -> None:
    with_versions(monkeypatch, "13.4.0", (13, 4))
    line = describe_cupti_failure(error(R.ERROR_NOT_INITIALIZED))
    assert "CUDA_VISIBLE_DEVICES" in line


def test_installed_version_is_read_from_package_metadata() -> None:
    from importlib import metadata

    assert cupti_errors.cupti_python_version() == metadata.version("cupti-python")


def test_multiple_subscribers_names_the_other_profilers() -> None:
    line = describe_cupti_failure(error(R.ERROR_MULTIPLE_SUBSCRIBERS_NOT_SUPPORTED))
    assert line.startswith("could not start GPU tracing: another profiler already holds CUPTI")
    for name in ("Nsight Systems", "PyTorch", "TensorFlow", "DCGM"):
        assert name in line


@pytest.mark.parametrize(
    "status",
    [R.ERROR_INSUFFICIENT_PRIVILEGES, R.ERROR_VIRTUALIZED_DEVICE_INSUFFICIENT_PRIVILEGES],
)
def test_insufficient_privileges_explains_the_driver_setting(status: object) -> None:
    line = describe_cupti_failure(error(status))
    assert "NVreg_RestrictProfilingToAdminUsers=1" in line
    assert "as root" in line
    assert "NVreg_RestrictProfilingToAdminUsers=0" in line and "/etc/modprobe.d" in line


@pytest.mark.parametrize("status", [R.ERROR_UNKNOWN, R.ERROR_INVALID_KIND, R.ERROR_OUT_OF_MEMORY])
def test_other_statuses_name_the_status(status: object) -> None:
    assert describe_cupti_failure(error(status)) == (
        f"could not start GPU tracing: CUPTI failed: {status.name}"  # type: ignore[attr-defined]
    )


def test_every_status_gives_exactly_one_line() -> None:
    for status in R:
        if status is not R.SUCCESS:
            line = describe_cupti_failure(error(status))
            assert line.startswith("could not start GPU tracing: ")
            assert "\n" not in line


def test_other_exceptions_are_described_too() -> None:
    assert "ValueError: bad" in describe_cupti_failure(ValueError("bad"))
    assert "pip install cupti-python" in describe_cupti_failure(ImportError("no cupti"))
