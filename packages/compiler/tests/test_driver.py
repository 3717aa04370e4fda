"""The compile driver: emission, heron's passes, then a backend's declared stages, in one order.

Small backends are declared here, in code, with their stage functions in a
module written to a temporary directory (a stage is named by a
"module:attribute" string, as a plugin's is); the real backends (CUDA, ROCm,
the interpreter) and the installed example plugin go through the same loop.
"""

from __future__ import annotations

import textwrap

import attrs
import pytest
from heron_test_support.hlo_modules import GEMM_FUSION, SCALE

from heron.compiler import (
    CompiledKernel,
    Target,
    compile_emitted,
    compile_fusion,
    fusions_of,
    stage_names,
    target_for_device,
)
from heron.emitters.pipeline import pass_names
from heron.hlo import parse_module
from heron.hlo.errors import UnsupportedError
from heron.hlo.plugin_loading import PluginError
from heron.runtime.core.hookspecs import BackendSpec, Stage
from heron.runtime.core.registry import BackendRegistry, default_backends

#: Stage functions of the small backends below; CALLS records what each was given.
STAGES_MODULE = """
    from heron.runtime.core.device import KernelImage
    from heron.runtime.core.hookspecs import StageSkipped

    CALLS = []
    THREADS = []  # where `binary` ran

    def text(module, context):
        CALLS.append(("text", type(module).__name__, context.target.name, context.kernel_name))
        body = f"{context.kernel_name} for {context.target.arch}"
        if context.dump is not None:
            context.dump("text-step", body)
        return body

    def skip(previous, context):
        CALLS.append(("skip", previous))
        raise StageSkipped("the tool is not installed here")

    def binary(previous, context):
        import threading

        CALLS.append(("binary", previous))
        THREADS.append(threading.current_thread().name)
        return previous.encode()

    def image(previous, context):
        CALLS.append(("image", previous))
        return KernelImage("tiny", context.kernel_name, previous + b"!")

    def not_an_image(previous, context):
        return 42

    def fails(previous, context):
        raise ValueError("the assembler said no")

    def images(items):
        CALLS.append(("images", [previous for previous, _ in items]))
        joined = b"+".join(previous for previous, _ in items)
        return [KernelImage("tiny", context.kernel_name, joined) for _, context in items]

    def images_skip(items):
        CALLS.append(("images_skip", len(items)))
        raise StageSkipped("the batch tool is not installed here")

    def images_fail(items):
        CALLS.append(("images_fail", len(items)))
        raise ValueError("the batch assembler said no")

    def too_few(items):
        return []
"""


@pytest.fixture
def stages_module(tmp_path, monkeypatch):
    """The name of a fresh module holding ``STAGES_MODULE`` (on sys.path for this test)."""
    name = f"heron_tiny_stages_{abs(hash(tmp_path)) % 10**8}"
    (tmp_path / f"{name}.py").write_text(textwrap.dedent(STAGES_MODULE))
    monkeypatch.syspath_prepend(str(tmp_path))
    return name


def _backend(
    module: str,
    *stages: tuple[str, str | None],
    concurrent: tuple[str, ...] = (),
    batched: dict[str, str] | None = None,
) -> BackendRegistry:
    """A registry with one backend, ``tiny``, of the given (function, extension) stages
    (``concurrent``: the functions whose stages say so; ``batched``: function -> the
    function doing its stage for several kernels)."""
    batched = batched or {}
    spec = BackendSpec(
        name="tiny",
        priority=0,
        is_available=lambda: (True, "here"),
        device_factory=lambda target: None,
        stages=[
            Stage(
                fn.replace("_", "-"),
                f"{module}:{fn}",
                ext,
                concurrent=fn in concurrent,
                batched=f"{module}:{batched[fn]}" if fn in batched else None,
            )
            for fn, ext in stages
        ],
    )
    return BackendRegistry([(spec, None)])


def _fusion():
    (fusion,) = fusions_of(parse_module(SCALE))
    return fusion


def _calls(module: str) -> list:
    import importlib

    return importlib.import_module(module).CALLS


H100 = Target.preset("h100")


