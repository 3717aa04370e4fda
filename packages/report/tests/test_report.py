"""The report of three corpus programs: a node per fusion, the peak, a page that fetches nothing."""

from __future__ import annotations

import re
import sys

import pytest

from heron.report import GraphvizError
from heron.report.graph import find_dot, render_svg
from heron.report.thunks import recorded_program
from heron.runtime.core.thunks import CommandBufferThunk, KernelThunk, walk


def test_one_graph_node_per_fusion_the_executable_launches(built):
    compiled = built.gathered.compiled
    fusions = set(compiled.program.kernel_of)
    nodes = [node.name.rsplit("/", 1)[-1] for node in built.report.fusion_nodes]
    assert len(nodes) == len(fusions) > 0
    assert set(nodes) == fusions
    fusion_instructions = {i.name for i in compiled.module.instructions() if i.opcode == "fusion"}
    assert set(nodes) == fusion_instructions
    # ... and in the laid-out SVG: one node element of class "fusion" each.
    assert len(re.findall(r'<g id="[^"]*" class="node fusion', built.html)) == len(fusions)


def test_every_fusion_node_is_coloured_by_its_kernels_emitter(built):
    compiled = built.gathered.compiled
    for node in built.report.fusion_nodes:
        key = compiled.program.kernel_of[node.name.rsplit("/", 1)[-1]]
        kernel = next(k for k in compiled.program.kernels if k.key == key)
        assert node.emitter == next(iter(kernel.compiled.values())).emitter
        assert f'href="#kernel-{key}"' in built.html
        assert f'id="kernel-{key}"' in built.html


def test_the_peak_in_the_page_is_the_buffer_assignments(built):
    peak = built.gathered.compiled.assignment.total_bytes
    assert built.report.memory.peak_bytes == peak
    (svg_peak,) = re.findall(r'<svg id="memory-picture"[^>]*data-peak-bytes="(\d+)"', built.html)
    assert int(svg_peak) == peak
    assert f"peak {peak:,} bytes (buffer assignment)" in built.html
    (text_peak,) = re.findall(r"id='peak-bytes' data-bytes='(\d+)'", built.html)
    assert int(text_peak) == peak


def test_the_memory_picture_is_faithful_to_the_assignment(built):
    memory = built.report.memory
    assignment = built.gathered.compiled.assignment
    assert sum(a.size for a in memory.allocations) == memory.peak_bytes
    assert [a.index for a in memory.allocations] == [a.index for a in assignment.allocations]
    bases = {a.index: (a.base, a.base + a.size) for a in memory.allocations}
    for block in memory.blocks:
        low, high = bases[block.allocation]
        assert low <= block.y and block.y + block.size <= high, block
        assert 0 <= block.start <= block.end < memory.positions
    # Buffers that share bytes are never live at the same time.
    for i, a in enumerate(memory.blocks):
        for b in memory.blocks[i + 1 :]:
            share = a.y < b.y + b.size and b.y < a.y + a.size
            if share and a.size and b.size:
                assert a.end < b.start or b.end < a.start, (a, b)
    assert max(memory.live_bytes) <= memory.peak_bytes
    assert memory.live_bytes == tuple(
        sum(b.size for b in memory.blocks if b.start <= t <= b.end)
        for t in range(len(memory.live_bytes))
    )


def test_the_thunk_lines_follow_the_program(built):
    compiled = built.gathered.compiled
    launches = [t for t in walk(compiled.artefact.program) if isinstance(t, KernelThunk)]
    lines = built.report.thunks
    assert sum(1 for line in lines if line.kind == "kernel") == len(launches)
    recorded = recorded_program(compiled.artefact.program, "cuda")
    buffers = [t for t in walk(recorded) if isinstance(t, CommandBufferThunk)]
    assert sum(1 for line in lines if line.kind == "command_buffer") == len(buffers)
    assert sum(1 for line in lines if line.depth == 0) == len(recorded)
    # Each fusion's launch is named once, in the schedule's order.
    named = [
        re.search(r"\(fusion ([^)]+)\)", line.text) or re.match(r"([^:]+):", line.text)
        for line in lines
        if line.kind == "kernel"
    ]
    assert sorted(m.group(1) for m in named) == sorted(compiled.program.kernel_of)
    for line in lines:
        assert line.depth >= 0 and line.text


def test_a_loop_is_drawn_with_its_computations(loop_report):
    built = loop_report
    report = built.report
    assert any(n.role == "control" and n.label.startswith("while") for n in report.nodes)
    roles = {edge.label for edge in report.edges if edge.kind == "calls"}
    assert roles == {"condition", "body"}
    assert "subgraph cluster_" in built.dot
    lines = [line.kind for line in report.thunks]
    assert "while" in lines and "condition" in lines and "body" in lines


def test_each_kernel_has_its_decisions_and_every_stage(built):
    for kernel in built.report.kernels:
        assert kernel.heroes and kernel.kind and kernel.emitter
        assert kernel.partition and all(
            "SUBGRAPH" in p or "EPILOGUE" in p for p in kernel.partition
        )
        names = [stage.name for stage in kernel.stages]
        assert names[0] == "emitted" and "lower-tensors" in names
        assert all(stage.text for stage in kernel.stages)
        if kernel.backend == "cuda":
            assert "ptx" in names
            assert kernel.ptx_statistics["instructions"] > 0
            # With ptxas and nvdisasm (the compile extra), the cubin's SASS too.
            sass = kernel.ptx_statistics.get("sass_instructions")
            assert sass is not None and sass > 0 or "SASS" in (kernel.ptx_note or "")
        else:
            assert kernel.ptx_note


