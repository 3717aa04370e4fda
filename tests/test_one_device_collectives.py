"""jax code written for several devices, on one: ``shard_map`` over a mesh of one device.

``psum``, ``pmean``, ``pmax``, ``all_gather``, ``psum_scatter``, ``ppermute`` and
``axis_index`` lower to collectives whose groups each hold the one device; heron
refused each by name ("no heron emitter handles all-reduce") where XLA simplifies them
away. ``one-device-collectives`` (heron.hlo.passes.one_device_collectives) does the
same; a module that declares several devices, or a group of several, is still
refused. Each jax case is compared with ``jax.jit`` on the CPU.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jax.sharding import Mesh, PartitionSpec

import heron.jax as heron_jax
from heron.hlo.parser import parse_module
from heron.hlo.passes.one_device_collectives import simplify_one_device_collectives

try:
    from jax import shard_map
except ImportError:  # jax before 0.7
    from jax.experimental.shard_map import shard_map

MESH = Mesh(np.array(jax.devices()[:1]), ("i",))
SPEC = PartitionSpec("i")


def _mapped(body):
    return shard_map(body, mesh=MESH, in_specs=SPEC, out_specs=SPEC)


BODIES = {
    "psum": lambda x: jax.lax.psum(x, "i") * 2,
    "pmean_pmax": lambda x: jax.lax.pmean(x, "i") + jax.lax.pmax(x, "i"),
    "all_gather": lambda x: jax.lax.all_gather(x, "i", tiled=True) - 1,
    "psum_scatter": lambda x: jax.lax.psum_scatter(x, "i", tiled=True),
    "ppermute": lambda x: jax.lax.ppermute(x, "i", perm=[(0, 0)]) * 3,
    "axis_index": lambda x: x * (jax.lax.axis_index("i") + 1).astype(x.dtype),
}


@pytest.mark.parametrize("name", sorted(BODIES))
def test_a_one_device_shard_map_equals_jax_s(name):
    function = _mapped(BODIES[name])
    x = np.arange(12, dtype=np.float32).reshape(4, 3) / 7
    want = np.asarray(jax.jit(function)(x))
    got = np.asarray(heron_jax.jit(function, backend="interpreter")(x))
    np.testing.assert_allclose(got, want, rtol=1e-6)


def test_a_gradient_through_psum():
    loss = _mapped(lambda x: jnp.tanh(jax.lax.psum(x * x, "i")))
    grad = jax.grad(lambda x: jnp.sum(loss(x)))
    x = np.linspace(-1, 1, 8, dtype=np.float32).reshape(4, 2)
    np.testing.assert_allclose(
        np.asarray(heron_jax.jit(grad, backend="interpreter")(x)),
        np.asarray(jax.jit(grad)(x)),
        rtol=1e-6,
    )


COLLECTIVES = """HloModule m{header}

add {{
  a = f32[] parameter(0)
  b = f32[] parameter(1)
  ROOT s = f32[] add(a, b)
}}

ENTRY e {{
  x = f32[4] parameter(0)
  r = f32[4] all-reduce(x), replica_groups={groups}, to_apply=add
  p = f32[4] collective-permute(r), source_target_pairs={pairs}
  id = u32[] partition-id()
  ROOT t = (f32[4], u32[]) tuple(p, id)
}}
"""


def _opcodes(text: str) -> list[str]:
    module = parse_module(text)
    simplify_one_device_collectives(module)
    return sorted({inst.opcode for inst in module.entry.instructions})


def test_groups_of_one_device_are_simplified_away():
    text = COLLECTIVES.format(header="", groups="{{0}}", pairs="{{0,0}}")
    assert _opcodes(text) == ["constant", "parameter", "tuple"]
    # all devices (one here); the iota form with groups of one
    for groups in ("{}", "[1,1]<=[1]"):
        text = COLLECTIVES.format(header="", groups=groups, pairs="{}")
        assert "all-reduce" not in _opcodes(text)


def test_a_permute_nothing_sends_to_the_device_gives_zeros():
    module = parse_module(COLLECTIVES.format(header="", groups="{{0}}", pairs="{}"))
    simplify_one_device_collectives(module)
    permuted = module.entry.root_instruction.operands[0]
    assert permuted.opcode == "broadcast" and permuted.operands[0].opcode == "constant"
    assert float(np.asarray(permuted.operands[0].literal)) == 0.0


@pytest.mark.parametrize(
    ("header", "groups", "pairs", "kept"),
    [
        (", num_partitions=2", "{{0}}", "{{0,0}}", {"all-reduce", "partition-id"}),
        ("", "{{0,1}}", "{{0,0}}", {"all-reduce"}),
        ("", "{{0}}", "{{0,1}}", {"collective-permute"}),
    ],
)
def test_several_devices_are_left_to_be_refused(header, groups, pairs, kept):
    opcodes = _opcodes(COLLECTIVES.format(header=header, groups=groups, pairs=pairs))
    assert kept <= set(opcodes)


def test_heron_run_checks_a_collective_over_all_of_one_device(tmp_path, capsys):
    """``replica_groups={}`` is every device: one where the header declares no more, so
    the device's kernels and the reference evaluator agree on the operand."""
    from heron.cli.main import main
    from heron.hlo.errors import HloError
    from heron.hlo.evaluator import evaluate_module

    text = COLLECTIVES.format(header="", groups="{}", pairs="{{0,0}}")
    path = tmp_path / "all_of_one.hlo"
    path.write_text(text)
    assert main(["run", "--backend", "interpreter", "--check", str(path)]) == 0
    x = np.arange(4, dtype=np.float32)
    permuted, index = evaluate_module(parse_module(text), [x])
    np.testing.assert_array_equal(permuted, x)
    assert int(index) == 0
    several = COLLECTIVES.format(header=", num_partitions=2", groups="{}", pairs="{{0,0}}")
    with pytest.raises(HloError, match="all-reduce"):
        evaluate_module(parse_module(several), [x])
