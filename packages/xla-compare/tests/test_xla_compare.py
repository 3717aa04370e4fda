"""heron.xla_compare without XLA: the module text, the worker's protobuf edit, the dump
parser, the kernel pairing, finding XLA, and a whole comparison against a fake XLA
that replays a dump the real one made (tests/data/scatter_add_dump: gpu/scatter/add.hlo,
jax-cuda13-pjrt 0.12.0.1, H100)."""

from __future__ import annotations

import json
import signal
import stat
import sys
from pathlib import Path

import pytest

from heron.hlo.parser import parse_module
from heron.xla_compare import XlaNotInstalledError, find_xla, target_config
from heron.xla_compare.compare import DEVICELESS_NOTE, compare_module, pair_kernels
from heron.xla_compare.heron_side import HeronKernel
from heron.xla_compare.install import XlaInstallation
from heron.xla_compare.module_text import is_prefused, with_default_layouts, xla_module_text
from heron.xla_compare.report import comparison_record, format_comparison
from heron.xla_compare.worker import _fields, without_debug_options
from heron.xla_compare.xla_side import (
    WARM_UP_MODULE,
    BufferSizes,
    XlaCompileError,
    XlaKernel,
    buffer_sizes,
    fatal_line,
    kernel_name,
    parse_fusions,
    parse_thunk_sequence,
    read_dump,
    time_xla_compile,
)

DUMP = Path(__file__).parent / "data" / "scatter_add_dump"

TINY_MODULE = "HloModule m\nENTRY e {\n  ROOT p = f32[4]{0} parameter(0)\n}\n"

SCATTER = """
add {
  p0 = f32[] parameter(0)
  p1 = f32[] parameter(1)
  ROOT sum = f32[] add(p0, p1)
}
scatter {
  operand = f32[10,5] parameter(0)
  indices = s32[24,1] parameter(1)
  update = f32[24,2,3] parameter(2)
  ROOT scatter = f32[10,5] scatter(operand, indices, update), update_window_dims={1,2},
    inserted_window_dims={}, scatter_dims_to_operand_dims={0}, index_vector_dim=1,
    unique_indices=false, to_apply=add
}
"""


def test_default_layouts_are_added_where_missing():
    text = "p = f32[10,5] parameter(0)\nq = s4[3]{0} parameter(1)\nr = f32[] add(a, b)"
    assert with_default_layouts(text) == (
        "p = f32[10,5]{1,0} parameter(0)\nq = s4[3]{0} parameter(1)\nr = f32[] add(a, b)"
    )


def test_a_bare_fusion_is_printed_with_its_entry():
    module = parse_module(SCATTER)
    text = xla_module_text(module)
    assert "\nENTRY " in text
    assert "fusion(" in text and "kind=kLoop" in text
    assert "f32[24,2,3]{2,1,0}" in text
    assert is_prefused(module)


def _varint(value: int) -> bytes:
    out = bytearray()
    while value >= 0x80:
        out.append((value & 0x7F) | 0x80)
        value >>= 7
    out.append(value)
    return bytes(out)


def _field(number: int, payload: bytes) -> bytes:
    return _varint(number << 3 | 2) + _varint(len(payload)) + payload


def test_the_debug_options_are_dropped_from_the_compile_options():
    build = _field(3, b"debug" * 40) + _varint(4 << 3) + _varint(1) + _field(2, b"layout")
    options = _field(1, b"argument") + _field(3, build) + _varint(4 << 3) + _varint(1)
    stripped = without_debug_options(options)
    fields = [(n, w) for n, w, *_ in _fields(stripped)]
    assert fields == [(1, 2), (3, 2), (4, 0)]
    (inner,) = [stripped[p:e] for n, _, _, p, e in _fields(stripped) if n == 3]
    assert [(n, w) for n, w, *_ in _fields(inner)] == [(4, 0), (2, 2)]


def test_the_dump_is_read():
    thunks = (DUMP / "module_0000.add.thunk_sequence.txt").read_text()
    (kernel,) = parse_thunk_sequence(thunks)
    assert kernel.name == "loop_scatter_fusion"
    assert (kernel.grid, kernel.block, kernel.shared_memory) == ((2, 1, 1), (128, 1, 1), 0)
    hlo = (DUMP / "module_0000.add.sm_9.0a_gpu_after_optimizations.txt").read_text()
    fusions = parse_fusions(hlo)
    assert set(fusions) == {"loop_scatter_fusion"}
    assert fusions["loop_scatter_fusion"]["fused_names"] >= {"scatter"}
    result = read_dump(DUMP, {"seconds": 0.5, "plugin_version": "0.12.0.1"})
    (kernel,) = result.kernels
    assert kernel.fusion == "loop_scatter_fusion" and kernel.kind == "kLoop"
    assert kernel.stats is not None and kernel.stats.atomics == 1
    assert kernel.ptx_file in result.ptx
    assert kernel_name("fusion.1") == "fusion_1"


