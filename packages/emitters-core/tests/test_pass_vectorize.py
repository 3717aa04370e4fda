"""vectorize-loads-stores on hand-written flatten-tensors IR: what must and must not change."""

from __future__ import annotations

import re

import pytest
from heron_test_support.vector_pipeline_inputs import flat_loop, gelu_flat
from mlir import ir

from heron.emitters import ir_utils
from heron.emitters.dialect import make_context, verify_xla_ops
from heron.emitters.pipeline import PipelineOptions, vectorize
from heron.indexing import Dim, Symbol, parse_indexing_map


def _vectorized(text: str) -> tuple[str, str]:
    """(input as printed, output as printed) after the pass; the output is verified."""
    with make_context(), ir.Location.unknown():
        module = ir.Module.parse(text)
        before = str(module)
        vectorize.run(module, PipelineOptions())
        verify_xla_ops(module)
        return before, str(module)


def _ops(text: str, name: str) -> list[ir.Operation]:
    with make_context(), ir.Location.unknown():
        module = ir.Module.parse(text)
        return [str(op) for op in ir_utils.walk_ops(module.operation, name)]


def test_gelu_becomes_one_vector_read_and_write_and_the_loop_carries_the_vector():
    _, out = _vectorized(gelu_flat())
    reads = _ops(out, "vector.transfer_read")
    writes = _ops(out, "vector.transfer_write")
    assert len(reads) == 1 and len(writes) == 1
    assert "tensor<12582912xbf16>, vector<4xbf16>" in reads[0]
    assert "in_bounds = [true]" in reads[0] and "in_bounds = [true]" in writes[0]
    assert "vector<4xbf16>, tensor<12582912xbf16>" in writes[0]
    assert not _ops(out, "tensor.extract") and not _ops(out, "tensor.insert")
    loops = _ops(out, "scf.for")
    assert len(loops) == 1
    assert "-> (tensor<12582912xbf16>, vector<4xbf16>)" in loops[0]
    assert "dense<0.000000e+00> : vector<4xbf16>" in out  # the carried vector's init
    # The read is hoisted before the loop, the write follows it, both at the base index
    # (the map applied at vector_index = 0).
    assert out.index("vector.transfer_read") < out.index("scf.for") < out.index("transfer_write")
    (base,) = _ops(out, "heron_gpu.apply_indexing")
    assert "%c0" in base and "th_x * 4 + bl_x * 512 + vector_index" in base
    extract = _ops(out, "vector.extract")
    insert = _ops(out, "vector.insert")
    assert len(extract) == 1 and len(insert) == 1
    assert "bf16 from vector<4xbf16>" in extract[0]
    assert "bf16 into vector<4xbf16>" in insert[0]


def test_guard_on_the_thread_only_is_kept_around_the_hoisted_accesses():
    _, out = _vectorized(flat_loop(guard="invariant"))
    assert len(_ops(out, "vector.transfer_read")) == 1
    assert len(_ops(out, "vector.transfer_write")) == 1
    ifs = _ops(out, "scf.if")
    # one guard around the read, the loop's own, one around the write
    assert len(ifs) == 3
    read_guard = next(i for i in ifs if "vector.transfer_read" in i)
    write_guard = next(i for i in ifs if "vector.transfer_write" in i)
    assert "-> (vector<4xbf16>)" in read_guard
    assert "dense<0.000000e+00>" in read_guard  # no read for threads out of bounds
    assert "-> (tensor<12582912xbf16>)" in write_guard


@pytest.mark.parametrize("size", [2, 8])
def test_other_vector_sizes(size):
    index_map = (
        f"(th_x, bl_x, v) -> (th_x * {size} + bl_x * {128 * size} + v), "
        f"domain: th_x in [0, 127], bl_x in [0, 99], v in [0, {size - 1}]"
    )
    _, out = _vectorized(flat_loop(index_map, element="f32", size=size, length=12800 * size))
    (read,) = _ops(out, "vector.transfer_read")
    assert f"vector<{size}xf32>" in read
    assert len(_ops(out, "vector.transfer_write")) == 1


def test_loop_variable_as_a_symbol_and_a_mod_term_in_the_base():
    index_map = (
        "(th_x, bl_x)[v] -> ((th_x * 4) mod 256 + bl_x * 256 + v), "
        "domain: th_x in [0, 127], bl_x in [0, 99], v in [0, 3]"
    )
    _, out = _vectorized(flat_loop(index_map, element="f32", length=25600))
    assert len(_ops(out, "vector.transfer_read")) == 1
    assert len(_ops(out, "vector.transfer_write")) == 1


