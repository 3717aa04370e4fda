"""The loop emitter: the seeds' GELU structure at each stage, multi-output fusions, selection.

The GELU module is the "Reproducer" of seeds/xla-gpu-emitters.md, verbatim but for
the stray ':' after ``HloModule m`` (not HLO syntax; heron's parser rejects it).
What is checked follows the seed: after emission one ``heron_gpu.loop`` over
the output calling ``@gelu...`` with the input tensor and the loop's indices;
after ``inline`` a single function; in the PTX 4-wide vector loads and stores
(bf16: ``ld.global.v4.b16`` / ``st.global.v4.b16``).
"""

from __future__ import annotations

import math
import re

import numpy as np
import pytest
from heron_test_support.analysis import A100, H100, analysed, artefact_text
from mlir import ir

from heron.compiler import compile_fusion
from heron.emitters.emitter_base import EmittedKernel
from heron.emitters.ir_utils import walk_ops
from heron.emitters.pipeline import PipelineOptions, heron_passes, run_passes
from heron.emitters.registry import load_emitters
from heron.emitters.selection import emit_fusion, select_emitter
from heron.hlo.parser import parse_module
from heron.hlo.shapes import ArrayShape, Layout, array_shape
from heron.plugins.loop import LoopEmitter, reindex_map

GELU = """HloModule m

gelu {
  %param = bf16[6,512,4096] parameter(0)
  %constant_0 = bf16[] constant(0.5)
  %bcast_0 = bf16[6,512,4096] broadcast(bf16[] %constant_0), dimensions={}
  %constant_1 = bf16[] constant(1)
  %bcast_1 = bf16[6,512,4096] broadcast(bf16[] %constant_1), dimensions={}
  %constant_2 = bf16[] constant(0.79785)
  %bcast_2 = bf16[6,512,4096] broadcast(bf16[] %constant_2), dimensions={}
  %constant_3 = bf16[] constant(0.044708)
  %bcast_3 = bf16[6,512,4096] broadcast(bf16[] %constant_3), dimensions={}
  %square = bf16[6,512,4096] multiply(bf16[6,512,4096] %param, bf16[6,512,4096] %param)
  %cube = bf16[6,512,4096] multiply(bf16[6,512,4096] %square, bf16[6,512,4096] %param)
  %multiply_3 = bf16[6,512,4096] multiply(bf16[6,512,4096] %cube, bf16[6,512,4096] %bcast_3)
  %add_1 = bf16[6,512,4096] add(bf16[6,512,4096] %param, bf16[6,512,4096] %multiply_3)
  %multiply_2 = bf16[6,512,4096] multiply(bf16[6,512,4096] %add_1, bf16[6,512,4096] %bcast_2)
  %tanh_0 = bf16[6,512,4096] tanh(bf16[6,512,4096] %multiply_2)
  %add_0 = bf16[6,512,4096] add(bf16[6,512,4096] %tanh_0, bf16[6,512,4096] %bcast_1)
  %multiply_1 = bf16[6,512,4096] multiply(bf16[6,512,4096] %add_0, bf16[6,512,4096] %bcast_0)
  ROOT %multiply_0 = bf16[6,512,4096] multiply(bf16[6,512,4096] %param, bf16[6,512,4096] %multiply_1)
}

ENTRY main {
  %param = bf16[6,512,4096] parameter(0)
  ROOT fusion = bf16[6,512,4096] fusion(%param), kind=kLoop, calls=gelu
}
"""  # noqa: E501

SEED_MAP = (
    "(th_x, bl_x)[vector_index] -> (bl_x floordiv 4096, (bl_x floordiv 8) mod 512,"
    " (bl_x mod 8) * 512 + th_x * 4 + vector_index),"
    " domain: th_x in [0, 127], bl_x in [0, 24575], vector_index in [0, 3]"
)


def emit_one(text: str) -> EmittedKernel:
    return emit_fusion(parse_module(text, "test.hlo").entry.root_instruction, H100)


def lower(kernel: EmittedKernel, target=H100, stop_after: str | None = None) -> ir.Module:
    options = PipelineOptions.for_target(target)
    return run_passes(kernel.module, heron_passes(), options, stop_after=stop_after)