def test_the_backends_stages_run_in_order_with_timings_and_dumps(stages_module):
    backends = _backend(stages_module, ("text", "txt"), ("binary", "bin"), ("image", "img"))
    dumps: list[tuple[str, str]] = []
    compiled = compile_fusion(
        _fusion(), H100, "tiny", dump=lambda *d: dumps.append(d), backends=backends
    )
    assert isinstance(compiled, CompiledKernel)
    names = [r.name for r in compiled.stages]
    assert names == ["emit", *pass_names()[1:], "text", "binary", "image"]
    assert all(r.seconds >= 0 and r.skipped is None for r in compiled.stages)
    assert compiled.seconds == pytest.approx(sum(r.seconds for r in compiled.stages))
    # Every heron stage is dumped by the pass loop, then the stages' own texts.
    assert [name for name, _ in dumps] == [*pass_names(), "text-step"]
    assert dumps[-1][1] == "f for sm_90"
    assert _calls(stages_module) == [
        ("text", "Module", "h100", "f"),  # the lower-tensors mlir.ir.Module
        ("binary", "f for sm_90"),
        ("image", b"f for sm_90"),
    ]
    assert compiled.image.format == "tiny" and compiled.image.data == b"f for sm_90!"
    assert [(a.stage, a.extension, a.data, a.loadable) for a in compiled.artefacts] == [
        ("text", "txt", b"f for sm_90", False),
        ("binary", "bin", b"f for sm_90", False),
        ("image", "img", b"f for sm_90!", True),
    ]
    assert compiled.device_code() == compiled.artefacts[-1:]
    assert (compiled.backend, compiled.target, compiled.emitter) == ("tiny", H100, "loop")
    assert "gpu.module" in str(compiled.module)  # the lower-tensors stage
    assert compiled.grid == (compiled.launch.block_x, compiled.launch.block_y, 1)
    assert [shape.dims for shape in compiled.input_shapes] == [(64, 32)]


def test_a_skipped_stage_is_reported_and_the_next_gets_its_input(stages_module):
    backends = _backend(
        stages_module, ("text", None), ("skip", "obj"), ("binary", None), ("image", None)
    )
    compiled = compile_fusion(_fusion(), H100, "tiny", backends=backends)
    (skipped,) = compiled.skipped
    assert (skipped.name, skipped.skipped) == ("skip", "the tool is not installed here")
    assert [r.name for r in compiled.stages][-4:] == ["text", "skip", "binary", "image"]
    assert ("binary", "f for sm_90") in _calls(stages_module)
    assert "skip" not in dict(compiled.timings)
    assert compiled.artefacts == ()  # the skipped stage made nothing


@pytest.mark.parametrize("in_the_background", [False, True])
def test_ptxas_missing_skips_the_cubin_stage_and_says_why(monkeypatch, in_the_background):
    from concurrent.futures import ThreadPoolExecutor

    from heron.runtime.cuda import stages
    from heron.runtime.cuda.compiler_tools import ToolNotFoundError

    def missing():
        raise ToolNotFoundError("ptxas not found: install the 'nvidia-cuda-nvcc' wheel")

    monkeypatch.setattr(stages, "cubin_assembler", missing)
    with ThreadPoolExecutor(1) as workers:
        background = workers if in_the_background else None
        compiled = compile_fusion(_fusion(), Target.preset("a100"), background=background)
        compiled = compiled.finished()
    assert [(r.name, r.skipped) for r in compiled.skipped] == [
        ("cubin", "ptxas not found: install the 'nvidia-cuda-nvcc' wheel")
    ]
    assert compiled.image.format == "ptx" and ".target sm_80" in compiled.image.data.decode()
    assert [a.extension for a in compiled.device_code()] == ["ptx"]


def test_with_ptxas_the_cuda_backend_makes_ptx_and_a_cubin():
    compiled = compile_fusion(_fusion(), H100)
    assert [a.extension for a in compiled.artefacts] == ["ll", "ptx", "cubin"]
    assert compiled.image.format == "cubin" and compiled.image.data[:4] == b"\x7fELF"
    assert not compiled.skipped


def test_the_rocm_backend_makes_an_amdgpu_code_object_for_the_targets_arch():
    compiled = compile_fusion(_fusion(), Target.preset("mi250x"))
    assert [a.extension for a in compiled.artefacts] == ["ll", "o", "hsaco"]
    assert compiled.image.format == "hsaco" and b"gfx90a" in compiled.image.data
    assert int.from_bytes(compiled.image.data[18:20], "little") == 224  # EM_AMDGPU


