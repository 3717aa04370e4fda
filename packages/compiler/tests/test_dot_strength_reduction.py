"""Dot strength reduction: dots with a vector side become a multiply and a reduce (issue 28).

The decisions are XLA:GPU's: the cases of :data:`DOTS`, in one module,
were compiled by XLA:GPU 0.12 (jax-cuda13-pjrt 0.12.0.1, deviceless, H100,
``xla_dump_hlo_pass_re=dot-strength-reduction``); after its simplification
``bigmv`` (4096 x 4096 at default precision: over the size threshold),
``outer_bf16_algorithm``, ``ii_rhs_kn`` and ``mm`` were still dots, every
other one a multiply (and a reduce); ``row_vector``, ``column_vector`` and
``outer_k1`` separately (their size-1 dimensions removed by XLA's simplifier,
then a reduce, a reduce and one loop multiply). The rewritten module is
checked against the original with the reference evaluator (bit for bit for
integers, within a summation bound for floats), and run on the interpreter.
"""

from __future__ import annotations

import copy

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from heron.compiler import Target
from heron.compiler.dot_strength_reduction import reduces, strength_reduce_dots
from heron.compiler.fusion import gpu_pipeline
from heron.hlo.evaluator import evaluate_module, flatten_literal
from heron.hlo.parser import parse_module
from heron.hlo.passes import run_pipeline
from heron.hlo.verifier import verify_module

H100 = Target.preset("h100")
MI300X = Target.preset("mi300x")

#: name -> (operands, result, dimension numbers and attributes, XLA:GPU's decision)
DOTS = {
    "vv": (
        "f32[256] a, f32[256] b",
        "f32[]",
        "lhs_contracting_dims={0}, rhs_contracting_dims={0}",
        True,
    ),
    "mv": (
        "f32[64,256] a, f32[256] b",
        "f32[64]",
        "lhs_contracting_dims={1}, rhs_contracting_dims={0}",
        True,
    ),
    "vm": (
        "f32[256] a, f32[256,48] b",
        "f32[48]",
        "lhs_contracting_dims={0}, rhs_contracting_dims={0}",
        True,
    ),
    "bigmv": (
        "f32[4096,4096] a, f32[4096] b",
        "f32[4096]",
        "lhs_contracting_dims={1}, rhs_contracting_dims={0}",
        False,
    ),
    "bigmv_highest": (
        "f32[4096,4096] a, f32[4096] b",
        "f32[4096]",
        "lhs_contracting_dims={1}, rhs_contracting_dims={0}, operand_precision={highest,highest}",
        True,
    ),
    "bigmv_f64": (
        "f64[4096,4096] a, f64[4096] b",
        "f64[4096]",
        "lhs_contracting_dims={1}, rhs_contracting_dims={0}",
        True,
    ),
    "bmv": (
        "f32[8,64,256] a, f32[8,256] b",
        "f32[8,64]",
        "lhs_batch_dims={0}, rhs_batch_dims={0},"
        " lhs_contracting_dims={2}, rhs_contracting_dims={1}",
        True,
    ),
    "outer": ("f32[256] a, f32[96] b", "f32[256,96]", "", True),
    "batched_outer": (
        "f32[4,16] a, f32[4,8] b",
        "f32[4,16,8]",
        "lhs_batch_dims={0}, rhs_batch_dims={0}",
        True,
    ),
    "outer_bf16_algorithm": (
        "f32[256] a, f32[96] b",
        "f32[256,96]",
        "algorithm=dot_bf16_bf16_f32",
        False,
    ),
    "ii": (
        "s32[32,16] a, s32[8,16] b",
        "s32[32,8]",
        "lhs_contracting_dims={1}, rhs_contracting_dims={1}",
        True,
    ),
    "ii_rhs_kn": (
        "s32[32,16] a, s32[16,8] b",
        "s32[32,8]",
        "lhs_contracting_dims={1}, rhs_contracting_dims={0}",
        False,
    ),
    "mm": (
        "f32[64,32] a, f32[32,48] b",
        "f32[64,48]",
        "lhs_contracting_dims={1}, rhs_contracting_dims={0}",
        False,
    ),
    "mv_bf16": (
        "bf16[64,256] a, bf16[256] b",
        "bf16[64]",
        "lhs_contracting_dims={1}, rhs_contracting_dims={0}",
        True,
    ),
    "mv_s8": (
        "s8[64,256] a, s8[256] b",
        "s32[64]",
        "lhs_contracting_dims={1}, rhs_contracting_dims={0}",
        True,
    ),
    "mv_bf16_algorithm": (
        "f32[64,256] a, f32[256] b",
        "f32[64]",
        "lhs_contracting_dims={1}, rhs_contracting_dims={0}, algorithm=dot_bf16_bf16_f32",
        True,
    ),
    # size-1 dimensions count as absent (XLA's simplifier removes them first)
    "row_vector": (
        "f32[1,16] a, f32[16,8] b",
        "f32[1,8]",
        "lhs_contracting_dims={1}, rhs_contracting_dims={0}",
        True,
    ),
    "column_vector": (
        "f32[8,16] a, f32[16,1] b",
        "f32[8,1]",
        "lhs_contracting_dims={1}, rhs_contracting_dims={0}",
        True,
    ),
    "outer_k1": (
        "f32[64,1] a, f32[1,48] b",
        "f32[64,48]",
        "lhs_contracting_dims={1}, rhs_contracting_dims={0}",
        True,
    ),
    "vv_f8": (
        "f8e4m3fn[256] a, f8e4m3fn[256] b",
        "f32[]",
        "lhs_contracting_dims={0}, rhs_contracting_dims={0}",
        True,
    ),
}