def test_a_check_failure_is_one_line():
    stderr = "I1124 info\nF1124 08:00:00 1 shape.cc:12] Check failed: layout\n*** Check failure"
    assert fatal_line(stderr) == "F1124 08:00:00 1 shape.cc:12] Check failed: layout"
    assert fatal_line("nothing fatal") is None


def test_kernels_pair_by_fused_instruction_names():
    heron = [
        HeronKernel("a", fused_names=frozenset({"x", "y"})),
        HeronKernel("b", fused_names=frozenset({"z"})),
    ]
    xla = [
        XlaKernel("k1", (1, 1, 1), (32, 1, 1), 0, "f1", fused_names=frozenset({"z.1"})),
        XlaKernel("k2", (1, 1, 1), (32, 1, 1), 0, "f2", fused_names=frozenset({"y.2", "x"})),
        XlaKernel("k3", (1, 1, 1), (32, 1, 1), 0, "f3", fused_names=frozenset({"w"})),
    ]
    pairs = pair_kernels(heron, xla)
    assert [(p.heron and p.heron.fusion, p.xla and p.xla.name) for p in pairs] == [
        ("a", "k2"),
        ("b", "k1"),
        (None, "k3"),
    ]


def test_the_closest_pairs_are_made_first_and_a_fusion_of_the_same_name_is_preferred():
    def heron_kernel(fusion, names):
        return HeronKernel(fusion, fused_names=frozenset(names))

    def xla_kernel(fusion, names):
        return XlaKernel(fusion, (1, 1, 1), (32, 1, 1), 0, fusion, fused_names=frozenset(names))

    heron = [
        # a split reduce's halves keep the reduce's name (heron's rewrite suffixes)
        heron_kernel("input_reduce_fusion", {"r.split.1", "square.2"}),
        # the normalisation with the rsqrt XLA keeps in a kernel of its own
        heron_kernel("loop_add_fusion", {"add.4", "multiply.3", "rsqrt.1", "divide.2", "y.3"}),
        # named by another rewrite than XLA's: no name in common, the same fusion name
        heron_kernel("loop_broadcast_fusion", {"init.broadcast.1"}),
    ]
    xla = [
        xla_kernel("loop_multiply_rsqrt_fusion", {"rsqrt.1.2", "divide.2", "y.3.1", "m.1"}),
        xla_kernel("loop_add_fusion.1", {"add.4.1", "multiply.3"}),
        xla_kernel("input_reduce_fusion", {"r.3", "square.2.5"}),
        xla_kernel("loop_broadcast_fusion", {"broadcast.2"}),
    ]
    pairs = pair_kernels(heron, xla)
    assert [(p.heron and p.heron.fusion, p.xla and p.xla.name) for p in pairs] == [
        ("input_reduce_fusion", "input_reduce_fusion"),
        ("loop_add_fusion", "loop_add_fusion.1"),
        ("loop_broadcast_fusion", "loop_broadcast_fusion"),
        (None, "loop_multiply_rsqrt_fusion"),
    ]


def test_find_xla(tmp_path):
    with pytest.raises(XlaNotInstalledError, match=r"pip install 'heron\[xla\]'"):
        find_xla({"HERON_XLA_PYTHON": str(tmp_path / "missing")})
    python = tmp_path / "python"
    python.write_text("#!/bin/sh\n")
    python.chmod(python.stat().st_mode | stat.S_IXUSR)
    found = find_xla({"HERON_XLA_PYTHON": str(python), "HERON_XLA_PLUGIN": "/p.so"})
    assert found == XlaInstallation(str(python), "/p.so")


def test_the_target_configs_are_xla_specs():
    assert "core_count: 132" in target_config("h100")
    assert "core_count: 108" in target_config("a100")


def fake_xla(folder: Path, dump: Path) -> XlaInstallation:
    """A 'Python' that answers the worker's request by copying a real XLA dump."""
    script = folder / "fake-xla-python"
    script.write_text(
        f"#!{sys.executable}\n"
        "import json, shutil, sys, pathlib\n"
        "request = json.loads(sys.stdin.read())\n"
        f"for f in pathlib.Path({str(dump)!r}).iterdir():\n"
        "    shutil.copy(f, pathlib.Path(request['dump_dir']) / f.name)\n"
        "print(json.dumps({'ok': True, 'seconds': 0.25, 'plugin_version': 'fake',"
        " 'jaxlib_version': 'fake', 'pjrt_api': '0.0'}))\n"
    )
    script.chmod(script.stat().st_mode | stat.S_IXUSR)
    return XlaInstallation(str(script))