def test_stop_after_a_heron_pass_or_a_backend_stage():
    inlined = compile_fusion(_fusion(), H100, stop_after="inline")
    assert inlined.image is None and inlined.artefacts == ()
    assert [r.name for r in inlined.stages] == ["emit", "inline"]
    assert "heron_gpu.pure_call" not in str(inlined.module)
    emitted = compile_fusion(_fusion(), H100, stop_after="emitted")
    assert [r.name for r in emitted.stages] == ["emit"]
    ptx = compile_fusion(_fusion(), H100, stop_after="ptx")
    assert ptx.image.format == "ptx" and [r.name for r in ptx.stages][-2:] == ["llvm-ir", "ptx"]


def test_an_unknown_stop_lists_every_stage():
    with pytest.raises(UnsupportedError) as info:
        compile_fusion(_fusion(), H100, stop_after="no-such-pass")
    message = str(info.value)
    assert "unknown pass 'no-such-pass'" in message
    assert "emitted, inline" in message and "cuda backend's stages: llvm-ir, ptx, cubin" in message
    assert stage_names("cuda")[-3:] == ["llvm-ir", "ptx", "cubin"]
    assert stage_names("cuda")[: len(pass_names())] == pass_names()


def test_the_last_stage_must_make_an_image(stages_module):
    backends = _backend(stages_module, ("text", None))
    with pytest.raises(PluginError, match="stage that ran, 'text', returned a str, not a Kernel"):
        compile_fusion(_fusion(), H100, "tiny", backends=backends)


def test_an_artefact_stage_must_make_text_bytes_or_an_image(stages_module):
    backends = _backend(stages_module, ("not_an_image", "bin"))
    with pytest.raises(PluginError, match="stage 'not-an-image' declares the artefact extension"):
        compile_fusion(_fusion(), H100, "tiny", backends=backends)


def test_a_failing_stage_names_the_fusion_the_backend_the_stage_and_the_arch(stages_module):
    backends = _backend(stages_module, ("text", None), ("fails", None))
    with pytest.raises(UnsupportedError) as info:
        compile_fusion(_fusion(), Target.preset("a100"), "tiny", backends=backends)
    assert str(info.value) == (
        "error: fusion 'f': tiny stage 'fails' (sm_80) failed: the assembler said no"
    )


def test_unknown_backend_is_a_plugin_error():
    with pytest.raises(PluginError, match="no heron.backends plugin named 'tpu'"):
        compile_fusion(_fusion(), H100, "tpu")


def test_compile_emitted_starts_from_a_kernel_emitted_elsewhere():
    from heron.emitters.selection import emit_fusion

    kernel = emit_fusion(_fusion(), H100)
    compiled = compile_emitted(kernel, H100, "interpreter")
    assert compiled.stages[0].name == "inline"  # no emission in this compile
    assert compiled.image.format == "heron-interpreter"


def test_the_installed_example_backend_compiles_through_its_stages():
    compiled = compile_fusion(_fusion(), Target.preset("mi300x"), "example")
    assert [r.name for r in compiled.stages][-2:] == ["listing", "image"]
    assert compiled.image.format == "example-listing"
    assert compiled.image.data.startswith(b"// kernel f for gfx942\n")


def test_the_interpreter_compiles_for_and_emulates_the_targets_warps():
    mi300x = Target.preset("mi300x")
    device = default_backends().create_device("interpreter", mi300x)
    assert device.warp_size == 64
    assert default_backends().create_device("interpreter", H100).warp_size == 32
    assert target_for_device(device, "interpreter") == mi300x  # the default of its warp
    assert target_for_device(device, "interpreter", Target.preset("mi250x")).name == "mi250x"
    with pytest.raises(UnsupportedError, match="warps of 64 lanes, but target 'h100'"):
        target_for_device(device, "interpreter", H100)
    assert target_for_device(object(), "rocm") == mi300x


def test_registries_are_loaded_once_per_process(monkeypatch):
    from heron.emitters import registry as emitter_registry
    from heron.emitters.selection import default_registry
    from heron.runtime.core import registry as backend_registry

    default_backends(), default_registry()  # loaded (and kept) by now

    def rescan(*args, **kwargs):
        raise AssertionError("entry points scanned again")

    monkeypatch.setattr(backend_registry, "load_backends", rescan)
    monkeypatch.setattr(emitter_registry, "load_emitters", rescan)
    for _ in range(2):
        compile_fusion(_fusion(), H100, "interpreter")