def functions(module: ir.Module) -> dict[str, ir.Operation]:
    return {
        ir.StringAttr(op.attributes["sym_name"]).value: op
        for op in walk_ops(module.operation, "func.func")
    }


def test_gelu_emits_the_seed_structure():
    kernel = emit_one(GELU)
    assert kernel.emitter == "loop"
    funcs = functions(kernel.module)
    assert list(funcs) == ["fusion", "gelu_multiply_0"]
    entry = funcs["fusion"]
    [loop] = walk_ops(entry, "heron_gpu.loop")
    assert ir.StringAttr(loop.attributes["indexing_map"]).value == SEED_MAP
    body = loop.regions[0].blocks[0]
    vector_index, d0, d1, d2, out = list(body.arguments)
    names = [op.name for op in body.operations]
    assert names == ["heron_gpu.pure_call", "tensor.insert", "gpu.yield"]
    call, insert, _ = [op.operation for op in body.operations]
    assert ir.FlatSymbolRefAttr(call.attributes["callee"]).value == "gelu_multiply_0"
    assert list(call.operands) == [entry.regions[0].blocks[0].arguments[0], d0, d1, d2]
    assert str(call.results[0].type) == "bf16"
    assert list(insert.operands) == [call.results[0], out, d0, d1, d2]
    # The subgraph reads the input once and computes tanh once.
    gelu = funcs["gelu_multiply_0"]
    assert len(walk_ops(gelu, "tensor.extract")) == 1
    assert len(walk_ops(gelu, "math.tanh")) == 1
    assert str(gelu.attributes["function_type"]) == (
        "(tensor<6x512x4096xbf16>, index, index, index) -> bf16"
    )


def test_gelu_is_one_function_after_inlining():
    kernel = emit_one(GELU)
    lower(kernel, stop_after="inline")
    funcs = functions(kernel.module)
    assert list(funcs) == ["fusion"]
    assert walk_ops(kernel.module.operation, "heron_gpu.pure_call") == []
    [loop] = walk_ops(kernel.module.operation, "heron_gpu.loop")
    assert len(walk_ops(loop, "tensor.extract")) == 1
    assert len(walk_ops(loop, "tensor.insert")) == 1


def test_gelu_ptx_has_four_wide_vector_loads_and_stores():
    kernel = emit_one(GELU)
    from heron.runtime.cuda.compiler import compile_to_ptx

    result = compile_to_ptx(lower(kernel), "sm_90", ptx_version=80)
    accesses = sorted(set(re.findall(r"\b(?:ld|st)\.global(?:\.[a-z0-9]+)+", result.ptx)))
    assert accesses == ["ld.global.nc.v4.b16", "st.global.v4.b16"]  # read-only input: .nc
    assert result.kernel_names == ("fusion",)


MULTI_OUTPUT = """HloModule m
fusion {
  p = f32[4,8] parameter(0)
  q = f32[8,4] parameter(1)
  e = f32[4,8] exponential(p)
  b = f32[8,4] bitcast(e)
  s = f32[8,4] add(b, q)
  n = f32[8,4] negate(q)
  ROOT t = (f32[4,8], f32[8,4], f32[8,4]) tuple(e, s, n)
}
ENTRY main {
  p = f32[4,8] parameter(0)
  q = f32[8,4] parameter(1)
  ROOT f = (f32[4,8], f32[8,4], f32[8,4]) fusion(p, q), kind=kLoop, calls=fusion
}
"""


def test_multi_output_writes_every_root_in_one_loop():
    kernel = emit_one(MULTI_OUTPUT)
    entry = functions(kernel.module)["f"]
    [loop] = walk_ops(entry, "heron_gpu.loop")
    inserts = walk_ops(loop, "tensor.insert")
    assert [str(op.operands[1].type) for op in inserts] == [
        "tensor<4x8xf32>",
        "tensor<8x4xf32>",
        "tensor<8x4xf32>",
    ]
    # The f32[8,4] roots are written at the first root's index reshaped: one apply_indexing.
    [apply] = walk_ops(loop, "heron_gpu.apply_indexing")
    assert ir.StringAttr(apply.attributes["indexing_map"]).value == (
        "(d0, d1) -> (d1 floordiv 4 + d0 * 2, d1 mod 4), domain: d0 in [0, 3], d1 in [0, 7]"
    )
    assert list(inserts[1].operands)[2:] == list(apply.results)
    assert list(inserts[2].operands)[2:] == list(apply.results)
    # One call per root, in output order; s reads e through e's function.
    callees = [
        ir.FlatSymbolRefAttr(op.attributes["callee"]).value
        for op in walk_ops(loop, "heron_gpu.pure_call")
    ]
    assert callees == ["fusion_e", "fusion_s", "fusion_n"]
    assert kernel.arguments[-3:] == tuple(
        type(kernel.arguments[0])(f"out{k}", s, True)
        for k, s in enumerate([array_shape("f32", (4, 8)), *[array_shape("f32", (8, 4))] * 2])
    )


