"""heron.runtime.rocm.driver.probe: every way of finding no AMD GPU gives a readable reason.

The bindings are replaced by stand-ins that behave like hip-python's ``hip.hip``
(result tuples whose first element is a hipError_t member), so each path is
exercised on any machine. ``test_real_device`` runs on a ROCm machine only.
"""

from __future__ import annotations

import enum
from types import SimpleNamespace

import pytest

from heron.runtime.rocm.driver import probe


class hipError_t(enum.IntEnum):  # the bindings' spelling
    hipSuccess = 0
    hipErrorInvalidDevice = 101
    hipErrorNoDevice = 100


OK = hipError_t.hipSuccess


def fake_hip(devices=(("AMD Instinct MI300X", "gfx942:sramecc+:xnack-", 192 * 2**30),), **over):
    def properties(index):
        name, arch, memory = devices[index]
        return OK, SimpleNamespace(
            name=name.encode(), gcnArchName=arch.encode(), totalGlobalMem=memory
        )

    calls = dict(
        hipInit=lambda flags: (OK,),
        hipDriverGetVersion=lambda: (OK, 60342134),
        hipGetDeviceCount=lambda: (
            (OK, len(devices)) if devices else (hipError_t.hipErrorNoDevice, 0)
        ),
        hipGetDeviceProperties=properties,
    )
    calls.update(over)
    return SimpleNamespace(**calls)


def test_devices_are_listed():
    status = probe(fake_hip())
    assert status.available
    assert (
        status.reason
        == "HIP runtime 60342134: AMD Instinct MI300X (gfx942:sramecc+:xnack-, 192 GiB)"
    )
    (device,) = status.devices
    assert device.architecture.startswith("gfx942")


def test_missing_runtime_library_is_reported_from_the_exception():
    def hip_init(flags):
        raise RuntimeError("failed to dlopen 'libamdhip64.so'")

    status = probe(fake_hip(hipInit=hip_init))
    assert not status.available
    assert status.reason == (
        "no HIP runtime found (hip.hipInit failed: failed to dlopen 'libamdhip64.so')"
    )


def test_hip_pythons_byte_strings_are_reported_as_text():
    # hip-python formats the library name and dlerror's message as bytes (issue 31)
    def hip_init(flags):
        raise RuntimeError(
            "failed to dlopen 'b'libamdhip64.so'': b'libamdhip64.so: cannot open shared"
            " object file: No such file or directory'"
        )

    status = probe(fake_hip(hipInit=hip_init))
    assert status.reason == (
        "no HIP runtime found (hip.hipInit failed: failed to dlopen 'libamdhip64.so':"
        " libamdhip64.so: cannot open shared object file: No such file or directory)"
    )


def test_no_device_error_code_is_not_a_failure_of_the_query():
    status = probe(fake_hip(devices=()))
    assert not status.available
    assert status.reason == "the HIP runtime (version 60342134) reports no device"


def test_failing_query_after_init():
    status = probe(
        fake_hip(hipGetDeviceProperties=lambda i: (hipError_t.hipErrorInvalidDevice, None))
    )
    assert not status.available
    assert "hipGetDeviceProperties returned hipErrorInvalidDevice" in status.reason


def test_this_machine_gives_an_answer_not_an_exception():
    status = probe()
    assert isinstance(status.available, bool) and status.reason
    assert status.available == bool(status.devices)


@pytest.mark.rocm
def test_real_device():
    status = probe()
    assert status.available, status.reason
    for device in status.devices:
        assert device.name and device.architecture.startswith("gfx")
        assert device.total_memory > 2**28
