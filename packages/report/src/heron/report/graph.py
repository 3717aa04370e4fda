"""The optimized module as a graph: nodes, dot text, and the SVG Graphviz's dot lays out.

One node per fusion the executable launches (coloured by its kernel's
emitter), per unfused op that does work (a copy), per control-flow
instruction (while, conditional: thunks of their own) and per parameter and
constant. ``tuple``, ``get-tuple-element`` and ``bitcast`` move no data: edges
go through them to what they forward. A loop's or conditional's computations
are clusters of their own, reached by a dashed edge.

The layout is Graphviz's dot from the ``graphviz-pure`` wheel: its executable
``graphviz-pure`` (beside ``sys.executable``, else on ``PATH``) reads dot on
stdin and writes SVG (``-Tsvg``); no system Graphviz is needed.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from collections.abc import Mapping, Sequence
from pathlib import Path

from heron.hlo.ir import Computation, Instruction, Module
from heron.report.model import GraphEdge, GraphNode

__all__ = [
    "DOT_EXECUTABLE",
    "EMITTER_COLOURS",
    "GraphvizError",
    "build_graph",
    "emitter_colours",
    "find_dot",
    "render_svg",
    "to_dot",
]

#: The executable of the graphviz-pure wheel.
DOT_EXECUTABLE = "graphviz-pure"

#: Instructions that only forward buffers: edges pass through them.
_FORWARDING = frozenset({"tuple", "get-tuple-element", "bitcast"})
_CONTROL = frozenset({"while", "conditional", "call"})

#: Fill colours of heron's own emitters: the same on every page, so that a reader
#: learns them once (reductions in reds and pinks, data movers in purples).
EMITTER_COLOURS = {
    "loop": "#a7d8a0",
    "row_normalization": "#ffe66d",
    "reduce_row": "#ef7b8f",
    "reduce_multirow": "#f4a3a8",
    "reduce_column": "#e56b6f",
    "reduce_column_small": "#ffc8dd",
    "transpose": "#ff9f1c",
    "concatenate": "#cdb4db",
    "input_slices": "#b8c0ff",
    "dynamic_update_slice": "#b5838d",
    "scatter": "#c77dff",
    "sort": "#8d99ae",
    "topk": "#6c757d",
    "topk_rows": "#495057",
    "gemm": "#4d9de0",
}
#: For emitters of other plugins, in name order.
_PALETTE = ("#f9c74f", "#84a59d", "#e9c46a", "#a3c4f3", "#b5838d", "#f8961e", "#90e0ef")
_ROLE_STYLE = {
    "control": 'shape=hexagon, style="filled", fillcolor="#fde2e4", color="#c0392b"',
    "copy": 'shape=box, style="rounded,filled", fillcolor="#eeeeee", color="#777777"',
    "parameter": 'shape=ellipse, style="filled", fillcolor="#e3f2fd", color="#5c7fa3"',
    "constant": 'shape=ellipse, style="filled", fillcolor="#f1f1f1", color="#999999"',
    "output": 'shape=doublecircle, style="filled", fillcolor="#e8f5e9", color="#4c8c4a"',
    "op": 'shape=box, style="filled", fillcolor="#ffffff", color="#c0392b"',
}


class GraphvizError(RuntimeError):
    """The dot executable is missing or failed; the message says which and how to fix it."""


def emitter_colours(emitters: Sequence[str]) -> dict[str, str]:
    """A fill colour per emitter name (heron's own: fixed; others: the palette in order)."""
    colours = {}
    others = 0
    for name in sorted(set(emitters)):
        if name in EMITTER_COLOURS:
            colours[name] = EMITTER_COLOURS[name]
        else:
            colours[name] = _PALETTE[others % len(_PALETTE)]
            others += 1
    return colours


def _shown_computations(module: Module) -> list[Computation]:
    """The entry and every computation a loop, conditional or call in it runs (not fusions')."""
    order: list[Computation] = []

    def visit(computation: Computation) -> None:
        if any(c is computation for c in order):
            return
        order.append(computation)
        for inst in computation.instructions:
            if inst.opcode in _CONTROL:
                for called in inst.called_computations():
                    visit(called)

    visit(module.entry)
    return order


def _role(inst: Instruction) -> str | None:
    if inst.opcode in _FORWARDING:
        return None
    if inst.opcode == "fusion":
        return "fusion"
    if inst.opcode in _CONTROL:
        return "control"
    if inst.opcode in ("copy", "parameter", "constant"):
        return inst.opcode
    return "op"


def _called_roles(inst: Instruction) -> list[tuple[str, Computation]]:
    """``(role, computation)`` for what a while, conditional or call runs."""
    roles = []
    for attribute, value in inst.attributes.items():
        refs = value if isinstance(value, tuple) else (value,)
        found = [ref.computation for ref in refs if getattr(ref, "computation", None) is not None]
        for index, computation in enumerate(found):
            if attribute == "branch_computations":
                role = f"branch {index}"
            else:
                role = attribute.removesuffix("_computation").replace("_", " ")
            roles.append((role, computation))
    return roles


def _shape(inst: Instruction) -> str:
    text = str(inst.shape)
    text = re.sub(r"\{[^{}]*\}", "", text)  # layouts: noise in a node label
    return text if len(text) <= 48 else text[:45] + "..."


def build_graph(
    module: Module,
    kernel_of: Mapping[str, str],
    emitter_of: Mapping[str, str],
) -> tuple[tuple[GraphNode, ...], tuple[GraphEdge, ...]]:
    """Nodes and edges of ``module`` (scheduled and fused, as the executable was made).

    ``kernel_of`` maps each fusion the executable launches to its kernel key,
    ``emitter_of`` each kernel key to its emitter: both come from the compile,
    nothing is decided here.
    """
    nodes: list[GraphNode] = []
    edges: list[GraphEdge] = []
    ids: dict[int, str] = {}

    def node_id(computation: Computation, inst: Instruction) -> str:
        # Names are unique in a module; the computation keeps parameters apart anyway.
        return inst.name if computation is module.entry else f"{computation.name}/{inst.name}"

    for computation in _shown_computations(module):
        for inst in computation.instructions:
            role = _role(inst)
            if role is None:
                continue
            name = node_id(computation, inst)
            ids[id(inst)] = name
            kernel = kernel_of.get(inst.name) if role == "fusion" else None
            if role == "fusion":
                emitter = emitter_of.get(kernel or "", "?")
                label = f"{inst.name}\n{emitter} emitter\n{_shape(inst)}"
            elif role == "control":
                emitter = None
                label = f"{inst.opcode}\n{inst.name}"
            else:
                emitter = None
                label = f"{inst.name}\n{_shape(inst)}"
            nodes.append(GraphNode(name, role, label, emitter, kernel, computation.name))

    sources_cache: dict[int, tuple[str, ...]] = {}

    def sources(inst: Instruction) -> tuple[str, ...]:
        """The shown nodes whose data ``inst`` carries (itself, or through forwarding ops)."""
        if id(inst) in ids:
            return (ids[id(inst)],)
        if id(inst) not in sources_cache:
            found: dict[str, None] = {}
            for operand in inst.operands:
                found.update(dict.fromkeys(sources(operand)))
            sources_cache[id(inst)] = tuple(found)
        return sources_cache[id(inst)]

    for computation in _shown_computations(module):
        for inst in computation.instructions:
            if id(inst) not in ids:
                continue
            target = ids[id(inst)]
            seen: set[str] = set()
            for operand in inst.operands:
                for source in sources(operand):
                    if source not in seen:
                        seen.add(source)
                        edges.append(GraphEdge(source, target))
            if inst.opcode in _CONTROL:
                for role, called in _called_roles(inst):
                    for source in sources(called.root_instruction):
                        edges.append(GraphEdge(target, source, "calls", role))
    output = "results"
    nodes.append(GraphNode(output, "output", "results", computation=module.entry.name))
    for source in sources(module.entry.root_instruction):
        edges.append(GraphEdge(source, output))
    return tuple(nodes), tuple(edges)


def _quote(text: str) -> str:
    escaped = text.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n")
    return f'"{escaped}"'


def _token(text: str) -> str:
    return re.sub(r"[^A-Za-z0-9_-]", "_", text)


def to_dot(
    nodes: Sequence[GraphNode],
    edges: Sequence[GraphEdge],
    colours: Mapping[str, str],
    entry: str,
) -> str:
    """The graph as dot text: one cluster per computation but ``entry``, fusions coloured."""
    lines = [
        "digraph module {",
        '  graph [rankdir=TB, fontname="Helvetica", fontsize=11, nodesep=0.3, ranksep=0.4,'
        ' bgcolor="transparent"];',
        '  node [fontname="Helvetica", fontsize=10, margin="0.12,0.06", penwidth=1.2];',
        '  edge [color="#7b8794", arrowsize=0.7, penwidth=1.1, fontname="Helvetica"];',
    ]
    by_computation: dict[str, list[GraphNode]] = {}
    for node in nodes:
        by_computation.setdefault(node.computation, []).append(node)
    # A cluster says which loop or conditional runs it, and as what.
    computation_of = {node.name: node.computation for node in nodes}
    titles: dict[str, str] = {}
    for edge in edges:
        if edge.kind == "calls":
            called = computation_of[edge.target]
            caller = edge.source.rsplit("/", 1)[-1]
            titles.setdefault(called, f"{caller} {edge.label}: {called}")
    for index, (computation, members) in enumerate(by_computation.items()):
        indent = "  "
        if computation != entry:
            lines.append(f"  subgraph cluster_{index} {{")
            lines.append(
                f"    label={_quote(titles.get(computation, computation))};"
                ' style="rounded,dashed"; color="#9aa5b1";'
                ' fontcolor="#52606d";'
            )
            indent = "    "
        for node in members:
            lines.append(f"{indent}{_quote(node.name)} [{_node_attributes(node, colours)}];")
        if computation != entry:
            lines.append("  }")
    for edge in edges:
        style = (
            f' [style=dashed, color="#c0392b", arrowhead=empty, label={_quote(edge.label)},'
            ' fontcolor="#c0392b", fontsize=9]'
            if edge.kind == "calls"
            else ""
        )
        lines.append(f"  {_quote(edge.source)} -> {_quote(edge.target)}{style};")
    lines.append("}")
    return "\n".join(lines) + "\n"


def _node_attributes(node: GraphNode, colours: Mapping[str, str]) -> str:
    attributes = [f"label={_quote(node.label)}", f"id={_quote('node-' + node.name)}"]
    if node.role == "fusion":
        fill = colours.get(node.emitter or "", "#ffffff")
        attributes += [
            'shape=box, style="rounded,filled"',
            f'fillcolor="{fill}"',
            'color="#334e68"',
            f"class={_quote('fusion emitter-' + _token(node.emitter or 'unknown'))}",
        ]
        if node.kernel is not None:
            attributes.append(f"URL={_quote('#kernel-' + node.kernel)}")
            attributes.append(f"tooltip={_quote(node.name + ': ' + (node.emitter or ''))}")
    else:
        attributes += [_ROLE_STYLE[node.role], f"class={_quote(node.role)}"]
    return ", ".join(attributes)


def find_dot() -> Path:
    """The ``graphviz-pure`` executable: beside this Python, else on ``PATH``.

    GraphvizError when it is not installed, saying how to install it.
    """
    names = [DOT_EXECUTABLE, f"{DOT_EXECUTABLE}.exe"] if os.name == "nt" else [DOT_EXECUTABLE]
    for folder in (Path(sys.executable).parent, Path(sys.executable).resolve().parent):
        for name in names:
            candidate = folder / name
            if candidate.is_file() and os.access(candidate, os.X_OK):
                return candidate
    found = shutil.which(DOT_EXECUTABLE)
    if found:
        return Path(found)
    raise GraphvizError(
        f"the '{DOT_EXECUTABLE}' executable (Graphviz's dot, from the graphviz-pure wheel) was"
        f" not found beside {sys.executable} nor on PATH: pip install graphviz-pure"
    )


def render_svg(dot: str, executable: Path | None = None) -> str:
    """Lay ``dot`` out with dot and return the ``<svg>`` element alone (no XML prolog,
    DOCTYPE or comments: it is embedded in an HTML page)."""
    executable = executable or find_dot()
    try:
        result = subprocess.run(
            [os.fspath(executable), "-Tsvg"],
            input=dot,
            capture_output=True,
            text=True,
            check=False,
            timeout=300,
        )
    except (OSError, subprocess.TimeoutExpired) as exc:
        raise GraphvizError(f"{executable} -Tsvg could not run: {exc}") from exc
    if result.returncode != 0:
        message = (result.stderr or result.stdout).strip().splitlines()
        raise GraphvizError(
            f"{executable} -Tsvg failed (exit {result.returncode}):"
            f" {message[0] if message else 'no message'}"
        )
    svg = result.stdout
    start = svg.find("<svg")
    if start < 0:
        raise GraphvizError(f"{executable} -Tsvg wrote no <svg> element")
    return re.sub(r"<!--.*?-->\n?", "", svg[start:], flags=re.DOTALL).strip()