#: One fusion each for the GEMM, loop and row-reduction emitters.
ORDER_FUSIONS = {
    "gemm": GEMM_FUSION.split("HloModule gemm", 1)[1],
    "loop": """
fused {
  a = f32[32,16]{1,0} parameter(0)
  ROOT n = f32[32,16]{1,0} negate(a)
}
ENTRY main {
  a = f32[32,16]{1,0} parameter(0)
  ROOT f = f32[32,16]{1,0} fusion(a), kind=kLoop, calls=fused
}""",
    "reduction": """
add {
  x = f32[] parameter(0)
  y = f32[] parameter(1)
  ROOT s = f32[] add(x, y)
}
fused {
  a = f32[32,1024]{1,0} parameter(0)
  zero = f32[] constant(0)
  ROOT r = f32[32]{0} reduce(a, zero), dimensions={1}, to_apply=add
}
ENTRY main {
  a = f32[32,1024]{1,0} parameter(0)
  ROOT f = f32[32]{0} fusion(a), kind=kInput, calls=fused
}""",
}


def _order_kernel(name: str) -> CompiledKernel:
    (fusion,) = fusions_of(parse_module(f"HloModule {name}\n{ORDER_FUSIONS[name]}"))
    return compile_fusion(fusion, H100, "interpreter", stop_after="emitted")


@pytest.mark.parametrize(
    ("name", "emitter", "own_order"),
    [("gemm", "gemm", True), ("loop", "loop", False), ("reduction", "reduce_row", True)],
)
def test_a_kernel_sums_in_its_own_order_for_its_dot_or_its_emitters_reduction(
    name, emitter, own_order
):
    """A GEMM kernel writes each element once yet sums its dot's products in its tiles'
    order; a reduction emitter's kernel sums in its own order; a loop kernel does not."""
    kernel = _order_kernel(name)
    assert kernel.emitter == emitter
    assert kernel.sums_in_its_own_order is own_order
    assert kernel.writes_each_element_once is (name != "reduction")


def test_a_kernels_own_order_asks_the_instruction_rule(monkeypatch):
    """The kernel's answer is heron.compiler.summation_order's for its instructions, not
    a rule of its own: with no order-free opcode, the GEMM kernel no longer answers yes."""
    import heron.compiler.summation_order as summation_order

    monkeypatch.setattr(summation_order, "ORDER_FREE_OPCODES", frozenset())
    kernel = _order_kernel("gemm")
    assert kernel.emitter == "gemm" and not kernel.sums_in_its_own_order


def test_concurrent_stages_run_in_the_background_and_finish_when_asked(stages_module):
    """A whole program's compile hands the stages from the first concurrent one on (CUDA's
    ptxas) to workers: the kernel comes back unfinished, the same once finished."""
    from concurrent.futures import ThreadPoolExecutor

    backends = _backend(
        stages_module, ("text", "txt"), ("binary", "bin"), ("image", "img"), concurrent=("binary",)
    )
    with ThreadPoolExecutor(1) as workers:
        unfinished = compile_fusion(_fusion(), H100, "tiny", backends=backends, background=workers)
        assert unfinished.finishing is not None
        assert [a.stage for a in unfinished.artefacts] == ["text"]
        done = unfinished.finished()
    plain = compile_fusion(_fusion(), H100, "tiny", backends=backends)
    assert done.finishing is None and done.finished() is done
    assert done.image == plain.image and done.artefacts == plain.artefacts
    assert [r.name for r in done.stages] == [r.name for r in plain.stages]


def test_a_concurrent_stage_s_failure_is_raised_when_the_kernel_is_finished(stages_module):
    from concurrent.futures import ThreadPoolExecutor

    backends = _backend(stages_module, ("text", None), ("fails", None), concurrent=("fails",))
    with ThreadPoolExecutor(1) as workers:
        unfinished = compile_fusion(_fusion(), H100, "tiny", backends=backends, background=workers)
        with pytest.raises(UnsupportedError, match="tiny stage 'fails' \\(sm_90\\) failed"):
            unfinished.finished()