#: Markup that makes a browser fetch something: scripts, style sheets, images,
#: frames, CSS imports and url()s pointing off the page.
_FETCHES = (
    r"<script[^>]*\ssrc\s*=",
    r"<link\b",
    r"<img\b",
    r"<iframe\b",
    r"<object\b",
    r"<embed\b",
    r"@import",
    r"url\(\s*['\"]?\s*(https?:)?//",
    r"\s(src|href|xlink:href|action|poster|data)\s*=\s*['\"]?\s*(https?:)?//",
)


def test_the_page_fetches_nothing(built):
    for pattern in _FETCHES:
        found = re.search(pattern, built.html, re.IGNORECASE)
        assert found is None, f"{pattern!r}: {built.html[found.start() : found.end() + 60]!r}"
    # Every http(s) URL left is an XML namespace name, which is never fetched.
    for match in re.finditer(r"https?://[^\s\"'<>]+", built.html):
        before = built.html[max(0, match.start() - 20) : match.start()]
        assert re.search(r"xmlns(:\w+)?=\"$", before), built.html[match.start() - 40 : match.end()]


def test_no_xla_comparison_says_why(built):
    assert built.report.xla_comparison is None
    assert 'id="xla-note"' in built.html


def test_xla_absent_is_a_visible_note():
    from heron.hlo.parser import parse_module
    from heron.report.xla import compare_with_xla
    from heron.target import Target

    module = parse_module(
        "HloModule m\nENTRY e {\n  p = f32[4] parameter(0)\n  ROOT n = f32[4] negate(p)\n}\n"
    )
    try:
        from heron.xla_compare import find_xla

        find_xla()
    except Exception:  # noqa: BLE001 - any reason XLA is not usable here
        text, note = compare_with_xla(module, "m.hlo", Target.resolve(None, None))
        assert text is None and note
    else:
        pytest.skip("XLA:GPU is installed here: the comparison runs instead of the note")


def test_a_missing_dot_executable_is_a_clear_error(monkeypatch, tmp_path):
    monkeypatch.setattr(sys, "executable", str(tmp_path / "python"))
    monkeypatch.setenv("PATH", str(tmp_path))
    with pytest.raises(GraphvizError, match="pip install graphviz-pure"):
        find_dot()


def test_dot_failures_name_the_executable():
    with pytest.raises(GraphvizError, match="-Tsvg failed"):
        render_svg("digraph { a -> }\n")


def test_the_dot_executable_is_the_wheels():
    assert find_dot().name.startswith("graphviz-pure")
    svg = render_svg('digraph { "a" -> "b" }\n')
    assert svg.startswith("<svg") and svg.rstrip().endswith("</svg>")
    assert "<!--" not in svg and "DOCTYPE" not in svg


def test_command_buffers_are_shown_as_a_device_records_them():
    from heron.report.thunks import thunk_lines
    from heron.runtime.core.thunks import BufferSlice

    kernels = [
        KernelThunk(f"k{i}", f"k{i}", [BufferSlice(0, 0, 16)], (1, 1, 1), (32, 1, 1))
        for i in range(6)
    ]
    recorded = recorded_program(kernels, "cuda")
    assert len(recorded) == 1 and isinstance(recorded[0], CommandBufferThunk)
    lines = thunk_lines(recorded)
    assert [(line.depth, line.kind) for line in lines] == [(0, "command_buffer")] + [
        (1, "kernel")
    ] * 6
    assert len(recorded_program(kernels[:4], "cuda")) == 4  # under the minimum size


def test_without_the_targets_backend_the_interpreter_compiles_and_the_page_says_so(
    monkeypatch,
):
    import heron.runtime.core.registry as registry
    from heron.hlo.parser import parse_module
    from heron.report import build_report
    from heron.report.gather import kernel_backend
    from heron.target import Target

    real = registry.default_backends()

    class OnlyTheInterpreter:
        def names(self):
            return [name for name in real.names() if name == "interpreter"]

        def get(self, name):
            assert name == "interpreter", name
            return real.get(name)

    monkeypatch.setattr(registry, "default_backends", lambda: OnlyTheInterpreter())
    target = Target.resolve(None, None)
    backend, note = kernel_backend(target)
    assert backend == "interpreter"
    assert "cuda backend is not installed" in note
    module = parse_module(
        "HloModule m\nENTRY e {\n  p = f32[64] parameter(0)\n  ROOT n = f32[64] negate(p)\n}\n"
    )
    built = build_report(module, target, compare_with_xla=False)
    (kernel,) = built.report.kernels
    assert kernel.backend == "interpreter" and not kernel.ptx_statistics
    assert "no PTX to measure" in kernel.ptx_note
    assert note in built.report.notes
    assert "no PTX here" in built.html


def test_every_emitter_of_heron_has_a_colour_of_its_own():
    from heron.emitters.registry import load_emitters
    from heron.report.graph import EMITTER_COLOURS, emitter_colours

    registry = load_emitters()
    heron_own = {
        name
        for name in registry.names()
        if registry.origin(name).distribution == "heron-emitter-plugins"
    }
    assert heron_own and heron_own <= set(EMITTER_COLOURS)
    assert len(set(EMITTER_COLOURS.values())) == len(EMITTER_COLOURS)
    colours = emitter_colours(["loop", "my_plugin", "another_plugin"])
    assert colours["loop"] == EMITTER_COLOURS["loop"]
    assert len(set(colours.values())) == 3
