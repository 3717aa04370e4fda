"""The GPU backends' shared spec: unavailable with a reason, whatever the driver says."""

import pytest

from heron.runtime.core.device import DeviceError
from heron.runtime.core.driver_probe import DriverStatus
from heron.runtime.core.gpu_backend import compile_only_backend
from heron.runtime.core.registry import load_backends


def _spec(status: DriverStatus):
    return compile_only_backend(
        name="fake",
        platform="Fake",
        priority=5,
        probe=lambda: status,
        compiler="some.module:compile",
        description="a fake GPU",
    )


def test_without_a_driver_the_probe_reason_is_given():
    spec = _spec(DriverStatus(False, "no Fake driver found (dlopen failed)"))
    assert spec.is_available() == (False, "no Fake driver found (dlopen failed)")


def test_with_a_driver_it_says_the_device_is_not_implemented_yet():
    spec = _spec(DriverStatus(True, "Fake driver 1.0: one device"))
    available, reason = spec.is_available()
    assert not available
    assert reason.startswith("Fake driver 1.0: one device; but heron's Fake device")
    with pytest.raises(DeviceError, match="not implemented yet; use the interpreter"):
        spec.device_factory()


def test_cuda_and_rocm_register_and_the_interpreter_is_chosen_without_a_gpu():
    registry = load_backends()
    names = [s.name for s in registry.specs]
    assert {"cuda", "rocm", "interpreter"} <= set(names)
    priorities = {s.name: s.priority for s in registry.specs}
    assert priorities["cuda"] > priorities["rocm"] > priorities["interpreter"]
    assert not registry.availability("cuda").available
    assert registry.select().name == "interpreter"