def _many_outputs(n: int) -> str:
    lines = ["HloModule m", "fusion {", "  p = f32[64] parameter(0)"]
    for k in range(n):
        lines.append(f"  c{k} = f32[] constant({k})")
        lines.append(f"  b{k} = f32[64] broadcast(c{k}), dimensions={{}}")
        lines.append(f"  r{k} = f32[64] add(p, b{k})")
    shape = "(" + ", ".join(["f32[64]"] * n) + ")"
    lines.append(f"  ROOT t = {shape} tuple({', '.join(f'r{k}' for k in range(n))})")
    lines += ["}", "ENTRY main {", "  p = f32[64] parameter(0)"]
    lines += [f"  ROOT f = {shape} fusion(p), kind=kLoop, calls=fusion", "}"]
    return "\n".join(lines) + "\n"


def test_more_outputs_than_a_loop_carries_are_split_over_loops():
    kernel = emit_one(_many_outputs(20))
    entry = functions(kernel.module)["f"]
    loops = walk_ops(entry, "heron_gpu.loop")
    assert [len(loop.results) for loop in loops] == [16, 4]
    [ret] = walk_ops(entry, "func.return")
    assert list(ret.operands) == [*loops[0].results, *loops[1].results]


@pytest.mark.parametrize(
    ("source", "target"),
    [
        (array_shape("f32", (1, 8192)), array_shape("f32", (8192, 1))),
        (array_shape("f32", (4, 6)), array_shape("f32", (2, 3, 4))),
        (
            ArrayShape(array_shape("f32", (4, 6)).element_type, (4, 6), Layout((0, 1))),
            array_shape("f32", (6, 4)),
        ),
    ],
)
def test_reindex_map_keeps_the_physical_position(source, target):
    """Element at physical position k of the first root -> position k of the other root."""
    m = reindex_map(source, target)
    count = math.prod(source.dims)
    src_strides = _physical_strides(source)
    dst_strides = _physical_strides(target)
    positions = set()
    for index in np.ndindex(*source.dims):
        mapped = m.evaluate(index)
        assert all(0 <= i < n for i, n in zip(mapped, target.dims))
        source_position = sum(i * s for i, s in zip(index, src_strides))
        target_position = sum(i * s for i, s in zip(mapped, dst_strides))
        assert source_position == target_position
        positions.add(target_position)
    assert len(positions) == count


def _physical_strides(shape: ArrayShape) -> list[int]:
    strides = [0] * shape.rank
    stride = 1
    for d in shape.minor_to_major:
        strides[d] = stride
        stride *= shape.dims[d]
    return strides


def test_vector_size_follows_the_corpus_choices(corpus_dir):
    """vectorize_x4 (240,000 f32) fills an A100 (2048 x 108 threads), not an H100 (x 132)."""
    from heron.hlo.parser import parse_module_file

    expected = {
        ("vectorize_x4.hlo", A100): "vector_index in [0, 3]",
        ("vectorize_x4.hlo", H100): None,
        ("vectorize_x1_too_small.hlo", A100): None,
    }
    for (name, target), symbol in expected.items():
        module = parse_module_file(corpus_dir / "common" / "loop" / name)
        emitter = LoopEmitter(analysed(module.entry.root_instruction, target))
        text = emitter.thread_map().format()
        if symbol is None:
            assert "vector_index" not in text
        else:
            assert symbol in text