def _module(name: str):
    operands, result, attributes = DOTS[name][:3]
    (lhs_type, lhs), (rhs_type, rhs) = (part.split() for part in operands.split(", "))
    separator = ", " if attributes else ""
    return parse_module(
        f"""
HloModule {name}

ENTRY main {{
  {lhs} = {lhs_type} parameter(0)
  {rhs} = {rhs_type} parameter(1)
  ROOT {name} = {result} dot({lhs}, {rhs}){separator}{attributes}
}}
"""
    )


def _inputs(module, seed: int = 0) -> list[np.ndarray]:
    rng = np.random.default_rng(seed)
    arrays = []
    for parameter in module.entry.parameters:
        shape = parameter.array_shape
        dtype = shape.element_type.numpy_dtype
        values = (
            rng.integers(-40, 40, shape.dims)
            if np.issubdtype(dtype, np.integer)
            else (rng.standard_normal(shape.dims))
        )
        arrays.append(np.asarray(values).astype(dtype))
    return arrays


@pytest.mark.parametrize("name", sorted(DOTS))
def test_the_dots_xla_rewrites_are_the_ones_heron_rewrites(name):
    module = _module(name)
    assert reduces(module.entry.root, H100) == DOTS[name][3]
    changed = strength_reduce_dots(module, H100)
    verify_module(module)
    assert changed == DOTS[name][3]
    opcodes = {inst.opcode for inst in module.entry.instructions}
    assert ("dot" in opcodes) != DOTS[name][3], sorted(opcodes)


@pytest.mark.parametrize("name", [name for name, case in sorted(DOTS.items()) if case[3]])
def test_the_rewritten_dot_computes_what_the_dot_did(name):
    module = _module(name)
    rewritten = copy.deepcopy(module)
    strength_reduce_dots(rewritten, H100)
    arguments = _inputs(module)
    want = np.asarray(flatten_literal(evaluate_module(module, arguments))[0])
    got = np.asarray(flatten_literal(evaluate_module(rewritten, arguments))[0])
    assert got.dtype == want.dtype and got.shape == want.shape
    if np.issubdtype(want.dtype, np.integer):
        np.testing.assert_array_equal(got, want)
        return
    if name == "mv_bf16_algorithm":
        # the algorithm rounds each side to bf16 before the products: the evaluator's
        # dot multiplies in f32, so the two differ by about 2^-8 relative per product
        np.testing.assert_allclose(got, want, rtol=0.05, atol=0.5)
        assert "reduce-precision" in {inst.opcode for inst in rewritten.entry.instructions}
        return
    # another summation order: within (k - 1) u sum |a b| (bf16 output: its rounding)
    tolerance = 2.0**-7 if want.dtype.itemsize == 2 else 1e-5
    np.testing.assert_allclose(
        got.astype(np.float64), want.astype(np.float64), rtol=tolerance, atol=tolerance * 16
    )


