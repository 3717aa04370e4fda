"""heron.jax on device-resident arrays (issue 30), on the interpreter, whose memory is host
memory: numpy and jax CPU arrays are taken in place through DLPack, results stay in
device buffers (DeviceArray) or become numpy or jax arrays over them, donated arrays are
consumed, and a run's buffers are reused. The CUDA side (device pointers, streams, no
host copies) is packages/runtime-cuda/tests/test_resident.py; the DLPack structures
themselves tests/test_dlpack.py.
"""

from __future__ import annotations

import gc

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import heron.jax as heron_jax
from heron.compiler.executable import compile_executable
from heron.hlo.parser import parse_module
from heron.jax.devices import HeronJaxError, open_device
from heron.runtime.core.dlpack import DLPackError
from heron.runtime.core.executor import Executable, ExecutorError
from heron.runtime.core.resident import DeviceArray, ResidentRunner
from heron.target import Target


def _jit(function, **options):
    return heron_jax.jit(function, backend="interpreter", cache_dir=False, **options)


def _device():
    return open_device("interpreter")[1]


def _table_addresses(jitted, *args):
    """The addresses the last run's parameter allocations were bound to."""
    program = jitted._program(args, {})[0]
    executable = program.executable
    device = executable.device
    return [
        device.address(executable.table[index])
        for _, index in sorted(executable._parameter_allocations.items())
    ]


def test_numpy_and_jax_cpu_arguments_are_read_in_place():
    f = _jit(lambda x, y: jnp.sin(x) * y)
    x = np.linspace(-2, 2, 12, dtype=np.float32).reshape(3, 4)
    y = jnp.full((3, 4), 3.0, jnp.float32)
    out = f(x, y)
    assert f.inputs_taken(x, y).ways == ("dlpack", "dlpack")
    assert _table_addresses(f, x, y) == [x.ctypes.data, y.unsafe_buffer_pointer()]
    np.testing.assert_allclose(out, np.sin(x) * 3, rtol=1e-6)
    assert isinstance(out, np.ndarray)  # "auto" on host memory: numpy


def test_arrays_numpy_will_not_share_are_copied_once():
    f = _jit(lambda x: x + 1)
    x = np.arange(12, dtype=np.float32).reshape(3, 4)
    strided = x[:, ::2]  # not contiguous: numpy exports strides, the parameter wants none
    read_only = np.arange(6, dtype=np.float32)
    read_only.flags.writeable = False  # numpy refuses to export it
    np.testing.assert_array_equal(f(strided), strided + 1)
    assert f.inputs_taken(strided).ways == ("copied",)
    np.testing.assert_array_equal(f(read_only), read_only + 1)
    assert f.inputs_taken(read_only).ways == ("copied",)
    np.testing.assert_array_equal(f(2.5), np.float32(3.5))  # a Python scalar


def test_results_as_device_arrays_are_passed_on_in_place():
    f = _jit(lambda x: (x * 2, x.sum()), results="device")
    x = np.arange(8, dtype=np.float32)
    doubled, total = f(x)
    assert isinstance(doubled, DeviceArray) and doubled.shape == (8,)
    assert total.shape == () and float(np.asarray(total)) == 28.0
    again, _ = f(doubled)
    assert f.inputs_taken(x).ways == ("resident",)
    assert _table_addresses(f, x) == [_device().address(doubled.buffer)]
    np.testing.assert_array_equal(np.asarray(again), x * 4)


def test_results_as_jax_and_numpy_arrays_share_the_device_buffer():
    x = np.arange(6, dtype=np.float32)
    as_jax = _jit(lambda v: v - 1, results="jax")(x)
    assert isinstance(as_jax, jax.Array)
    np.testing.assert_array_equal(np.asarray(as_jax), x - 1)
    device_result = _jit(lambda v: v - 1, results="device")(x)
    shared = np.from_dlpack(device_result)
    assert shared.ctypes.data == _device().address(device_result.buffer)
    np.testing.assert_array_equal(shared, x - 1)


