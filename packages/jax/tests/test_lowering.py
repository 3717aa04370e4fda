"""heron.jax.lower and signatures: what a call compiles for, and pytrees in and out."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from heron_test_support.jax_config import jax_x64

import heron.jax as heron_jax
from heron.jax import lower
from heron.jax.lowering import signature_of, split_static


def _affine(params, x, *, scale=1.0):
    return {"y": jnp.tanh(x @ params["w"] + params["b"]) * scale, "total": x.sum()}


PARAMS = {"w": np.ones((3, 4), np.float32), "b": np.arange(4, dtype=np.float32)}
X = np.ones((2, 3), np.float32)


def test_the_entry_takes_the_argument_leaves_in_tree_order():
    lowered = lower(_affine, PARAMS, X)
    parameters = sorted(lowered.module.entry.parameters, key=lambda p: p.parameter_number)
    # jax.tree_util orders dict keys: b, w, then x.
    assert [str(p.shape).split("{")[0] for p in parameters] == ["f32[4]", "f32[3,4]", "f32[2,3]"]
    leaves = lowered.flatten_arguments((PARAMS, X), {})
    assert [leaf.shape for leaf in leaves] == [(4,), (3, 4), (2, 3)]


def test_results_come_back_in_the_functions_structure():
    lowered = lower(_affine, PARAMS, X)
    result = lowered.unflatten_results([np.float32(6.0), np.zeros((2, 4), np.float32)])
    assert set(result) == {"y", "total"} and result["total"] == 6.0
    assert result["y"].shape == (2, 4)


def test_arguments_of_another_structure_are_refused_by_name():
    lowered = lower(_affine, PARAMS, X)
    with pytest.raises(TypeError, match="_affine"):
        lowered.flatten_arguments(({"w": PARAMS["w"]}, X), {})


@pytest.fixture
def x64_off():
    """Other suites in the same process turn jax_enable_x64 on (a global)."""
    with jax_x64(False):
        yield


def test_arguments_take_the_dtypes_jax_lowered_them_as(x64_off):
    # Without jax_enable_x64 jax lowers an int64 or float64 argument as s32 or f32
    # and converts the value: heron hands the entry the same.
    lowered = lower(lambda a, b: (a * 3, b + 1), np.array([2**33 + 5, -5], np.int64), 2.5)
    a, b = lowered.flatten_arguments((np.array([2**33 + 5, -5], np.int64), 2.5), {})
    assert a.dtype == np.int32 and a.tolist() == [5, -5]
    assert b.dtype == np.float32 and b == np.float32(2.5)
    parameters = sorted(lowered.module.entry.parameters, key=lambda p: p.parameter_number)
    assert [str(p.shape).split("{")[0] for p in parameters] == ["s32[2]", "f32[]"]


def test_unused_arguments_stay_parameters():
    lowered = lower(lambda a, b: a * 2, X, X)
    assert len(lowered.module.entry.parameters) == 2


def test_signatures_tell_shapes_dtypes_weak_scalars_and_static_values_apart():
    base = signature_of((X,), {})
    assert signature_of((np.zeros((2, 3), np.float32),), {}) == base
    assert signature_of((np.zeros((2, 4), np.float32),), {}) != base
    assert signature_of((X.astype(np.float16),), {}) != base
    assert signature_of((2.0,), {}) != signature_of((np.float32(2.0),), {})
    assert signature_of((X,), {}, static=(3,)) != signature_of((X,), {}, static=(4,))


def test_static_arguments_are_split_out_and_lowered_as_constants():
    dynamic_args, dynamic_kwargs, static = split_static((PARAMS, X), {"scale": 2.0}, (), "scale")
    assert static == (("scale", 2.0),) and dynamic_kwargs == {}
    assert len(dynamic_args) == 2
    lowered = lower(_affine, PARAMS, X, scale=2.0, static_argnames="scale")
    assert len(lowered.module.entry.parameters) == 3
    assert "constant(2)" in lowered.hlo_text


@jax.tree_util.register_pytree_node_class
class _CheckedScale:
    """A pytree whose constructor looks at its leaf's dtype, as ``jmp.DynamicLossScale``
    does (``jax.eval_shape`` on it): jax's lowering rebuilds argument classes around
    placeholder leaves to describe them, and this one fails there."""

    def __init__(self, value, period=2):
        if jax.eval_shape(lambda: value).dtype != jnp.float32:
            raise TypeError("a float32 scale")
        self.value, self.period = value, period

    def tree_flatten(self):
        return (self.value,), self.period

    @classmethod
    def tree_unflatten(cls, period, children):
        return cls(*children, period=period)


def _scaled_step(scale, x, *, offset, twice=False):
    grown = _CheckedScale(scale.value * 2 if twice else scale.value, scale.period)
    return grown, x * scale.value + offset


def test_an_argument_class_jax_cannot_describe_is_lowered_over_its_leaves():
    """``jax.jit(f).lower(scale, x)`` raises for such a class where ``jax.jit(f)(scale,
    x)`` runs (a helper's sweep: jmp's dynamic loss scaling in mixed-precision
    training steps); heron lowers the function over the arguments' leaves instead,
    static and donated arguments kept."""
    scale, x = _CheckedScale(np.float32(4.0)), np.arange(3, dtype=np.float32)
    with pytest.raises(TypeError):
        jax.jit(_scaled_step, static_argnames="twice").lower(scale, x, offset=1.0, twice=True)
    lowered = lower(
        _scaled_step,
        scale,
        x,
        offset=np.float32(1.0),
        twice=True,
        static_argnames="twice",
        donate_argnums=1,
    )
    assert len(lowered.module.entry.parameters) == 3  # scale's leaf, x, offset
    assert "input_output_alias" in lowered.hlo_text  # x's buffer donated
    out = heron_jax.jit(_scaled_step, backend="interpreter", static_argnames="twice")(
        scale, x, offset=np.float32(1.0), twice=True
    )
    grown, y = out
    assert isinstance(grown, _CheckedScale) and grown.period == 2 and float(grown.value) == 8.0
    np.testing.assert_array_equal(np.asarray(y), x * 4 + 1)