def test_a_bf16_dot_multiplies_and_sums_in_f32():
    module = _module("mv_bf16")
    strength_reduce_dots(module, H100)
    by_opcode = {inst.opcode: inst for inst in module.entry.instructions}
    assert by_opcode["multiply"].array_shape.element_type.value == "f32"
    assert by_opcode["reduce"].array_shape.element_type.value == "f32"
    assert module.entry.root.opcode == "convert"
    assert module.entry.root.array_shape.element_type.value == "bf16"


def test_a_bf16_dot_whose_products_cancel_keeps_the_dot_s_value():
    """XLA rounds each product to the bf16 output before summing: (1 + 2^-7)^2 - (1 + 2^-6)
    is 2^-14 exactly, but its first product rounded to bf16 is 1 + 2^-6 and the sum 0.
    Products in f32 (exact for bf16 operands) keep the dot's 2^-14, as a GEMM would."""
    module = parse_module(
        """
HloModule bf16_vv

ENTRY main {
  a = bf16[2] parameter(0)
  b = bf16[2] parameter(1)
  ROOT d = bf16[] dot(a, b), lhs_contracting_dims={0}, rhs_contracting_dims={0}
}
"""
    )
    import ml_dtypes

    a = np.array([1 + 2.0**-7, 1 + 2.0**-6], ml_dtypes.bfloat16)
    b = np.array([1 + 2.0**-7, -1.0], ml_dtypes.bfloat16)
    want = np.asarray(evaluate_module(module, [a, b]))
    assert float(want) == 2.0**-14
    strength_reduce_dots(module, H100)
    assert float(np.asarray(evaluate_module(module, [a, b]))) == 2.0**-14


def test_a_large_matrix_vector_product_is_reduced_where_xla_s_gemm_fusion_would_not_take_it():
    # f64 on both devices; an f32 one at default precision is a GEMM on both.
    big = _module("bigmv_f64").entry.root
    assert reduces(big, H100) and reduces(big, MI300X)
    assert not reduces(_module("bigmv").entry.root, MI300X)


def test_the_gpu_pipeline_fuses_a_reduced_dot_with_what_reads_it():
    # A matrix-vector product and the tanh after it: one reduction kernel, no GEMM.
    module = parse_module(
        """
HloModule mv_tanh

ENTRY main {
  m = f32[64,256] parameter(0)
  v = f32[256] parameter(1)
  d = f32[64] dot(m, v), lhs_contracting_dims={1}, rhs_contracting_dims={0}
  ROOT t = f32[64] tanh(d)
}
"""
    )
    work = copy.deepcopy(module)
    run_pipeline(work, gpu_pipeline(H100))
    fusions = [inst for inst in work.entry.instructions if inst.opcode == "fusion"]
    assert len(fusions) == 1
    assert not any(inst.opcode == "dot" for c in work.computations for inst in c.instructions)

    from heron.compiler.program_run import run_program
    from heron.runtime.core.registry import load_backends

    device = load_backends().create_device("interpreter")
    arguments = _inputs(module, seed=3)
    run = run_program(module, arguments, device, "interpreter", target=H100)
    want = np.asarray(evaluate_module(module, arguments))
    np.testing.assert_allclose(run.outputs[0], want, rtol=1e-5, atol=1e-5)
    assert run.kernel_launches == 1