def test_a_comparison_against_a_replayed_xla_dump(tmp_path):
    pytest.importorskip("mlir")
    module = parse_module(SCATTER)
    comparison = compare_module(module, "add.hlo", "h100", installation=fake_xla(tmp_path, DUMP))
    assert comparison.xla_error is None
    (pair,) = comparison.pairs
    assert pair.heron.emitter == "scatter"
    assert pair.xla.name == "loop_scatter_fusion"
    assert pair.same_launch is True  # 2 blocks of 128 threads on both sides
    record = comparison_record(comparison)
    assert record["pairs"][0]["xla"]["launch"] == "2x128"
    assert record["pairs"][0]["heron"]["instructions"] > 0
    if comparison.ptxas:
        assert record["pairs"][0]["xla"]["registers"] > 0
        assert record["pairs"][0]["heron"]["registers"] > 0
    if comparison.nvdisasm:  # the SASS both cubins hold, measured by one nvdisasm
        for side in ("heron", "xla"):
            sass = record["pairs"][0][side]
            assert sass["sass_instructions"] > 0
            assert sum(sass["sass_atomics"].values()) >= 1  # a scatter-add adds atomically
    text = format_comparison(comparison)
    if comparison.nvdisasm:
        assert "SASS instructions" in text and text.count("heron/XLA") == 2
    assert "launch (blocks x threads)" in text and "same" in text
    assert DEVICELESS_NOTE in text
    json.dumps(record)


def test_a_timed_compile_is_a_warm_worker_s_without_a_dump(tmp_path):
    """time_xla_compile asks the worker to compile the warm-up module first and to dump
    nothing, and answers the worker's seconds (the timed compile's alone)."""
    seen = tmp_path / "request.json"
    script = tmp_path / "fake-xla-python"
    script.write_text(
        f"#!{sys.executable}\n"
        "import json, sys, pathlib\n"
        "request = json.loads(sys.stdin.read())\n"
        f"pathlib.Path({str(seen)!r}).write_text(json.dumps(request))\n"
        "print(json.dumps({'ok': True, 'seconds': 0.0425, 'warm': True}))\n"
    )
    script.chmod(script.stat().st_mode | stat.S_IXUSR)
    seconds = time_xla_compile(TINY_MODULE, target_config("h100"), XlaInstallation(str(script)))
    assert seconds == 0.0425
    request = json.loads(seen.read_text())
    assert request["warm_up"] == WARM_UP_MODULE and request["hlo"] == TINY_MODULE
    assert not request.get("dump_dir")  # no dump: its writing is no part of the compile
    script.write_text(
        f"#!{sys.executable}\nimport json\nprint(json.dumps({{'ok': False, 'error': 'no'}}))\n"
    )
    with pytest.raises(XlaCompileError, match="no"):
        time_xla_compile(TINY_MODULE, target_config("h100"), XlaInstallation(str(script)))


def test_the_warm_up_module_compiles_with_heron_too():
    """benchmarks/opt_time.py warms heron up on the same module as XLA's workers."""
    pytest.importorskip("mlir")
    from heron.compiler import Target
    from heron.compiler.executable import compile_program

    module = parse_module(WARM_UP_MODULE)
    compiled = compile_program(module, Target.preset("h100"), ("interpreter",))
    assert len(compiled.artefact.kernels) >= 1


def test_an_xla_abort_is_reported_not_raised(tmp_path):
    script = tmp_path / "crashing-python"
    script.write_text(
        "#!/bin/sh\necho 'F1124 08:00:00 1 hlo.cc:1] Check failed: has_layout' >&2\nkill -ABRT $$\n"
    )
    script.chmod(script.stat().st_mode | stat.S_IXUSR)
    module = parse_module(SCATTER)
    comparison = compare_module(
        module, "add.hlo", installation=XlaInstallation(str(script)), heron_full=False
    )
    assert comparison.xla_error == (
        f"XLA aborted (killed by signal {int(signal.SIGABRT)}):"
        " F1124 08:00:00 1 hlo.cc:1] Check failed: has_layout"
    )
    assert comparison.pairs[0].xla is None


