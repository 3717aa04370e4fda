"""A program's top-k launches the library kernel, built once and kept (issue 32).

The ``topk-library`` pass marks a fusion that is one ``topk`` of its parameter (its
row length a constant operand, XLA's custom-fusion ``backend_config``) and leaves any
other alone; a program's compile then launches the library kernel for it, built once
per Target and backend for every shape of its kind (one build for two programs of
different shapes), kept on disk across processes (a second store on the same folder
builds nothing, a damaged or misplaced entry is built again), with the evaluator's
results; where the kernel cannot be built, the fusion compiles as any other.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from heron_test_support.analysis import H100

from heron.compiler import executable, library_kernels
from heron.compiler.device_kernels import target_for_device
from heron.compiler.executable import compile_program, prepare_module
from heron.compiler.library_kernels import KernelStore, library_kernels_for
from heron.compiler.program_run import run_program
from heron.compiler.topk_library import CUSTOM_FUSION_CONFIG, library_topk_of
from heron.emitters.library_kernels import TopkRowsKernel
from heron.hlo.attributes import RawAttribute
from heron.hlo.element_types import ElementType
from heron.hlo.errors import UnsupportedError
from heron.hlo.evaluator import evaluate_module
from heron.hlo.parser import parse_module
from heron.runtime.core.thunks import KernelThunk
from heron.runtime.interpreter.device import InterpreterDevice


def top_k(rows: int, length: int, k: int = 4, layout: str = "{1,0}") -> str:
    """jax's ``lax.top_k`` of an f32[rows, length]."""
    out = f"[{rows},{k}]{{1,0}}"
    return f"""HloModule m

ENTRY main {{
  x = f32[{rows},{length}]{layout} parameter(0)
  t = (f32{out}, s32{out}) topk(x), k={k}, largest=true
  v = f32{out} get-tuple-element(t), index=0
  i = s32{out} get-tuple-element(t), index=1
  ROOT r = (f32{out}, s32{out}) tuple(v, i)
}}
"""


def _fusions(text: str):
    optimized, _ = prepare_module(parse_module(text), H100)
    return [i for i in optimized.instructions() if i.opcode == "fusion"]


@pytest.fixture
def store(tmp_path, monkeypatch) -> KernelStore:
    """A store of this test's own, the one every compile of the test uses."""
    own = KernelStore(tmp_path / "kernels")
    monkeypatch.setattr(library_kernels, "default_store", lambda: own)
    return own


def test_a_lone_topk_fusion_is_marked_with_its_row_length():
    (fusion,) = _fusions(top_k(8, 32))
    assert fusion.attributes["backend_config"] == RawAttribute(CUSTOM_FUSION_CONFIG)
    length = fusion.operands[-1]
    assert length.opcode == "constant" and length.literal.tolist() == [32]
    assert len(fusion.called("calls").parameters) == 2
    assert library_topk_of(fusion, H100) == TopkRowsKernel(ElementType("f32"), 4, True, 8)


#: A fused module (as XLA dumps one) whose top-k fusion computes its operand too.
FUSED_PRODUCER = """HloModule m

fused {
  p = f32[8,32]{1,0} parameter(0)
  n = f32[8,32]{1,0} negate(p)
  ROOT t = (f32[8,4]{1,0}, s32[8,4]{1,0}) topk(n), k=4, largest=true
}

ENTRY main {
  x = f32[8,32]{1,0} parameter(0)
  ROOT f = (f32[8,4]{1,0}, s32[8,4]{1,0}) fusion(x), kind=kLoop, calls=fused
}
"""


@pytest.mark.parametrize(
    "text",
    [FUSED_PRODUCER, top_k(8, 32, layout="{0,1}")],
    ids=["a-fused-producer", "column-major-rows"],
)
def test_other_topk_fusions_are_left_alone(text):
    for fusion in _fusions(text):
        assert "backend_config" not in fusion.attributes
        assert library_topk_of(fusion, H100) is None


def _run(text: str, inputs: list[np.ndarray]):
    device = InterpreterDevice()
    return run_program(parse_module(text), inputs, device, "interpreter")