def test_the_sum_a_dot_becomes_is_checked_within_the_reassociation_bounds():
    """The reference computes the dot (or the convolution it came from) in its own order,
    so the reduce the rewrite makes sums in an order of its own wherever it is fused: a
    loop kernel holding it is checked within the reassociation bounds, not bit for bit.
    (A depthwise convolution's input gradient, its dot strength-reduced into one loop
    fusion with the transposes around it, differed from the evaluator's convolution by
    4 ulps and was called a disagreement.)"""
    from heron.compiler.summation_order import sums_in_its_own_order

    module = _module("mv")
    strength_reduce_dots(module, H100)
    (summed,) = [inst for inst in module.entry.instructions if inst.opcode == "reduce"]
    assert sums_in_its_own_order(summed)
    integers = _module("ii")
    strength_reduce_dots(integers, H100)
    (exact,) = [inst for inst in integers.entry.instructions if inst.opcode == "reduce"]
    assert not sums_in_its_own_order(exact)  # integer sums are exact in any order


#: (operands, result, dimension numbers) -> the sides the expansion transposes
ORDERS = {
    # optax's L-BFGS: a [16,1] column against a [16,8] matrix, both contracting dim 0
    "column_against_matrix": (
        "f32[16,1] a, f32[16,8] b",
        "f32[1,8]",
        "lhs_contracting_dims={0}, rhs_contracting_dims={0}",
        set(),
    ),
    "matrix_vector": (
        "f32[16,8] a, f32[8,1] b",
        "f32[16,1]",
        "lhs_contracting_dims={1}, rhs_contracting_dims={0}",
        set(),
    ),
    # the sides' orders contradict each other: the left one's is kept
    "batch_last": (
        "f32[8,4] a, f32[4,8] b",
        "f32[4]",
        "lhs_batch_dims={1}, lhs_contracting_dims={0}, rhs_batch_dims={0},"
        " rhs_contracting_dims={1}",
        {"rhs"},
    ),
    # [contracting, batch] on both sides: one order, no transpose
    "both_batch_last": (
        "f32[8,4] a, f32[8,4] b",
        "f32[4]",
        "lhs_batch_dims={1}, lhs_contracting_dims={0}, rhs_batch_dims={1},"
        " rhs_contracting_dims={0}",
        set(),
    ),
    # both sides hold their batch dimensions in the order the output reverses
    "batches_swapped": (
        "f32[2,3,8] a, f32[2,3,8] b",
        "f32[3,2]",
        "lhs_batch_dims={1,0}, lhs_contracting_dims={2}, rhs_batch_dims={1,0},"
        " rhs_contracting_dims={2}",
        {"lhs", "rhs"},
    ),
}


@pytest.mark.parametrize("name", sorted(ORDERS))
def test_the_product_keeps_each_side_s_order_where_the_output_allows(name, monkeypatch):
    """A side whose own order fits the product's is broadcast as it is: XLA's transposes
    to [batch, free, contracting] become bitcasts under its layouts, heron's would stay
    transposes (kernels' data movement, and ops the conditional simplifier calls
    expensive). The expansion still computes the dot."""
    operands, result, attributes, transposed = ORDERS[name]
    monkeypatch.setitem(DOTS, name, (operands, result, attributes, True))
    module = _module(name)
    rewritten = copy.deepcopy(module)
    assert strength_reduce_dots(rewritten, H100)
    verify_module(rewritten)
    side_of = {"a": "lhs", "b": "rhs"}
    sides = {
        side_of[inst.operands[0].name]
        for inst in rewritten.entry.instructions
        if inst.opcode == "transpose"
    }
    assert sides == transposed
    arguments = _inputs(module)
    want = np.asarray(flatten_literal(evaluate_module(module, arguments))[0])
    got = np.asarray(flatten_literal(evaluate_module(rewritten, arguments))[0])
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)


def _dot_text(lhs_dims, rhs_dims, result_dims, numbers) -> str:
    def shape(dims):
        return f"f32[{','.join(map(str, dims))}]"

    def ints(values):
        return "{" + ",".join(map(str, values)) + "}"

    lb, lc, rb, rc = numbers
    dimension_numbers = (
        f"lhs_batch_dims={ints(lb)}, lhs_contracting_dims={ints(lc)},"
        f" rhs_batch_dims={ints(rb)}, rhs_contracting_dims={ints(rc)}"
    )
    return f"""
HloModule random_dot

ENTRY main {{
  a = {shape(lhs_dims)} parameter(0)
  b = {shape(rhs_dims)} parameter(1)
  ROOT d = {shape(result_dims)} dot(a, b), {dimension_numbers}
}}
"""