STRIDE_2 = (
    "(th_x, bl_x, v) -> (th_x * 8 + bl_x * 1024 + v * 2), "
    "domain: th_x in [0, 127], bl_x in [0, 24575], v in [0, 3]"
)
UNALIGNED = (
    "(th_x, bl_x, v) -> (th_x * 4 + bl_x * 512 + v + 1), "
    "domain: th_x in [0, 127], bl_x in [0, 24575], v in [0, 3]"
)
ODD_STRIDE = (
    "(th_x, bl_x, v) -> (th_x * 2 + bl_x * 512 + v), "
    "domain: th_x in [0, 127], bl_x in [0, 24575], v in [0, 3]"
)


@pytest.mark.parametrize(
    "text",
    [
        pytest.param(flat_loop(STRIDE_2, length=4 * 12582912), id="index-stride-2"),
        pytest.param(flat_loop(UNALIGNED, length=12582916), id="base-not-multiple-of-4"),
        pytest.param(flat_loop(ODD_STRIDE), id="thread-stride-2-with-4-elements"),
        pytest.param(flat_loop(element="i4"), id="sub-byte-i4"),
        pytest.param(flat_loop(element="i1"), id="pred"),
        pytest.param(flat_loop(element="f8E4M3FN"), id="fp8"),
        pytest.param(flat_loop(guard="variant"), id="bounds-check-depends-on-v"),
        pytest.param(flat_loop(size=3), id="three-elements"),
    ],
)
def test_not_vectorized(text):
    if "f8E4M3FN" in text:
        text = text.replace("arith.muli %e, %e : f8E4M3FN", "arith.select %true, %e, %e : f8E4M3FN")
        text = text.replace(
            "%c0 = arith.constant 0 : index",
            "%c0 = arith.constant 0 : index\n    %true = arith.constant true",
        )
    before, after = _vectorized(text)
    assert after == before
    assert "vector." not in after


def test_complex_elements_are_not_vectorized():
    text = flat_loop(element="f32").replace("f32", "complex<f32>")
    text = text.replace("arith.mulf %e, %e : complex<f32>", "complex.mul %e, %e : complex<f32>")
    before, after = _vectorized(text)
    assert after == before


def test_contiguous_base_uses_the_domain():
    m = parse_indexing_map("(d0)[s0] -> (d0 * 4 + s0), domain: d0 in [0, 9], s0 in [0, 3]")
    assert vectorize.contiguous_base(m, Symbol(0), 4)
    assert vectorize.contiguous_base(m, Symbol(0), 2)
    assert not vectorize.contiguous_base(m, Symbol(0), 8)
    assert not vectorize.contiguous_base(m, Dim(0), 4)  # d0 has stride 4, not 1
    # (d0 mod 2) * 4: a multiple of 4 only through the mod's own multiplier
    m = parse_indexing_map("(d0, d1) -> ((d0 mod 2) * 4 + d1), domain: d0 in [0, 9], d1 in [0, 3]")
    assert vectorize.contiguous_base(m, Dim(1), 4)
    # d0 floordiv 2 is not a multiple of anything
    m = parse_indexing_map("(d0, d1) -> (d0 floordiv 2 + d1), domain: d0 in [0, 9], d1 in [0, 3]")
    assert not vectorize.contiguous_base(m, Dim(1), 4)
    # but if its range is a single multiple of 4 after simplification, it is
    m = parse_indexing_map(
        "(d0, d1) -> ((d0 floordiv 16) * 4 + d1), domain: d0 in [0, 9], d1 in [0, 3]"
    )
    assert vectorize.contiguous_base(m, Dim(1), 4)


_GUARD_MAP = (
    "(th_x, bl_x)[v] -> ({expr}), domain: th_x in [0, 127], bl_x in [0, 24575], v in [0, 3]"
)


def _guarded_by_apply(expr: str) -> str:
    """flat_loop's guarded form whose check is an apply_indexing with %v among its operands."""
    text = flat_loop(guard="invariant")
    check = (
        f'%g = "heron_gpu.apply_indexing"(%tid, %bid, %v) '
        f'{{indexing_map = "{_GUARD_MAP.format(expr=expr)}"}} : (index, index, index) -> index\n'
        "      %ok = arith.cmpi ult, %g, %c1000 : index"
    )
    old = "%ok = arith.cmpi ult, %tid, %c100 : index"
    assert old in text
    return text.replace(old, check)