def test_programs_of_two_shapes_launch_one_kernel_built_once(store):
    rng = np.random.default_rng(0)
    images = []
    for rows, length in ((8, 32), (3, 29)):  # rows of 32 and 29 both take 8 threads
        text = top_k(rows, length)
        x = rng.standard_normal((rows, length)).astype(np.float32)
        run = _run(text, [x])
        for got, want in zip(run.outputs, evaluate_module(parse_module(text), [x]), strict=True):
            assert np.array_equal(got, np.asarray(want))
        (launch,) = [t for t, _ in run.thunks if isinstance(t, KernelThunk)]
        assert launch.grid == (rows, 1, 1) and launch.block == (8, 1, 1)
        assert [k.emitter for k in run.kernels] == ["topk_rows"]
        (entry,) = run.compiled.artefact.kernels
        images.append(entry.image.data)
    assert store.built == 1
    assert images[0] == images[1]


def test_the_store_keeps_kernels_across_processes(store, tmp_path):
    kernel = TopkRowsKernel(ElementType("f32"), 4, True, 8)
    built = store.kernel(kernel, H100, "cuda")
    (entry,) = (tmp_path / "kernels").glob("*.json")
    again = KernelStore(tmp_path / "kernels")  # another process's
    loaded = again.kernel(kernel, H100, "cuda")
    assert again.built == 0
    assert loaded.image == built.image
    assert [a.data for a in loaded.device_code()] == [a.data for a in built.device_code()]
    text = entry.read_text()
    tampered = text.replace('"data": "', '"data": "AAAA', 1)
    assert tampered != text
    for damaged in ("{ damaged", tampered):
        entry.write_text(damaged)
        again = KernelStore(tmp_path / "kernels")
        assert again.kernel(kernel, H100, "cuda").image == built.image
        assert again.built == 1  # not loaded: built again, and written over
    other = TopkRowsKernel(ElementType("f32"), 8, True, 8)
    KernelStore(tmp_path / "kernels").kernel(other, H100, "cuda")
    (renamed,) = [e for e in (tmp_path / "kernels").glob("*.json") if e != entry]
    renamed.replace(entry)  # another kernel's entry under this kernel's name
    misplaced = KernelStore(tmp_path / "kernels")
    assert misplaced.kernel(kernel, H100, "cuda").image == built.image
    assert misplaced.built == 1


def test_a_store_without_a_folder_keeps_kernels_in_the_process(tmp_path):
    alone = KernelStore(None)
    kernel = TopkRowsKernel(ElementType("s32"), 2, False, 4)
    first = alone.kernel(kernel, H100, "interpreter")
    assert alone.kernel(kernel, H100, "interpreter") is first
    assert alone.built == 1 and not list(tmp_path.iterdir())


def test_a_kernel_that_cannot_be_built_leaves_the_fusion_to_its_emitter(store, monkeypatch):
    def refuse(*_):
        raise UnsupportedError("no library kernel here")

    monkeypatch.setattr(store, "kernel", refuse)
    text = top_k(4, 100)
    (fusion,) = _fusions(text)
    assert library_kernels_for(fusion, H100, ("interpreter",)) is None
    target = target_for_device(InterpreterDevice(), "interpreter", None)
    compiled = compile_program(parse_module(text), target, ("interpreter",))
    (emitted,) = compiled.program.kernels
    assert emitted.compiled["interpreter"].emitter == "topk"


def test_the_compile_launches_the_library_kernel_for_the_targets_backend(store):
    compiled = executable.compile_program(parse_module(top_k(1024, 4096, k=16)), H100)
    (emitted,) = compiled.program.kernels
    assert {b: k.emitter for b, k in emitted.compiled.items()} == {
        "cuda": "topk_rows",
        "interpreter": "topk_rows",
    }
    assert {k.grid for k in emitted.compiled.values()} == {(1024, 1, 1)}
    assert store.built == 2


def test_a_top_k_in_a_loop_body_launches_the_library_kernel(store):
    """The pass runs on every computation: a while body's top-k gets its row length as a
    constant of the body, and the loop (a command buffer's while node) runs it."""
    text = (Path(__file__).parent / "data" / "topk_in_a_loop.hlo").read_text()
    x = np.random.default_rng(1).standard_normal((4, 64)).astype(np.float32)
    run = _run(text, [x])
    assert "topk_rows" in [k.emitter for k in run.kernels]
    want = np.asarray(evaluate_module(parse_module(text), [x]))  # one array: no tuple
    (got,) = run.outputs
    assert np.array_equal(got, want)