@st.composite
def _vector_side_dots(draw):
    """A dot with a vector side (no free dimension on the right), its operands' dimensions
    in any order: (HLO text, lhs dims, rhs dims)."""
    size = st.integers(1, 4)
    batch = draw(st.lists(size, max_size=2))
    contracting = draw(st.lists(size, min_size=1, max_size=2))
    free = draw(st.lists(size, max_size=2))
    lhs_roles = [("b", i) for i in range(len(batch))] + [("k", i) for i in range(len(contracting))]
    lhs_roles += [("m", i) for i in range(len(free))]
    rhs_roles = [("b", i) for i in range(len(batch))] + [("k", i) for i in range(len(contracting))]
    lhs_roles = draw(st.permutations(lhs_roles))
    rhs_roles = draw(st.permutations(rhs_roles))
    if draw(st.booleans()):  # either side may be the vector one
        lhs_roles, rhs_roles = rhs_roles, [("n" if r == "m" else r, i) for r, i in lhs_roles]
    sizes = {("b", i): s for i, s in enumerate(batch)}
    sizes |= {("k", i): s for i, s in enumerate(contracting)}
    sizes |= {(r, i): s for i, s in enumerate(free) for r in ("m", "n")}

    def numbers(roles, kind):
        return [roles.index((kind, i)) for i in range(sum(r == kind for r, _ in roles))]

    lb, lc, rb, rc = (
        numbers(lhs_roles, "b"),
        numbers(lhs_roles, "k"),
        numbers(rhs_roles, "b"),
        numbers(rhs_roles, "k"),
    )
    lhs = [sizes[r] for r in lhs_roles]
    rhs = [sizes[r] for r in rhs_roles]
    result = batch + [sizes[r] for r in lhs_roles if r[0] == "m"]
    result += [sizes[r] for r in rhs_roles if r[0] == "n"]
    return _dot_text(lhs, rhs, result, (lb, lc, rb, rc))


@settings(max_examples=60, deadline=None)
@given(_vector_side_dots(), st.integers(0, 2**16))
def test_a_dot_in_any_dimension_order_reduces_to_what_it_computed(text, seed):
    """Batch, free and contracting dimensions in any order on either side: the product's
    order (each side's own where the output allows it) still computes the dot."""
    module = parse_module(text)
    rewritten = copy.deepcopy(module)
    if not strength_reduce_dots(rewritten, H100):
        return  # an outer product of size-1 contractions with an algorithm: a dot still
    verify_module(rewritten)
    arguments = _inputs(module, seed=seed)
    want = np.asarray(flatten_literal(evaluate_module(module, arguments))[0])
    got = np.asarray(flatten_literal(evaluate_module(rewritten, arguments))[0])
    assert got.shape == want.shape
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize(
    "name", ["column_against_matrix", "matrix_vector", "batch_last", "batches_swapped"]
)
def test_a_reordered_product_runs_on_the_interpreter(name):
    """The reductions the reordered products make (over a leading or a middle dimension)
    compile and run as the dot computes."""
    from heron.compiler.program_run import run_program
    from heron.runtime.core.registry import load_backends

    operands, result, attributes, _ = ORDERS[name]
    (lhs_type, lhs), (rhs_type, rhs) = (part.split() for part in operands.split(", "))
    module = parse_module(
        f"HloModule {name}\n\nENTRY main {{\n  {lhs} = {lhs_type} parameter(0)\n"
        f"  {rhs} = {rhs_type} parameter(1)\n"
        f"  ROOT d = {result} dot({lhs}, {rhs}), {attributes}\n}}\n"
    )
    device = load_backends().create_device("interpreter")
    arguments = _inputs(module, seed=5)
    run = run_program(module, arguments, device, "interpreter", target=H100)
    want = np.asarray(evaluate_module(module, arguments))
    np.testing.assert_allclose(run.outputs[0], want, rtol=1e-5, atol=1e-5)
