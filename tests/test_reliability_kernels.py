"""Issue 13's kernel findings: minimal reproducers that must compile, run and agree.

Each file of tests/data/reliability named here is a fuzzer finding reduced to
one fusion. ``heron check`` (as a library call) runs it on the interpreter,
with the sanitizer, against the reference evaluator, for 32-lane (h100) and
64-lane (mi300x) warps; the other tests pin down how each was fixed.

Zero-size arrays are handled in one place each (docs: heron.plugins.loop and
heron.emitters.fusion_analysis): a fusion whose outputs all have zero
elements is a loop fusion whose kernel writes nothing; a reduce of an input
with zero elements is never a reduction hero (the loop emitter's elemental
reduce yields the init value); an in-place emitter (scatter, dynamic-update-slice)
with an empty update writes nothing into its aliased output; an access into a
zero-element tensor is never executed, and flatten-tensors gives it index 0 of
the one-element placeholder buffer (``memory_size``) that uploads fill with zeros.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from heron.compiler import Target, compile_fusion, fusions_of
from heron.compiler.program_run import run_program
from heron.emitters.fusion_analysis import analyse_fusion
from heron.harness import CheckOptions, check_file
from heron.hlo import parse_module

DATA = Path(__file__).parent / "data" / "reliability"

#: file -> the emitter that must run it.
FINDINGS = {
    # 1. zero-size dimensions
    "zero_rows_reduce.hlo": "loop",  # f32[0,128] row reduce: ZeroDivisionError in the plan
    "reduce_empty_dim.hlo": "loop",  # a reduce over a size-0 dimension: the init value
    "concat_of_empty_reduce.hlo": "concatenate",  # concatenate's analysis divided by zero
    "dot_empty_contracting.hlo": "loop",  # flatten-tensors: empty range [0, -1]
    "zero_size_param.hlo": "concatenate",  # memref<1xT> upload of a zero-size parameter
    "zero_size_output_beside_other.hlo": "loop",  # an empty output beside a non-empty one
    "dus_empty_update.hlo": "dynamic_update_slice",  # an empty window: nothing written
    "scatter_no_updates.hlo": "scatter",  # was "has no updates"
    # 2. s2/s4 reductions read shared memory nothing wrote
    "reduce_row_s2.hlo": "reduce_row",
    "reduce_row_s4.hlo": "reduce_row",
    # 3. an in-place dynamic-update-slice behind a bitcast root
    "dus_bitcast_root.hlo": "dynamic_update_slice",
    "dus_bitcast_root_column_major.hlo": "dynamic_update_slice",
    # 4. an s2 scatter ran on one thread
    "scatter_s2_add.hlo": "scatter",
}

TARGETS = ("h100", "mi300x")


def _interpreter():
    from heron.runtime.core.registry import load_backends

    return load_backends().create_device("interpreter")


def _fusion(name: str):
    module = parse_module((DATA / name).read_text(), source=name)
    (fusion,) = fusions_of(module)
    return module, fusion


@pytest.mark.parametrize("target", TARGETS)
@pytest.mark.parametrize("name", sorted(FINDINGS))
def test_reproducer_agrees_with_the_reference(name, target):
    report = check_file(DATA / name, CheckOptions(target=Target.preset(target)))
    assert report.ok, report.text()
    assert report.text().endswith("all agree")
    assert f"({FINDINGS[name]} emitter, interpreter)" in report.text()


@pytest.mark.parametrize("name", sorted(FINDINGS))
def test_reproducer_compiles_for_both_gpu_backends(name):
    _, fusion = _fusion(name)
    for target in TARGETS:
        kernel = compile_fusion(fusion, Target.preset(target))
        assert kernel.emitter == FINDINGS[name]
        assert kernel.image is not None or kernel.stages


def test_empty_outputs_need_no_work():
    """All outputs empty: the loop kind, one thread, no store; the run gives an empty array."""
    module, fusion = _fusion("zero_rows_reduce.hlo")
    assert analyse_fusion(fusion, Target.preset("h100")).kind == "loop"
    kernel = compile_fusion(fusion, Target.preset("h100"), stop_after="lower-tensors")
    assert (kernel.grid, kernel.block) == ((1, 1, 1), (1, 1, 1))
    text = str(kernel.module)
    assert "memref.store" not in text and "atomic_rmw" not in text
    result = run_program(module, [np.zeros((0, 128), np.float32)], _interpreter(), "interpreter")
    assert np.asarray(result.outputs[0]).shape == (0,)


def test_reduce_over_an_empty_dimension_is_the_init_value():
    module, fusion = _fusion("reduce_empty_dim.hlo")
    assert analyse_fusion(fusion, Target.preset("h100")).kind == "loop"
    result = run_program(module, [np.zeros((64, 0), np.float32)], _interpreter(), "interpreter")
    np.testing.assert_array_equal(result.outputs[0], np.full(64, 1.5, np.float32))


def test_sub_byte_shared_memory_is_one_byte_per_element():
    """No read-modify-write of a packed shared byte: plain i8 stores into shared memory."""
    _, fusion = _fusion("reduce_row_s2.hlo")
    kernel = compile_fusion(fusion, Target.preset("h100"), stop_after="lower-tensors")
    text = str(kernel.module)
    assert "#gpu.address_space<workgroup>" in text
    for line in text.splitlines():
        if "atomic_rmw" in line:
            assert "workgroup" not in line, line


def test_dus_through_a_bitcast_stays_in_place():
    _, fusion = _fusion("dus_bitcast_root.hlo")
    assert analyse_fusion(fusion, Target.preset("h100")).kind == "dynamic_update_slice"
    kernel = compile_fusion(fusion, Target.preset("h100"), stop_after="lower-tensors")
    assert dict(kernel.output_aliases) == {0: 0}
    assert kernel.launch.num_threads == 4 * 5  # the update's elements, not the operand's


def test_sub_byte_scatter_runs_in_parallel():
    """One thread per update element (or vector of them), a CAS loop on the byte: not 1x1."""
    _, fusion = _fusion("scatter_s2_add.hlo")
    kernel = compile_fusion(fusion, Target.preset("h100"), stop_after="lower-tensors")
    assert kernel.launch.num_threads > 1
    assert "generic_atomic_rmw" in str(kernel.module)