def test_a_stop_before_the_concurrent_stages_leaves_nothing_to_finish(stages_module):
    from concurrent.futures import ThreadPoolExecutor

    backends = _backend(
        stages_module, ("text", None), ("binary", None), ("image", None), concurrent=("image",)
    )
    with ThreadPoolExecutor(1) as workers:
        kernel = compile_fusion(
            _fusion(), H100, "tiny", stop_after="binary", backends=backends, background=workers
        )
    assert kernel.finishing is None and kernel.image is None


def test_a_program_s_cubins_are_made_while_its_next_kernels_are_emitted():
    """compile_program runs CUDA's ptxas stage on workers; what it returns is finished."""
    from heron.compiler.executable import compile_program
    from heron.runtime.cuda.compiler_tools import ToolNotFoundError, find_ptxas

    try:
        find_ptxas()
    except ToolNotFoundError as exc:
        pytest.skip(str(exc))
    assert [s.concurrent for s in default_backends().get("cuda").stages] == [False, True, True]
    compiled = compile_program(parse_module(SCALE), H100, backends=("cuda",))
    for emitted in compiled.program.kernels:
        kernel = emitted.compiled["cuda"]
        assert kernel.finishing is None
        assert kernel.image.format == "cubin" and kernel.image.data
        assert [r.name for r in kernel.stages][-3:] == ["llvm-ir", "ptx", "cubin"]
    assert {entry.image.format for entry in compiled.artefact.kernels} == {"cubin"}


def test_a_program_s_compile_gives_the_switch_interval_back_even_when_it_fails(monkeypatch):
    """While its workers run, compile_program hands the GIL over every 0.2 ms (LLVM's
    calls on a worker wait for it); the interpreter's interval comes back after."""
    import sys

    import heron.emitters.selection as selection
    from heron.compiler.executable import compile_program

    before = sys.getswitchinterval()
    compile_program(parse_module(SCALE), H100, backends=("cuda",))
    assert sys.getswitchinterval() == before

    def refuse(*args, **kwargs):
        assert sys.getswitchinterval() < before  # emission runs beside the workers
        raise UnsupportedError("no emitter today")

    monkeypatch.setattr(selection, "emit_fusion", refuse)
    with pytest.raises(UnsupportedError, match="no emitter today"):
        compile_program(parse_module(SCALE), H100, backends=("cuda",))
    assert sys.getswitchinterval() == before


def test_several_backends_share_one_emission_and_one_run_of_heron_s_passes(monkeypatch):
    """compile_fusion_for_backends emits once: each backend's image is the one a compile
    for that backend alone makes, and its stage records start with the shared ones."""
    import heron.emitters.selection as selection
    from heron.compiler import compile_fusion_for_backends

    emissions = []
    emit = selection.emit_fusion

    def counting(*args, **kwargs):
        emissions.append(args[0].name)
        return emit(*args, **kwargs)

    monkeypatch.setattr(selection, "emit_fusion", counting)
    fusion = fusions_of(parse_module(SCALE))[0]
    both = compile_fusion_for_backends(fusion, H100, ("interpreter", "cuda", "interpreter"))
    assert emissions == [fusion.name]
    assert list(both) == ["interpreter", "cuda"]
    alone = compile_fusion(fusion, H100, "interpreter")
    assert both["interpreter"].image == alone.image
    assert both["cuda"].image.format in ("cubin", "ptx") and both["cuda"].image.data
    assert both["cuda"].backend == "cuda" and both["interpreter"].backend == "interpreter"
    shared = [r.name for r in both["interpreter"].stages]
    assert shared == ["emit", *pass_names()[1:], "capture"]
    assert [r.name for r in both["cuda"].stages][: len(shared) - 1] == shared[:-1]
    with pytest.raises(ValueError, match="no backend"):
        compile_fusion_for_backends(fusion, H100, ())


def test_a_program_for_two_backends_emits_each_fusion_once(monkeypatch):
    import heron.emitters.selection as selection
    from heron.compiler.executable import compile_program

    emissions = []
    emit = selection.emit_fusion
    monkeypatch.setattr(
        selection, "emit_fusion", lambda *a, **k: emissions.append(a[0].name) or emit(*a, **k)
    )
    compiled = compile_program(parse_module(SCALE), H100, backends=("cuda", "interpreter"))
    assert len(emissions) == len(set(emissions)) == len(compiled.program.kernels)
    for emitted in compiled.program.kernels:
        assert set(emitted.compiled) == {"cuda", "interpreter"}