def test_result_buffers_are_reused_once_their_arrays_are_gone():
    f = _jit(lambda x: x * 3, results="device")
    x = np.ones(64, np.float32)
    f(x)  # compiled, its first result dropped at once
    program = f._program((x,), {})[0]
    pool = program.runner.pool
    allocated = pool.allocated
    actions = None
    for _ in range(3):
        result = f(x)
        del result
        gc.collect()
        current = [leaf.action for leaves in program.executable._leaves_of for leaf in leaves]
        assert actions is None or current == actions  # no launch prepared again
        actions = current
    assert pool.allocated == allocated


def test_a_donated_device_array_is_consumed_and_holds_the_result():
    step = _jit(lambda p, g: (p - 0.5 * g, jnp.sum(g)), donate_argnums=0, results="device")
    params = np.arange(16, dtype=np.float32)
    grads = np.ones(16, np.float32)
    first, _ = step(params, grads)
    assert step.inputs_taken(params, grads).ways[0] == "copied on device"
    np.testing.assert_array_equal(params, np.arange(16))  # the caller's numpy array is intact
    buffer = first.buffer
    second, _ = step(first, grads)
    assert step.inputs_taken(params, grads).ways[0] == "donated"
    assert first.is_deleted() and second.buffer is buffer  # written in place
    with pytest.raises(Exception, match="deleted or donated"):
        np.asarray(first)
    np.testing.assert_array_equal(np.asarray(second), np.arange(16) - 1.0)


def test_an_undonated_device_array_is_kept_when_the_program_writes_its_parameter():
    step = _jit(lambda p: p + 1, donate_argnums=0, results="device")
    start = step(np.zeros(4, np.float32))
    runner = step._program((start,), {})[0].runner
    (kept,) = runner([start])  # the runner called without donating: start is copied
    assert runner.last_inputs.ways == ("copied on device",)
    assert not start.is_deleted()
    np.testing.assert_array_equal(np.asarray(start), np.ones(4))
    np.testing.assert_array_equal(np.asarray(kept), np.full(4, 2.0))


@pytest.mark.filterwarnings("ignore:Some donated buffers were not usable")
def test_donated_leaves_follow_jax_s_argument_numbering():
    def f(scale, tree, *, bias):
        return jax.tree_util.tree_map(lambda v: v * scale + bias, tree)

    jitted = _jit(f, static_argnums=0, donate_argnums=1, donate_argnames="bias")
    tree = {"a": np.ones(3, np.float32), "b": np.zeros(3, np.float32)}
    bias = np.ones(3, np.float32)
    out = jitted(2.0, tree, bias=bias)
    np.testing.assert_array_equal(out["a"], np.full(3, 3.0))
    program = jitted._program((2.0, tree), {"bias": bias})[0]
    assert program.donated == frozenset({0, 1, 2})


def test_results_must_be_a_known_kind():
    with pytest.raises(HeronJaxError, match="results='gpu'"):
        _jit(lambda x: x, results="gpu")


# -- layouts that are not numpy's: copied, never shared ------------------------------------

TRANSPOSED = """\
HloModule transposed, entry_computation_layout={(f32[2,3]{0,1})->f32[2,3]{0,1}}

ENTRY main {
  x = f32[2,3]{0,1} parameter(0)
  ROOT y = f32[2,3]{0,1} negate(x)
}
"""


def test_a_column_major_parameter_and_result_go_through_the_host():
    artefact = compile_executable(
        parse_module(TRANSPOSED), Target.preset("h100"), backends=("interpreter",)
    )
    runner = ResidentRunner(Executable(artefact, _device()))
    x = np.arange(6, dtype=np.float32).reshape(2, 3)
    (result,) = runner([x])
    assert runner.last_inputs.ways == ("copied",)
    np.testing.assert_array_equal(np.asarray(result), -x)
    with pytest.raises(DLPackError, match="not the C-order bytes"):
        result.__dlpack__()


