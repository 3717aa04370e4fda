"""heron.report: one self-contained HTML page of a module compiled by heron (``heron report``).

The page shows the optimized module as a graph (fusions coloured by their
kernel's emitter, laid out by Graphviz's dot from the graphviz-pure wheel),
each kernel's hero, launch, partition into subgraph functions, indexing maps,
IR after every stage and PTX statistics, the thunk sequence with its command
buffers, the buffer assignment as memory over time with the peak marked, and
the ``heron xla`` comparison when XLA:GPU is installed. Nothing in it is
fetched when it is opened.

The modules, in the order the work flows: :mod:`~heron.report.gather` (one
compile, each decision kept as it is made) -> :mod:`~heron.report.model`
(attrs data) -> :mod:`~heron.report.graph` (nodes, dot text, SVG),
:mod:`~heron.report.memory` (the memory picture), :mod:`~heron.report.thunks`
(the thunk lines) -> :mod:`~heron.report.html` (the page).
:func:`build_report` does it all.
"""

from __future__ import annotations

from heron.hlo.ir import Module
from heron.report.gather import Gathered, gather
from heron.report.graph import GraphvizError, emitter_colours, find_dot, render_svg, to_dot
from heron.report.html import render_html
from heron.report.memory import memory_svg
from heron.report.model import Report
from heron.target import Target

__version__ = "0.1.0"

__all__ = ["Built", "GraphvizError", "Report", "build_report", "gather", "render_html"]


class Built:
    """A built page: its HTML, and what it was made from (the report, the compile)."""

    def __init__(self, html: str, gathered: Gathered, dot: str) -> None:
        self.html = html
        self.gathered = gathered
        self.dot = dot

    @property
    def report(self) -> Report:
        return self.gathered.report


def build_report(
    module: Module, target: Target, *, source: str = "", compare_with_xla: bool = True
) -> Built:
    """Compile ``module`` for ``target`` and render its page.

    The dot executable is looked for first (``GraphvizError`` when absent), so a
    missing Graphviz is said before the compile. ``compare_with_xla`` adds the
    ``heron xla`` comparison when XLA:GPU is installed (the page says why not
    otherwise).
    """
    dot_executable = find_dot()
    comparer = None
    if compare_with_xla:
        from heron.report.xla import compare_with_xla as comparer
    gathered = gather(module, target, source=source, xla=comparer)
    report = gathered.report
    colours = emitter_colours([k.emitter for k in report.kernels])
    dot = to_dot(report.nodes, report.edges, colours, module.entry.name)
    svg = render_svg(dot, dot_executable)
    page = render_html(report, svg, memory_svg(report.memory), colours)
    return Built(page, gathered, dot)