def _compile_in_batches(
    module: str,
    batched: str,
    kernels: int,
    size: int,
    concurrent: tuple[str, ...] = ("image",),
    middle: str = "binary",
    planned: int | None = None,
):
    from concurrent.futures import ThreadPoolExecutor

    from heron.compiler import compile_fusion_for_backends
    from heron.compiler.driver import StageBatches

    # text -> binary -> image, the last stage concurrent and batched
    registry = _backend(
        module,
        ("text", "txt"),
        (middle, "bin"),
        ("image", "img"),
        concurrent=concurrent,
        batched={"image": batched},
    )
    with ThreadPoolExecutor(2) as workers:
        batches = StageBatches(workers, size=size, kernels=planned)
        pending = [
            compile_fusion_for_backends(
                _fusion(), H100, ("tiny",), registry=registry, background=workers, batches=batches
            )["tiny"]
            for _ in range(kernels)
        ]
        batches.flush()
        return [kernel.finished() for kernel in pending]


def _group_sizes(batch_calls: list) -> list[int]:
    """The sizes of the groups the batched stage ran, largest first: the groups run on
    worker threads, so the order their calls were recorded in is a race (each kernel's
    image, checked beside, tells which group it was in)."""
    return sorted((len(call[1]) for call in batch_calls), reverse=True)


def test_a_batched_last_stage_runs_once_for_a_group_of_kernels(stages_module):
    finished = _compile_in_batches(stages_module, "images", kernels=3, size=2)
    batch_calls = [call for call in _calls(stages_module) if call[0] == "images"]
    # Groups of two: the first when full, the last at flush; no kernel ran `image` alone.
    # (The groups run on two worker threads: which one calls first is theirs to race.)
    assert _group_sizes(batch_calls) == [2, 1]
    assert not [call for call in _calls(stages_module) if call[0] == "image"]
    assert [k.image.data for k in finished] == [b"f for sm_90+f for sm_90"] * 2 + [b"f for sm_90"]
    for kernel in finished:
        assert kernel.finishing is None and kernel.image.format == "tiny"
        assert [r.name for r in kernel.stages][-3:] == ["text", "binary", "image"]
        assert kernel.artefacts[-1].stage == "image" and kernel.artefacts[-1].loadable


def test_the_stages_before_a_batched_one_run_on_the_workers_and_the_group_waits(stages_module):
    """CUDA's ``ptx`` (LLVM) is concurrent too: each kernel's stages before the batched
    ``cubin`` start on a worker as the kernel is handed over, and its group's one batched
    run waits for them; the kernels are what a compile with only the last stage
    concurrent makes."""
    import importlib
    import threading

    finished = _compile_in_batches(
        stages_module, "images", kernels=3, size=2, concurrent=("binary", "image")
    )
    threads = importlib.import_module(stages_module).THREADS
    assert len(threads) == 3 and threading.current_thread().name not in threads
    batch_calls = [call for call in _calls(stages_module) if call[0] == "images"]
    assert _group_sizes(batch_calls) == [2, 1]
    assert [k.image.data for k in finished] == [b"f for sm_90+f for sm_90"] * 2 + [b"f for sm_90"]
    for kernel in finished:
        assert [r.name for r in kernel.stages][-3:] == ["text", "binary", "image"]
        assert [a.stage for a in kernel.artefacts][-3:] == ["text", "binary", "image"]


@pytest.mark.parametrize(
    ("kernels", "largest", "sizes"),
    [
        (0, 16, []),
        (1, 16, [1]),
        (3, 16, [2, 1]),
        (4, 16, [1, 2, 1]),
        (15, 16, [8, 4, 2, 1]),
        (40, 16, [9, 16, 8, 4, 2, 1]),
        (5, 2, [2, 2, 1]),
    ],
)
def test_a_program_s_groups_halve_towards_its_end(kernels, largest, sizes):
    from heron.compiler.driver import tapered_group_sizes

    assert tapered_group_sizes(kernels, largest) == sizes
    assert sum(sizes) == kernels and all(1 <= size <= largest for size in sizes)