def test_the_reference_table_of_a_corpus(tmp_path):
    pytest.importorskip("mlir")
    from heron.xla_compare.reference import build_reference

    corpus = tmp_path / "corpus"
    (corpus / "gpu" / "scatter").mkdir(parents=True)
    (corpus / "gpu" / "scatter" / "add.hlo").write_text(SCATTER)
    lines = []
    table = build_reference(corpus, installation=fake_xla(tmp_path, DUMP), progress=lines.append)
    assert table["target"] == "h100" and table["xla"]["plugin"] == "jax-cuda13-pjrt fake"
    entry = table["files"]["gpu/scatter/add.hlo"]
    assert entry["hero"] == "scatter" and entry["xla_error"] is None
    assert entry["xla_seconds"] == 0.25
    (pair,) = entry["kernels"]
    assert pair["heron"]["launch"] == pair["xla"]["launch"] == "2x128"
    assert lines == [lines[0]] and lines[0].startswith("gpu/scatter/add.hlo: 2x128 vs 2x128")
    json.dumps(table)


MEMORY_USAGE_REPORT = """Memory Space: default (color=0)
Total bytes: 8216 (8.0KiB)
  cumulative_size;       size;       offset; used_by_n_values; shapes_list
  ------------------------------------------------------------
     4.0KiB(100%);     4.0KiB;            0;                1; f32[8,128]
"""

LIVE_RANGE = """HloLiveRange (max 3):
  InstructionSequence:
    0:x.1
    1:fusion
    2:fusion.1
  BufferLiveRange:
    x.1{}:0-3
    fusion{}:1-2
    fusion.1{}:2-3
  Live ranges at 2 (peak):
    fusion.1{}: 4096 bytes (cumulative: 4096 bytes)
    fusion{}: 2048 bytes (cumulative: 6144 bytes)
    x.1{}: 4096 bytes (cumulative: 10240 bytes)
  Stack trace breakdown for peak usage: 10 240 bytes
    main.3 (100.0%, total: 10 240 bytes, current: 0 bytes, remaining: 10 240 bytes)
      └── x.1 (40.0%, total: 4 096 bytes, current: 4 096 bytes, remaining: 0 bytes)
"""


def test_the_buffer_sizes_are_read_from_the_dump(tmp_path):
    assert buffer_sizes(MEMORY_USAGE_REPORT, LIVE_RANGE) == BufferSizes(8216, 10240)
    assert buffer_sizes("", "") == BufferSizes(None, None)
    for file in DUMP.iterdir():
        (tmp_path / file.name).write_bytes(file.read_bytes())
    assert read_dump(tmp_path, {}).buffers == BufferSizes(None, None)  # not dumped: unknown
    (
        tmp_path / "module_0000.add.sm_9.0a_gpu_after_optimizations-memory-usage-report.txt"
    ).write_text(MEMORY_USAGE_REPORT)
    (tmp_path / "module_0000.add.sm_9.0a_gpu_after_optimizations-live-range.txt").write_text(
        LIVE_RANGE
    )
    assert read_dump(tmp_path, {}).buffers == BufferSizes(8216, 10240)


PROGRAM = """
HloModule program

add {
  p0 = f32[] parameter(0)
  p1 = f32[] parameter(1)
  ROOT sum = f32[] add(p0, p1)
}

ENTRY main {
  operand = f32[10,5] parameter(0)
  indices = s32[24,1] parameter(1)
  update = f32[24,2,3] parameter(2)
  ROOT scatter = f32[10,5] scatter(operand, indices, update), update_window_dims={1,2},
    inserted_window_dims={}, scatter_dims_to_operand_dims={0}, index_vector_dim=1,
    unique_indices=false, to_apply=add
}
"""


def test_a_whole_program_is_fused_by_heron_s_own_pipeline(tmp_path):
    """An unfused module (a program as JAX prints it): XLA runs its whole pipeline, and so
    does heron (issue 29's program-level comparison); kernels pair by what they compute."""
    pytest.importorskip("mlir")
    module = parse_module(PROGRAM)
    assert not is_prefused(module)
    comparison = compare_module(module, "program.hlo", installation=fake_xla(tmp_path, DUMP))
    (pair,) = comparison.pairs
    assert pair.heron.emitter == "scatter" and pair.heron.fusion != "main"
    assert pair.xla.name == "loop_scatter_fusion" and pair.same_launch is True
    assert any("both compilers ran their whole pipelines" in n for n in comparison.notes)


def test_a_library_gemm_is_listed_as_the_library():
    pytest.importorskip("mlir")
    from heron.xla_compare.heron_side import compile_with_heron

    dot = parse_module("""
HloModule dot
ENTRY main {
  a = f32[64,32] parameter(0)
  b = f32[32,16] parameter(1)
  ROOT d = f32[64,16] dot(a, b), lhs_contracting_dims={1}, rhs_contracting_dims={0}
}
""")
    (kernel,) = compile_with_heron(dot, "h100", program=True)
    assert kernel.library == "cublasLt" and kernel.error is None and not kernel.ptx
    from heron.xla_compare.report import kernel_record

    assert kernel_record(kernel)["library"] == "cublasLt"
