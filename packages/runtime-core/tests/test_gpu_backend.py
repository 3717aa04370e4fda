"""The GPU backends' shared spec: unavailable with a reason, whatever the driver says."""

import pytest

from heron.runtime.core.device import DeviceError
from heron.runtime.core.driver_probe import DriverStatus
from heron.runtime.core.gpu_backend import compile_only_backend
from heron.runtime.core.hookspecs import Stage
from heron.runtime.core.registry import default_backends, load_backends

STAGES = (Stage("binary", "some.module:compile", extension="bin"),)


def _spec(status: DriverStatus):
    return compile_only_backend(
        name="fake",
        platform="Fake",
        priority=5,
        probe=lambda: status,
        stages=STAGES,
        description="a fake GPU",
    )


def test_without_a_driver_the_probe_reason_is_given():
    spec = _spec(DriverStatus(False, "no Fake driver found (dlopen failed)"))
    assert spec.is_available() == (False, "no Fake driver found (dlopen failed)")
    assert spec.stages == STAGES


def test_with_a_driver_it_says_the_device_is_not_implemented_yet():
    spec = _spec(DriverStatus(True, "Fake driver 1.0: one device"))
    available, reason = spec.is_available()
    assert not available
    assert reason.startswith("Fake driver 1.0: one device; but heron's Fake device")
    with pytest.raises(DeviceError, match="not implemented yet; use the interpreter"):
        spec.device_factory(None)


def test_cuda_and_rocm_register_and_the_interpreter_is_chosen_without_a_gpu():
    registry = load_backends()
    names = [s.name for s in registry.specs]
    assert {"cuda", "rocm", "interpreter"} <= set(names)
    priorities = {s.name: s.priority for s in registry.specs}
    assert priorities["cuda"] > priorities["rocm"] > priorities["interpreter"]
    assert not registry.availability("cuda").available
    assert registry.select().name == "interpreter"


def test_the_backends_declare_their_stages_in_order():
    registry = load_backends()

    def stages(name):
        return [(s.name, s.extension) for s in registry.get(name).stages]

    assert stages("cuda") == [("llvm-ir", "ll"), ("ptx", "ptx"), ("cubin", "cubin")]
    assert stages("rocm") == [("llvm-ir", "ll"), ("object", "o"), ("hsaco", "hsaco")]
    assert stages("interpreter") == [("capture", None)]


def test_the_default_registry_is_loaded_once():
    assert default_backends() is default_backends()
    assert "interpreter" in default_backends()