def test_the_registry_selects_loop_for_any_fusion():
    registry = load_emitters()
    assert "loop" in registry
    origin = registry.origin("loop")
    assert (origin.distribution, origin.value) == ("heron-emitter-plugins", "heron.plugins.loop")
    fusion = parse_module(GELU).entry.root_instruction
    spec = select_emitter(analysed(fusion))
    assert (spec.name, spec.priority, spec.factory) == ("loop", 0, LoopEmitter)
    # Anything but an analysis is not claimed: a fusion, or another instruction.
    assert not spec.claims(fusion)
    assert not spec.claims(parse_module(GELU).entry.parameters[0])


def test_empty_output_is_a_kernel_that_writes_nothing():
    """Zero elements: no work (XLA launches nothing); one thread, no loop, no store."""
    text = (
        "HloModule m\nfusion {\n  p = f32[0,4] parameter(0)\n  ROOT n = f32[0,4] negate(p)\n}\n"
        "ENTRY main {\n  p = f32[0,4] parameter(0)\n"
        "  ROOT f = f32[0,4] fusion(p), kind=kLoop, calls=fusion\n}\n"
    )
    kernel = emit_one(text)
    assert kernel.launch.num_threads == 1
    lowered = str(lower(kernel))
    assert "memref.store" not in lowered and "scf.for" not in lowered


def _global_accesses(ptx: str) -> list[str]:
    """The distinct global load/store instructions of a PTX text (``ld.global.v4.f32``...)."""
    return sorted(set(re.findall(r"\b(?:ld|st)\.global(?:\.[a-z0-9]+)+", ptx)))


@pytest.mark.parametrize(
    ("name", "target", "expected"),
    [
        # The corpus CHECK lines: vector<4xf32> transfers (on a device that 240,000
        # elements fill, the A100), and no vector for 20 elements.
        ("vectorize_x4.hlo", A100, {"ld.global.nc.v4", "st.global.v4"}),
        ("vectorize_x4.hlo", H100, {"ld.global.nc", "st.global"}),
        ("vectorize_x1_too_small.hlo", A100, {"ld.global.nc", "st.global"}),
    ],
    ids=lambda v: getattr(v, "name", None),
)
def test_corpus_vector_width_in_the_final_ptx(corpus_dir, name, target, expected):
    from heron.hlo.parser import parse_module_file

    module = parse_module_file(corpus_dir / "common" / "loop" / name)
    compiled = compile_fusion(module.entry.root_instruction, target, stop_after="ptx")
    accesses = _global_accesses(artefact_text(compiled, "ptx"))
    # the element type is f32, which PTX may spell .f32 or .b32
    kinds = {re.sub(r"\.(?:f32|b32)$", "", a) for a in accesses}
    assert kinds == expected, accesses
    assert all(a.endswith((".f32", ".b32")) for a in accesses), accesses


PARAMETER_ROOT = """HloModule m
fusion {
  p0 = f32[4,8] parameter(0)
  p1 = f32[4,8] parameter(1)
  e = f32[4,8] add(p0, p1)
  ROOT t = (f32[4,8], f32[4,8]) tuple(e, p0)
}
ENTRY main {
  p0 = f32[4,8] parameter(0)
  p1 = f32[4,8] parameter(1)
  ROOT f = (f32[4,8], f32[4,8]) fusion(p0, p1), kind=kLoop, calls=fusion
}
"""


