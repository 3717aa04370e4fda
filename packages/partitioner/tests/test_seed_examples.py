"""The partitioning examples of seeds/xla-gpu-emitters.md ("Partitioning") and the GELU fusion."""

from __future__ import annotations

from pathlib import Path

import pytest

from heron.hlo import UnsupportedError, parse_module, parse_module_file
from heron.partitioner import partition

REPO = Path(__file__).resolve().parents[3]

LOG_TRANSPOSE_ADD = """HloModule log_transpose_add

fused_computation {
  param = f32[20,20] parameter(0)
  log = f32[20,20] log(param)
  transpose = f32[20,20] transpose(log), dimensions={1,0}
  ROOT add = f32[20,20] add(log, transpose)
}
"""


def names(sub) -> list[str]:
    return [i.name for i in sub.instructions]


def test_log_transpose_add_splits_into_three_single_instruction_subgraphs(check):
    # The seed's graph: param -> log -> {transpose, add}; the transpose is the fusion's hero
    # (it chooses the iteration order), so add is its epilogue and log is read at two indices.
    comp = parse_module(LOG_TRANSPOSE_ADD).computation("fused_computation")
    pc = partition(comp, heroes=["transpose"])
    print(pc.describe())
    check(pc)
    assert len(pc.subgraphs) == 3
    assert sorted(names(s)[0] for s in pc.subgraphs) == ["add", "log", "transpose"]
    assert all(len(s.instructions) == 1 for s in pc.subgraphs)
    assert not pc.duplicated
    log_sub, add_sub, t_sub = (pc.subgraph_of(n) for n in ("log", "add", "transpose"))
    assert add_sub.is_epilogue and add_sub.injected == (comp.instruction("transpose"),)
    assert pc.root_subgraphs == (add_sub,)
    # The epilogue calls log (at the output index); the transpose calls log (transposed).
    assert pc.callees(add_sub) == (log_sub,)
    assert pc.callees(t_sub) == (log_sub,)
    assert pc.callees(log_sub) == ()
    # Signature: the parameter tensor, two indices, the injected transpose value; one result.
    sig = add_sub.signature
    assert [n for n, _ in sig.tensor_params] == ["param"]
    assert sig.index_ranges == (20, 20)
    assert [n for n, _ in sig.injected] == ["transpose"]
    assert [n for n, _ in sig.results] == ["add"]
    assert sig.num_arguments == 4


def test_log_transpose_add_as_a_loop_fusion_still_splits_log_off(check, emissions):
    # Without a hero the transpose is emitted elementally with its single user (XLA does the
    # same); log is still read at two different indices, so it gets its own function.
    comp = parse_module(LOG_TRANSPOSE_ADD).computation("fused_computation")
    pc = partition(comp)
    check(pc)
    assert [names(s) for s in pc.subgraphs] == [["transpose", "add"], ["log"]]
    assert pc.subgraph_of("log").roots == (comp.instruction("log"),)
    for sub in pc.subgraphs:
        assert set(emissions(sub).values()) == {1}


SLICE_PAD = """HloModule slice_pad

fused_computation {
  p0 = f32[8] parameter(0)
  p1 = f32[8] parameter(1)
  add = f32[8] add(p0, p1)
  slice = f32[6] slice(add), slice={[1:7]}
  zero = f32[] constant(0)
  pad = f32[10] pad(add, zero), padding=1_1
  padslice = f32[6] slice(pad), slice={[START:7]}
  ROOT mul = f32[6] multiply(slice, padslice)
}
"""


def test_add_read_by_slice_and_pad_at_different_indices_is_its_own_subgraph(check, emissions):
    # slice reads add[d + 1]; slice(pad) reads pad[d + 1] = add[d]: different indexings.
    comp = parse_module(SLICE_PAD.replace("START", "1")).computation("fused_computation")
    pc = partition(comp)
    print(pc.describe())
    check(pc)
    add_sub = pc.subgraph_of("add")
    assert names(add_sub) == ["add"]
    assert add_sub.name == "fused_computation_add"
    root_sub = pc.subgraph_of("mul")
    assert set(names(root_sub)) == {"slice", "zero", "pad", "padslice", "mul"}
    assert pc.callees(root_sub) == (add_sub,)
    for sub in pc.subgraphs:
        assert set(emissions(sub).values()) == {1}


def test_add_read_by_slice_and_pad_at_the_same_index_joins_its_users(check, emissions):
    # slice(pad)[d] = pad[d + 2] = add[d + 1] = slice[d]: the indexing analysis proves both
    # users read the same element, so add is emitted once inside the root function.
    comp = parse_module(SLICE_PAD.replace("START", "2")).computation("fused_computation")
    pc = partition(comp)
    check(pc)
    assert len(pc.subgraphs) == 1
    assert set(emissions(pc.subgraphs[0]).values()) == {1}


def test_gelu_is_one_subgraph(check, emissions):
    module = parse_module_file(REPO / "examples" / "gelu.hlo")
    comp = module.computation("gelu")
    pc = partition(comp)
    check(pc)
    assert len(pc.subgraphs) == 1
    (sub,) = pc.subgraphs
    assert sub.name == "gelu_multiply_0"
    assert sub.roots == (comp.root_instruction,)
    assert len(sub.instructions) == len(comp.instructions) - 1  # all but the parameter
    assert sub.signature.index_ranges == (6, 512, 4096)
    assert set(emissions(sub).values()) == {1}
    assert pc.root_subgraphs == (sub,)


def test_names_are_sanitised_and_unique():
    text = """HloModule m
fused.computation.1 {
  p = f32[4] parameter(0)
  a.1 = f32[4] exponential(p)
  r.1 = f32[4] reverse(a.1), dimensions={0}
  ROOT s-1 = f32[4] add(a.1, r.1)
}
"""
    pc = partition(parse_module(text).computation("fused.computation.1"))
    assert sorted(s.name for s in pc.subgraphs) == [
        "fused_computation_1_a_1",
        "fused_computation_1_s_1",
    ]


def test_describe_lists_subgraphs_roots_calls_and_injected_values():
    comp = parse_module(LOG_TRANSPOSE_ADD).computation("fused_computation")
    text = partition(comp, heroes=["transpose"]).describe()
    assert text.startswith("PartitionedComputation fused_computation:")
    assert "EPILOGUE fused_computation__epilogue__add" in text
    assert "ROOT log = f32[20,20] log(param)" in text
    assert "injected: transpose" in text
    assert "calls: fused_computation_log" in text


def test_bad_heroes_are_rejected_with_the_name():
    comp = parse_module(LOG_TRANSPOSE_ADD).computation("fused_computation")
    with pytest.raises(UnsupportedError, match="'param' \\(parameter\\).*fused_computation"):
        partition(comp, heroes=["param"])
    other = parse_module(SLICE_PAD.replace("START", "1")).computation("fused_computation")
    with pytest.raises(ValueError, match="'add' is not an instruction of 'fused_computation'"):
        partition(comp, heroes=[other.instruction("add")])
    with pytest.raises(KeyError, match="no instruction 'nope'"):
        partition(comp, heroes=["nope"])


def test_subgraph_of_parameter_is_a_clear_error():
    comp = parse_module(LOG_TRANSPOSE_ADD).computation("fused_computation")
    pc = partition(comp)
    with pytest.raises(KeyError, match="'param' \\(parameter\\) is in no subgraph"):
        pc.subgraph_of("param")