def test_groups_follow_the_program_s_planned_length_then_take_one_kernel_each(stages_module):
    """Five kernels planned, six compiled: groups of 2, 2, 1 as planned, and the kernel
    the plan did not foresee alone; each image is its group's, whatever the timing."""
    finished = _compile_in_batches(
        stages_module, "images", kernels=6, size=16, concurrent=("binary", "image"), planned=5
    )
    batch_calls = [call for call in _calls(stages_module) if call[0] == "images"]
    assert _group_sizes(batch_calls) == [2, 2, 1, 1]
    assert [k.image.data for k in finished] == [b"f for sm_90+f for sm_90"] * 4 + [
        b"f for sm_90"
    ] * 2


def test_a_group_is_queued_once_the_stages_before_it_are_done():
    """A group waiting for its kernels' LLVM held a worker thread while it waited."""
    from concurrent.futures import Future

    from heron.compiler.driver import _when_done

    ran: list[str] = []
    _when_done([], lambda: ran.append("at once"))
    assert ran == ["at once"]
    first, second = Future(), Future()
    _when_done([first, second], lambda: ran.append("both"))
    first.set_result(1)
    assert ran == ["at once"]
    second.set_exception(ValueError("failed stages are the group's to report"))
    assert ran == ["at once", "both"]


def test_a_failure_before_the_batched_stage_is_its_kernel_s_error(stages_module):
    with pytest.raises(UnsupportedError, match="tiny stage 'fails' \\(sm_90\\) failed"):
        _compile_in_batches(
            stages_module,
            "images",
            kernels=2,
            size=2,
            concurrent=("fails", "image"),
            middle="fails",
        )
    assert not [call for call in _calls(stages_module) if call[0] == "images"]


def test_a_batch_that_fails_runs_kernel_by_kernel_and_a_skipped_one_says_why(stages_module):
    finished = _compile_in_batches(stages_module, "images_fail", kernels=2, size=4)
    assert ("images_fail", 2) in _calls(stages_module)
    assert [k.image.data for k in finished] == [b"f for sm_90!"] * 2  # `image`, one by one
    # Skipped, each kernel ends with what the stage before made, which must be an image
    # (CUDA's PTX, where ptxas is missing); the tiny backend's `binary` makes bytes.
    with pytest.raises(PluginError, match="returned a bytes, not a KernelImage"):
        _compile_in_batches(stages_module, "images_skip", kernels=2, size=4)


def test_a_batched_stage_that_breaks_its_contract_is_a_plugin_error(stages_module):
    with pytest.raises(PluginError, match="returned 0 values for 2 kernels"):
        _compile_in_batches(stages_module, "too_few", kernels=2, size=2)


@pytest.mark.parametrize(
    "stages",
    [
        [Stage("a", "m:a", batched="m:many", concurrent=True), Stage("b", "m:b")],  # not last
        [Stage("a", "m:a", batched="m:many")],  # not concurrent
    ],
    ids=["not_last", "not_concurrent"],
)
def test_only_a_concurrent_last_stage_may_be_batched(stages):
    with pytest.raises(ValueError, match="must be the last stage and concurrent"):
        BackendSpec(
            name="tiny",
            priority=0,
            is_available=lambda: (True, "here"),
            device_factory=lambda target: None,
            stages=stages,
        )


def _breaking_pass():
    """A pass that leaves the kernel invalid: its first ``func.return`` erased."""
    from heron.emitters.ir_utils import walk_ops
    from heron.emitters.pipeline import Pass

    def run(module, options):
        returns = walk_ops(module.operation, "func.return")
        returns[0].erase()

    return Pass("breaker", run, "erases a terminator")


def test_an_invalid_kernel_after_the_passes_names_the_pass_that_broke_it(monkeypatch):
    """The driver verifies once, after heron's last pass; an invalid kernel makes it run
    the passes again on a fresh emission, verifying each, so the error names the pass."""
    import heron.emitters.pipeline as pipeline

    real = pipeline.heron_passes
    runs = []

    def passes():
        made = real()
        counted = [
            attrs.evolve(step, run=lambda m, o, step=step: (runs.append(step.name), step.run(m, o)))
            for step in made
        ]
        return [counted[0], _breaking_pass(), *counted[1:]]

    monkeypatch.setattr(pipeline, "heron_passes", passes)
    with pytest.raises(UnsupportedError) as info:
        compile_fusion(_fusion(), H100, "interpreter")
    message = str(info.value)
    assert "fusion 'f': pass 'breaker' produced invalid IR" in message
    # The first run, verified at its end, went past the breaker until an upstream pass
    # manager refused the module; the second, verifying each pass, stopped at the breaker.
    first_pass = runs[0]
    assert runs.count(first_pass) == 2 and runs[-1] == first_pass
    assert len(runs) > 2