def test_guard_whose_map_does_not_use_the_loop_variable_is_invariant():
    """The loop variable is an operand of the check, but no map result uses its symbol."""
    _, out = _vectorized(_guarded_by_apply("th_x + bl_x * 128"))
    assert len(_ops(out, "vector.transfer_read")) == 1
    assert len(_ops(out, "vector.transfer_write")) == 1
    assert not _ops(out, "tensor.extract") and not _ops(out, "tensor.insert")
    # the hoisted check (before the loop) is evaluated with the symbol at its lower bound
    with make_context(), ir.Location.unknown():
        module = ir.Module.parse(out)
        (loop,) = ir_utils.walk_ops(module.operation, "scf.for")
        checks = [
            a
            for a in ir_utils.walk_ops(module.operation, "heron_gpu.apply_indexing")
            if "th_x + bl_x * 128)" in str(a)
        ]
        hoisted = [a for a in checks if a.parent.name == "func.func"]
        assert len(hoisted) == 1
        symbol = hoisted[0].operands[2]
        assert symbol.owner.name == "arith.constant"
        assert ir.IntegerAttr(symbol.owner.attributes["value"]).value == 0


def test_guard_whose_map_uses_the_loop_variable_is_not_hoisted():
    before, after = _vectorized(_guarded_by_apply("th_x + bl_x * 128 + v"))
    assert after == before


def _column_pair(base: str, second: str, element: str = "f32", n: int = 4096) -> str:
    """Two extracts of one thread's neighbouring columns, as the column reduction emits them."""
    domain = "domain: th_x in [0, 1023]"
    return f"""
module {{
  func.func @k(%in: tensor<{n}x{element}>) -> {element} {{
    %t = gpu.thread_id x upper_bound 1024
    %i0 = "heron_gpu.apply_indexing"(%t) {{indexing_map = "(th_x) -> ({base}), {domain}"}}
        : (index) -> index
    %a = tensor.extract %in[%i0] : tensor<{n}x{element}>
    %i1 = "heron_gpu.apply_indexing"(%t) {{indexing_map = "(th_x) -> ({second}), {domain}"}}
        : (index) -> index
    %b = tensor.extract %in[%i1] : tensor<{n}x{element}>
    %s = arith.{"addf" if element.startswith("f") else "addi"} %a, %b : {element}
    return %s : {element}
  }}
}}
"""


@pytest.mark.parametrize(
    ("element", "first", "second"),
    [
        ("f32", "th_x * 2", "th_x * 2 + 1"),
        ("i16", "th_x * 2 + 2", "th_x * 2 + 3"),
        ("f32", "th_x * 2 + 1", "th_x * 2"),  # in the other order: the read precedes both
    ],
)
def test_adjacent_extracts_in_one_block_become_one_vector_read(element, first, second):
    _, out = _vectorized(_column_pair(first, second, element))
    (read,) = _ops(out, "vector.transfer_read")
    assert f"vector<2x{element}>" in read
    assert not _ops(out, "tensor.extract")
    assert out.index("vector.transfer_read") < out.index("arith.add")
    assert len(_ops(out, "vector.extract")) == 2


@pytest.mark.parametrize(
    ("first", "second", "why"),
    [
        ("th_x * 2 + 1", "th_x * 2 + 2", "the pair straddles an alignment boundary"),
        ("th_x", "th_x + 1", "the base is not provably even"),
        ("th_x * 2", "th_x * 2 + 3", "not adjacent"),
    ],
)
def test_unaligned_or_distant_extracts_stay_scalar(first, second, why):
    _, out = _vectorized(_column_pair(first, second))
    assert not _ops(out, "vector.transfer_read"), why
    assert len(_ops(out, "tensor.extract")) == 2, why


def test_an_element_extracted_twice_is_one_lane_for_both():
    """Two reductions of one input read each column twice: still one read, two lanes."""
    text = _column_pair("th_x * 2", "th_x * 2 + 1").replace(
        "    %s = arith.addf %a, %b : f32\n",
        '    %j = "heron_gpu.apply_indexing"(%t) {indexing_map = "(th_x) -> (th_x * 2),'
        ' domain: th_x in [0, 1023]"} : (index) -> index\n'
        "    %c = tensor.extract %in[%j] : tensor<4096xf32>\n"
        "    %ab = arith.addf %a, %b : f32\n"
        "    %s = arith.addf %ab, %c : f32\n",
    )
    _, out = _vectorized(text)
    assert len(_ops(out, "vector.transfer_read")) == 1
    assert not _ops(out, "tensor.extract")
    assert out.count("vector.extract") == 2
    assert re.search(r"(%\d+) = vector.extract %\d+\[0\].*\n(.*\n)*.*arith.addf %\d+, \1", out)


