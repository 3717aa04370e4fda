"""heron.runtime.cuda.driver.probe: every way of finding no GPU gives a readable reason.

The bindings are replaced by stand-ins that behave like cuda.bindings.driver
(result tuples whose first element is a CUresult enum member), so each path is
exercised on any machine. ``test_real_device`` runs on a CUDA machine only.
"""

from __future__ import annotations

import enum
from types import SimpleNamespace

import pytest

from heron.runtime.cuda.driver import probe


class CUresult(enum.IntEnum):
    CUDA_SUCCESS = 0
    CUDA_ERROR_NO_DEVICE = 100
    CUDA_ERROR_INVALID_DEVICE = 101


class CUdevice_attribute(enum.IntEnum):  # the bindings' spelling
    CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR = 75
    CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR = 76


OK = CUresult.CUDA_SUCCESS


def fake_driver(devices=(("NVIDIA H100", 9, 0, 80 * 2**30),), **overrides):
    def attribute(attr, dev):
        _, major, minor, _ = devices[dev]
        return OK, major if attr.name.endswith("MAJOR") else minor

    calls = dict(
        CUdevice_attribute=CUdevice_attribute,
        cuInit=lambda flags: (OK,),
        cuDriverGetVersion=lambda: (OK, 12040),
        cuDeviceGetCount=lambda: (OK, len(devices)),
        cuDeviceGet=lambda index: (OK, index),
        cuDeviceGetName=lambda length, dev: (OK, devices[dev][0].encode() + b"\0" * 8),
        cuDeviceGetAttribute=attribute,
        cuDeviceTotalMem=lambda dev: (OK, devices[dev][3]),
    )
    calls.update(overrides)
    return SimpleNamespace(**calls)


def test_devices_are_listed():
    status = probe(fake_driver())
    assert status.available
    assert status.reason == "CUDA driver for CUDA 12.4: NVIDIA H100 (sm_90, 80 GiB)"
    (device,) = status.devices
    assert device.name == "NVIDIA H100" and device.compute_capability == (9, 0)


def test_missing_driver_library_is_reported_from_the_exception():
    def cu_init(flags):
        raise RuntimeError(
            '"cuda" is an NVIDIA driver library and can only be found via system search'
        )

    status = probe(fake_driver(cuInit=cu_init))
    assert not status.available
    assert status.reason.startswith("no CUDA driver found (cuda.bindings.driver.cuInit failed: ")
    assert "NVIDIA driver library" in status.reason


def test_error_code_from_cuinit_is_named():
    status = probe(fake_driver(cuInit=lambda flags: (CUresult.CUDA_ERROR_NO_DEVICE,)))
    assert not status.available
    assert status.reason == (
        "no CUDA driver found (cuda.bindings.driver.cuInit failed: cuInit returned"
        " CUDA_ERROR_NO_DEVICE)"
    )


def test_driver_without_devices():
    status = probe(fake_driver(devices=()))
    assert not status.available
    assert status.reason == "the CUDA driver (CUDA 12.4) reports no device"


def test_failing_query_after_init():
    status = probe(fake_driver(cuDeviceGet=lambda i: (CUresult.CUDA_ERROR_INVALID_DEVICE, 0)))
    assert not status.available
    assert "querying it failed: cuDeviceGet returned CUDA_ERROR_INVALID_DEVICE" in status.reason


def test_this_machine_gives_an_answer_not_an_exception():
    status = probe()
    assert isinstance(status.available, bool) and status.reason
    assert status.available == bool(status.devices)


@pytest.mark.cuda
def test_real_device():
    status = probe()
    assert status.available, status.reason
    for device in status.devices:
        assert device.name
        assert device.compute_capability >= (3, 0)
        assert device.total_memory > 2**28