def test_parameter_as_an_output_is_copied_from_its_tensor():
    """``tuple(e, p0)``: the second output is p0's element read at the output's indices."""
    kernel = emit_one(PARAMETER_ROOT)
    entry = functions(kernel.module)["f"]
    p0, p1, out0, out1 = list(entry.regions[0].blocks[0].arguments)
    [loop] = walk_ops(entry, "heron_gpu.loop")
    body = loop.regions[0].blocks[0]
    d0, d1, iter0, iter1 = list(body.arguments)
    [extract] = [op for op in walk_ops(loop, "tensor.extract") if op.operands[0] == p0]
    assert list(extract.operands)[1:] == [d0, d1]
    inserts = walk_ops(loop, "tensor.insert")
    assert len(inserts) == 2
    copied = next(op for op in inserts if op.operands[1] == iter1)
    assert copied.operands[0] == extract.results[0] and list(copied.operands)[2:] == [d0, d1]
    assert list(loop.operands)[2:] == [out0, out1]
    # The add is still a call of its subgraph, which reads both parameters.
    [call] = walk_ops(loop, "heron_gpu.pure_call")
    assert list(call.operands)[:2] == [p0, p1]

    fusion = parse_module(PARAMETER_ROOT).entry.root_instruction
    compiled = compile_fusion(fusion, H100, stop_after="ptx")
    assert compiled.kernel_name == "f"
    ptx = artefact_text(compiled, "ptx")
    # One thread per element: p0 and p1 loaded once, p0 + p1 stored, and p0's loaded
    # register stored unchanged (the copy), in that output order.
    loaded = re.findall(r"ld\.global\.(?:nc\.)?(?:b|f)32\s+(%r\d+)", ptx)
    add = re.search(r"add\.rn\.f32\s+(%r\d+), (%r\d+), (%r\d+);", ptx)
    stored = re.findall(r"st\.global\.(?:b|f)32\s+\[[^\]]+\],\s*(%r\d+);", ptx)
    assert add is not None and len(loaded) == 2
    total, first, second = add.groups()
    assert {first, second} == set(loaded)
    assert stored == [total, _loaded_from_param(ptx, "f_param_0")]


def _loaded_from_param(ptx: str, param: str) -> str:
    """The register a ``ld.global`` fills from kernel parameter ``param`` (pointer + offset)."""
    pointer = re.search(rf"ld\.param\.[bu]64\s+(%rd\d+), \[{param}\];", ptx).group(1)
    derived = {pointer}
    for dest, source in re.findall(r"(?:cvta\.to\.global\.u64|add\.s64)\s+(%rd\d+), (%rd\d+)", ptx):
        if source in derived:
            derived.add(dest)
    [register] = [
        r
        for r, address in re.findall(r"ld\.global\.(?:nc\.)?[bf]32\s+(%r\d+), \[(%rd\d+)\]", ptx)
        if address in derived
    ]
    return register


THREEFRY_COUNTERS = """HloModule threefry_counters
fused_add {
  p0 = u32[] parameter(0)
  p1 = u32[] parameter(1)
  c32 = u64[] constant(32)
  c16 = u64[] constant(16)
  iota = u64[16] iota(), iota_dimension=0
  cols = u64[16,16] broadcast(iota), dimensions={1}
  rows = u64[16,16] broadcast(iota), dimensions={0}
  sixteen = u64[16,16] broadcast(c16), dimensions={}
  scaled = u64[16,16] multiply(rows, sixteen)
  linear = u64[16,16] add(scaled, cols)
  shift = u64[16,16] broadcast(c32), dimensions={}
  high = u64[16,16] shift-right-logical(linear, shift)
  high32 = u32[16,16] convert(high)
  k0 = u32[16,16] broadcast(p0), dimensions={}
  x0 = u32[16,16] add(high32, k0)
  low32 = u32[16,16] convert(linear)
  k1 = u32[16,16] broadcast(p1), dimensions={}
  x1 = u32[16,16] add(low32, k1)
  ROOT t = (u32[16,16], u32[16,16]) tuple(x0, x1)
}
ENTRY e {
  a = u32[] parameter(0)
  b = u32[] parameter(1)
  ROOT f = (u32[16,16], u32[16,16]) fusion(a, b), kind=kLoop, calls=fused_add
}
"""


def test_threefry_counters_store_both_words_in_the_ptx():
    """JAX's threefry counters (issue 26, dropout_threefry): the high word of a 64-bit
    iota, ``convert(iota >> 32)``, is 0 for 256 elements. Index narrowing made that an
    i32 shift by 32, LLVM poison, and LLVM deleted the store of the first output: on a
    GPU it held whatever the buffer held before, different from run to run."""
    module = parse_module(THREEFRY_COUNTERS)
    compiled = compile_fusion(module.entry.root_instruction, H100, stop_after="ptx")
    ptx = artefact_text(compiled, "ptx")
    stores = re.findall(r"\bst\.global(?:\.[a-z0-9]+)+", ptx)
    assert len(stores) == 2, ptx
    assert not re.search(r"sh[rl]\.\w+\s+%r\d+, %r\d+, 32;", ptx), ptx