def _column_run(element: str, count: int, stride: int) -> str:
    """``count`` extracts of a thread's consecutive elements ``th_x * stride + i``, summed."""
    domain = "domain: th_x in [0, 255]"
    add = "addf" if element.startswith("f") else "addi"
    lines = []
    for i in range(count):
        lines.append(
            f'    %i{i} = "heron_gpu.apply_indexing"(%t) {{indexing_map = "(th_x) ->'
            f' (th_x * {stride} + {i}), {domain}"}} : (index) -> index\n'
            f"    %e{i} = tensor.extract %in[%i{i}] : tensor<4096x{element}>\n"
        )
        if i:
            previous = "%e0" if i == 1 else f"%s{i - 1}"
            lines.append(f"    %s{i} = arith.{add} {previous}, %e{i} : {element}\n")
    return f"""
module {{
  func.func @k(%in: tensor<4096x{element}>) -> {element} {{
    %t = gpu.thread_id x upper_bound 256
{"".join(lines)}    return %s{count - 1} : {element}
  }}
}}
"""


@pytest.mark.parametrize(
    ("element", "count", "stride", "reads"),
    [
        ("i8", 16, 16, ["vector<16xi8>"]),  # 16 bytes: one 128-bit read
        ("i8", 16, 8, ["vector<8xi8>"] * 2),  # the base is a multiple of 8 only
        ("f16", 16, 16, ["vector<8xf16>"] * 2),  # 16 f16 are 32 bytes: two reads
        ("f32", 8, 8, ["vector<4xf32>"] * 2),
    ],
    ids=["i8_16", "i8_unaligned_16", "f16_16", "f32_8"],
)
def test_a_run_is_read_in_vectors_of_at_most_16_bytes(element, count, stride, reads):
    """Runs group up to 16 elements where their bytes are at most 16 and the base is a
    multiple of the group's size: 1-byte elements read 16 at once (two 8-byte reads when
    groups stopped at 8), wider ones are unchanged."""
    _, out = _vectorized(_column_run(element, count, stride))
    found = [
        re.search(r"vector<\d+x\w+>", read).group(0) for read in _ops(out, "vector.transfer_read")
    ]
    assert sorted(found) == sorted(reads)
    assert not _ops(out, "tensor.extract")


# -- atomic adds (a scatter-add's window) -------------------------------------------------

SCATTER_ADD = """
func.func @k(%table: tensor<4096x{t}>, %rows: tensor<64xi32>, %upd: tensor<1024x{t}>,
             %out: tensor<4096x{t}> {{heron.in_place_of = 0 : i64}}) -> tensor<4096x{t}>
    attributes {{heron.kernel, heron.block_size = array<i64: 64, 1, 1>,
                heron.grid_size = array<i64: 4, 1, 1>}} {{
  %tid = gpu.thread_id x upper_bound 64
  %bid = gpu.block_id x upper_bound 4
  %c0 = arith.constant 0 : index
  %c1 = arith.constant 1 : index
  %cv = arith.constant {lanes} : index
  %r = scf.for %v = %c0 to %cv step %c1 iter_args(%acc = %out) -> (tensor<4096x{t}>) {{
    %u = "heron_gpu.apply_indexing"(%tid, %bid, %v) {{indexing_map = "{update_map}"}}
      : (index, index, index) -> index
    %x = tensor.extract %upd[%u] : tensor<1024x{t}>
    %ri = "heron_gpu.apply_indexing"(%tid, %bid, %v) {{indexing_map = "{row_map}"}}
      : (index, index, index) -> index
    %row32 = tensor.extract %rows[%ri] : tensor<64xi32>
    %row = arith.index_cast %row32 : i32 to index
    %c255 = arith.constant 255 : index
    %ok = arith.cmpi ule, %row, %c255 : index
    %next = scf.if %ok -> (tensor<4096x{t}>) {{
      %o = "heron_gpu.apply_indexing"(%row, %tid, %bid, %v) {{indexing_map = "{target_map}"}}
        : (index, index, index, index) -> index
      %a = "heron_gpu.atomic_rmw"(%acc, %o) ({{
      ^bb0(%cur: {t}):
        %s = {combine} %cur, %x : {t}
        "gpu.yield"(%s) : ({t}) -> ()
      }}) : (tensor<4096x{t}>, index) -> tensor<4096x{t}>
      scf.yield %a : tensor<4096x{t}>
    }} else {{
      scf.yield %acc : tensor<4096x{t}>
    }}
    scf.yield %next : tensor<4096x{t}>
  }}
  return %r : tensor<4096x{t}>
}}
"""