def test_the_executor_refuses_result_buffers_that_do_not_fit():
    artefact = compile_executable(
        parse_module(TRANSPOSED), Target.preset("h100"), backends=("interpreter",)
    )
    device = _device()
    executable = Executable(artefact, device)
    executable.write_parameter(0, np.zeros((2, 3), np.float32))
    with pytest.raises(ExecutorError, match="needs a buffer of 24 bytes"):
        executable.execute([None], results={0: device.allocate(8)})
    with pytest.raises(ExecutorError, match="no result 3"):
        executable.execute([None], results={3: device.allocate(24)})


NEGATE = """\
HloModule negate, entry_computation_layout={(f32[2,3]{1,0})->f32[2,3]{1,0}}

ENTRY main {
  x = f32[2,3]{1,0} parameter(0)
  ROOT y = f32[2,3]{1,0} negate(x)
}
"""


class _Shared:
    """An array of a library that shares its host memory through DLPack, counting the
    capsules asked of it."""

    def __init__(self, values: np.ndarray) -> None:
        self.values = values
        self.asked = 0
        self.deleted = False

    def __dlpack_device__(self):
        return self.values.__dlpack_device__()

    def __dlpack__(self, **kwargs):
        self.asked += 1
        return self.values.__dlpack__(**kwargs)

    def is_deleted(self) -> bool:
        return self.deleted


class _Frozen(_Shared):
    """The same, of a library whose arrays never change (as jax's)."""


def test_an_immutable_array_adopted_once_is_not_asked_again_while_it_lives():
    artefact = compile_executable(
        parse_module(NEGATE), Target.preset("h100"), backends=("interpreter",)
    )
    runner = ResidentRunner(Executable(artefact, _device()), immutable=(_Frozen,))
    frozen = _Frozen(np.arange(6, dtype=np.float32).reshape(2, 3))
    for _ in range(3):
        (result,) = runner([frozen])
        assert runner.last_inputs.ways == ("dlpack",)
        np.testing.assert_array_equal(np.asarray(result), -frozen.values)
    assert frozen.asked == 1
    # another array, even of the same values, is asked for its memory
    other = _Frozen(frozen.values.copy() + 1)
    (result,) = runner([other])
    np.testing.assert_array_equal(np.asarray(result), -other.values)
    assert other.asked == 1
    # a deleted (or donated) array is not taken from memory kept for it
    other.deleted = True
    runner([other])
    assert other.asked == 2


def test_a_mutable_library_s_array_is_asked_every_call():
    """Its owner may write it in place between calls (a torch tensor's ``add_`` on its
    own stream), so its library orders that work before each run."""
    artefact = compile_executable(
        parse_module(NEGATE), Target.preset("h100"), backends=("interpreter",)
    )
    runner = ResidentRunner(Executable(artefact, _device()), immutable=(_Frozen,))
    shared = _Shared(np.arange(6, dtype=np.float32).reshape(2, 3))
    for step in range(3):
        shared.values += 1  # written in place between calls
        (result,) = runner([shared])
        np.testing.assert_array_equal(np.asarray(result), -shared.values)
        assert shared.asked == step + 1


def test_heron_jax_asks_a_jax_array_for_its_memory_once(monkeypatch):
    from jax._src.array import ArrayImpl

    asked = []
    original = ArrayImpl.__dlpack__

    def counted(self, **kwargs):
        asked.append(self)
        return original(self, **kwargs)

    monkeypatch.setattr(ArrayImpl, "__dlpack__", counted)
    f = _jit(lambda w, x: w * x + 1)
    w = jnp.full((3, 4), 2.0, jnp.float32)
    for step in range(4):
        x = jnp.full((3, 4), float(step), jnp.float32)
        np.testing.assert_array_equal(np.asarray(f(w, x)), 2.0 * step + 1)
        assert f.inputs_taken(w, x).ways == ("dlpack", "dlpack")
    assert sum(a is w for a in asked) == 1  # the weights: once
    assert len(asked) == 5  # and each new x