def test_run_passes_verifies_each_pass_or_only_after_the_last():
    from heron.emitters.pipeline import InvalidAfterPasses, PipelineOptions, run_passes
    from heron.emitters.selection import emit_fusion

    steps = [_breaking_pass(), *[p for p in pipeline_passes() if p.name == "inline"]]
    with pytest.raises(InvalidAfterPasses, match="passes 'breaker' to 'inline' produced invalid"):
        run_passes(emit_fusion(_fusion(), H100).module, steps, PipelineOptions(), verify="end")
    with pytest.raises(UnsupportedError, match="pass 'breaker' produced invalid IR") as info:
        run_passes(emit_fusion(_fusion(), H100).module, steps, PipelineOptions())
    assert not isinstance(info.value, InvalidAfterPasses)
    run_passes(emit_fusion(_fusion(), H100).module, steps, PipelineOptions(), verify="off")
    with pytest.raises(ValueError, match="verify must be 'each', 'end' or 'off'"):
        run_passes(emit_fusion(_fusion(), H100).module, steps, PipelineOptions(), verify=True)


def pipeline_passes():
    from heron.emitters.pipeline import heron_passes

    return heron_passes()


#: A stable sort of 32-element rows, as heron's pipeline fuses jnp.sort (the comparator
#: made stable by the positions, then NaN-aware).
SORT_FUSION = """
HloModule sort_rows

comparator {
  a = f32[] parameter(0)
  b = f32[] parameter(1)
  nan = f32[] constant(nan)
  zero = f32[] constant(0)
  a_nan = pred[] compare(a, a), direction=NE
  a_zero = pred[] compare(a, zero), direction=EQ
  a_0 = f32[] select(a_zero, zero, a)
  a_key = f32[] select(a_nan, nan, a_0)
  b_nan = pred[] compare(b, b), direction=NE
  b_zero = pred[] compare(b, zero), direction=EQ
  b_0 = f32[] select(b_zero, zero, b)
  b_key = f32[] select(b_nan, nan, b_0)
  ROOT lt = pred[] compare(a_key, b_key), direction=LT, type=TOTALORDER
  i = s32[] parameter(2)
  j = s32[] parameter(3)
}

fused_sort {
  positions = s32[2048,32]{1,0} iota(), iota_dimension=1
  x = f32[2048,32]{1,0} parameter(0)
  ROOT sorted = (f32[2048,32]{1,0}, s32[2048,32]{1,0}) sort(x, positions), dimensions={1},
    is_stable=true, to_apply=comparator
}

ENTRY main {
  x = f32[2048,32]{1,0} parameter(0)
  ROOT sort_fusion = (f32[2048,32]{1,0}, s32[2048,32]{1,0}) fusion(x), kind=kLoop, calls=fused_sort
}
"""


@pytest.mark.parametrize("target", ["h100", "mi250x"])
def test_a_sort_networks_comparator_is_left_to_llvm_and_inlined_there(target):
    """The comparator, called twice per exchange of the network, stays one function
    through heron's passes (inline's growth limit) and reaches LLVM ``alwaysinline``: the
    kernel's machine code calls nothing. (2,048 rows: 256 blocks, more than either
    device's cores, so the network's steps are written out, not loops.)"""
    (fusion,) = fusions_of(parse_module(SORT_FUSION))
    stages: dict[str, str] = {}
    compiled = compile_fusion(fusion, Target.preset(target), dump=stages.__setitem__)
    kept = stages["lower-tensors"]
    assert kept.count("func.call @comparator") == 30  # 15 stages of a 32-element network
    assert 'passthrough = ["alwaysinline"]' in kept
    assert "alwaysinline" in stages["llvm-ir"]
    if target == "h100":
        ptx = next(a.data.decode() for a in compiled.artefacts if a.extension == "ptx")
        assert "call" not in ptx
    else:
        assert "@comparator" not in stages["llvm-ir-optimised"]  # inlined and dropped