def _scatter_add(t: str = "f32", lanes: int = 4, combine: str = "arith.addf") -> str:
    """Rows of 16 elements, each thread ``lanes`` of them; the row index read per update."""
    element = f"th_x * {lanes} + bl_x * {64 * lanes}"
    domain = f"th_x in [0, 63], bl_x in [0, 3], v in [0, {lanes - 1}]"
    return SCATTER_ADD.format(
        t=t,
        lanes=lanes,
        combine=combine,
        update_map=f"(th_x, bl_x, v) -> ({element} + v), domain: {domain}",
        row_map=f"(th_x, bl_x, v) -> (({element}) floordiv 16), domain: {domain}",
        target_map=(
            f"(d0, th_x, bl_x, v) -> (d0 * 16 + ({element}) mod 16 + v),"
            f" domain: d0 in [0, 255], {domain}"
        ),
    )


def _vectorized_for(text: str, vector_atomic_add_bytes: int) -> str:
    with make_context(), ir.Location.unknown():
        module = ir.Module.parse(text)
        options = PipelineOptions(vector_atomic_add_bytes=vector_atomic_add_bytes)
        vectorize.run(module, options)
        verify_xla_ops(module)
        return str(module)


@pytest.mark.parametrize(("t", "lanes"), [("f32", 4), ("f32", 2), ("bf16", 8), ("f16", 4)])
def test_a_scatter_add_window_becomes_one_vector_atomic_after_the_loop(t, lanes):
    out = _vectorized_for(_scatter_add(t, lanes), 16)
    (atomic,) = _ops(out, "heron_gpu.atomic_rmw")
    assert f"^bb0(%arg4: vector<{lanes}x{t}>)" in atomic
    assert "arith.addf %arg4, %" in atomic and f": vector<{lanes}x{t}>" in atomic
    # After the loop, under the guard hoisted before it (the row read is invariant).
    assert out.index("scf.for") < out.index("heron_gpu.atomic_rmw")
    guard = _ops(out, "scf.if")[-1]
    assert "heron_gpu.atomic_rmw" in guard
    assert out.index("tensor.extract %arg1") < out.index("scf.for")
    # The index is the window's first element: the map at v = 0.
    base = [a for a in _ops(out, "heron_gpu.apply_indexing") if "d0 * 16" in a][-1]
    assert "%c0" in base


@pytest.mark.parametrize(
    ("text", "vector_bytes", "why"),
    [
        (_scatter_add(), 0, "the device adds one element at a time"),
        (_scatter_add("f32", 8), 16, "8 f32 are 32 bytes, more than one atomic adds"),
        (_scatter_add("f64", 2), 16, "PTX has no vector f64 add"),
        (_scatter_add("i32", 4, "arith.addi"), 16, "integer adds have no vector form"),
        (_scatter_add(combine="arith.maximumf"), 16, "only adds are vectorized"),
    ],
)
def test_atomics_that_stay_scalar(text, vector_bytes, why):
    out = _vectorized_for(text, vector_bytes)
    (atomic,) = _ops(out, "heron_gpu.atomic_rmw")
    assert "vector<" not in atomic, why
    assert out.index("heron_gpu.atomic_rmw") < out.rindex("scf.yield"), why


def test_a_row_read_from_the_written_buffer_is_not_hoisted():
    """The operand the scatter updates in place may change under the loop: a guard that
    reads it is not loop-invariant, and the atomics stay scalar."""
    text = _scatter_add().replace("tensor.extract %rows[%ri] : tensor<64xi32>", "PLACEHOLDER")
    text = text.replace(
        "PLACEHOLDER",
        "tensor.extract %table[%ri] : tensor<4096xf32>\n"
        "    %row32 = arith.fptosi %rowf : f32 to i32",
    ).replace("%row32 = tensor.extract", "%rowf = tensor.extract")
    out = _vectorized_for(text, 16)
    (atomic,) = _ops(out, "heron_gpu.atomic_rmw")
    assert "vector<" not in atomic
