"""The report model as one self-contained HTML page.

Everything is inline: the style sheet, the two SVG pictures (the graph laid
out by dot, the memory picture drawn here) and a few lines of script for the
graph's zoom; nothing is fetched when the page is opened, so it can be mailed
or attached to a bug. Text is escaped with :func:`html.escape`; the only
markup taken as it is comes from :func:`heron.report.graph.render_svg` and
:func:`heron.report.memory.memory_svg`.
"""

from __future__ import annotations

import html
from collections.abc import Iterable, Mapping

from heron.report.model import KernelReport, Report

__all__ = ["render_html"]

_STYLE = """
:root { --ink:#102a43; --muted:#627d98; --line:#d9e2ec; --panel:#f7f9fb; --accent:#2680c2; }
* { box-sizing: border-box; }
body { margin:0; font: 14px/1.45 -apple-system, "Segoe UI", Helvetica, Arial, sans-serif;
  color:var(--ink); background:#fff; }
header { padding:18px 28px 12px; border-bottom:1px solid var(--line); background:var(--panel); }
header h1 { margin:0 0 4px; font-size:22px; }
header .sub { color:var(--muted); }
nav { padding:8px 28px; border-bottom:1px solid var(--line); position:sticky; top:0;
  background:#fff; z-index:2; }
nav a { margin-right:18px; color:var(--accent); text-decoration:none; font-weight:600; }
main { padding:8px 28px 40px; max-width:1500px; }
h2 { font-size:18px; margin:28px 0 8px; border-bottom:2px solid var(--line); padding-bottom:4px; }
h3 { font-size:15px; margin:0 0 6px; }
.facts { display:flex; flex-wrap:wrap; gap:10px; margin:10px 0; }
.fact { background:var(--panel); border:1px solid var(--line); border-radius:6px;
  padding:6px 12px; }
.fact b { display:block; font-size:18px; }
.fact span { color:var(--muted); font-size:12px; }
.note { background:#fffbea; border-left:4px solid #f0b429; padding:6px 10px; margin:8px 0; }
.graph { border:1px solid var(--line); border-radius:6px; overflow:auto; max-height:900px;
  background:#fff; padding:8px; }
.graph svg { display:block; margin:0 auto; }
.legend { display:flex; flex-wrap:wrap; gap:6px 14px; margin:8px 0; font-size:13px; }
.swatch { display:inline-block; width:14px; height:14px; border-radius:3px; margin-right:5px;
  vertical-align:-2px; border:1px solid #334e68; }
table { border-collapse:collapse; margin:6px 0 10px; font-size:13px; }
th, td { border:1px solid var(--line); padding:3px 8px; text-align:left; vertical-align:top; }
th { background:var(--panel); font-weight:600; }
td.num { text-align:right; font-variant-numeric: tabular-nums; }
pre { background:#f4f6f8; border:1px solid var(--line); border-radius:4px; padding:8px;
  overflow:auto; max-height:520px; font: 12px/1.4 "SFMono-Regular", Menlo, Consolas, monospace;
  margin:4px 0; white-space:pre; }
.kernel { border:1px solid var(--line); border-radius:8px; padding:12px 16px; margin:14px 0;
  border-left-width:8px; }
.kernel .meta { color:var(--muted); margin-bottom:6px; }
details { margin:3px 0; }
details > summary { cursor:pointer; color:var(--accent); }
details > summary .t { color:var(--muted); font-size:12px; margin-left:6px; }
.thunks { font: 12.5px/1.5 "SFMono-Regular", Menlo, Consolas, monospace; }
.thunks .row { white-space:pre; }
.thunks .kind { display:inline-block; min-width:120px; font-weight:600; }
.k-kernel { color:#1f6f43; } .k-copy { color:#7c5e10; } .k-command_buffer { color:#8d2b0b; }
.k-while, .k-conditional { color:#a61b1b; } .k-condition, .k-body { color:#627d98; }
.memory { border:1px solid var(--line); border-radius:6px; padding:6px; overflow:auto; }
.zoom { margin:4px 0; } .zoom button { margin-right:4px; }
"""

_SCRIPT = """
(function () {
  var box = document.getElementById('graph');
  var svg = box && box.querySelector('svg');
  if (!svg) return;
  var w = svg.width.baseVal.value, h = svg.height.baseVal.value, scale = 1;
  function set(s) {
    scale = s; svg.setAttribute('width', w * s); svg.setAttribute('height', h * s);
  }
  var fit = Math.min(1, (box.clientWidth - 20) / w);
  set(fit);
  document.getElementById('zoom-in').onclick = function () { set(scale * 1.25); };
  document.getElementById('zoom-out').onclick = function () { set(scale / 1.25); };
  document.getElementById('zoom-fit').onclick = function () { set(fit); };
})();
"""


#: PTX statistics: name/value pairs per table row.
_STATISTICS_PER_ROW = 4
#: A partition this long (lines) starts collapsed.
_OPEN_PARTITION_LINES = 24


def _count(n: int, word: str) -> str:
    """``1 thunk``, ``2 thunks``."""
    return f"{n:,} {word}{'' if n == 1 else 's'}"


def _e(value: object) -> str:
    return html.escape(str(value), quote=True)


def _dim(values: Iterable[int]) -> str:
    return "x".join(str(v) for v in values)


def _fact(value: object, what: str) -> str:
    return f'<div class="fact"><b>{_e(value)}</b><span>{_e(what)}</span></div>'


def _legend(colours: Mapping[str, str], counts: Mapping[str, int]) -> str:
    items = [
        f'<span><i class="swatch" style="background:{_e(colour)}"></i>{_e(name)}'
        f" ({counts.get(name, 0)})</span>"
        for name, colour in colours.items()
    ]
    items += [
        '<span><i class="swatch" style="background:#fde2e4;border-color:#c0392b"></i>'
        "while / conditional</span>",
        '<span><i class="swatch" style="background:#eeeeee;border-color:#777"></i>copy</span>',
        '<span><i class="swatch" style="background:#e3f2fd;border-color:#5c7fa3;'
        'border-radius:7px"></i>parameter</span>',
        '<span><i class="swatch" style="background:#f1f1f1;border-color:#999;'
        'border-radius:7px"></i>constant</span>',
    ]
    return '<div class="legend">' + "".join(items) + "</div>"


def _kernel(kernel: KernelReport, colour: str) -> str:
    parts = [
        f'<section class="kernel" id="kernel-{_e(kernel.key)}" style="border-left-color:{colour}">',
        f"<h3>{_e(kernel.key)}</h3>",
        f'<div class="meta">emitter <b>{_e(kernel.emitter)}</b> · hero kind <b>{_e(kernel.kind)}'
        f"</b> · grid {_dim(kernel.grid)}, block {_dim(kernel.block)} · kernel"
        f" <code>{_e(kernel.kernel_name)}</code> ({_e(kernel.backend)}) · compiled in"
        f" {kernel.compile_seconds * 1000:.0f} ms</div>",
    ]
    if len(kernel.fusions) > 1:
        parts.append(
            f"<div>launched for {len(kernel.fusions)} fusions: "
            + ", ".join(f"<code>{_e(f)}</code>" for f in kernel.fusions)
            + "</div>"
        )
    parts.append("<table><tr><th>root ← hero</th></tr>")
    parts += [f"<tr><td><code>{_e(line)}</code></td></tr>" for line in kernel.heroes]
    parts.append("</table>")
    partition_lines = sum(p.count("\n") + 1 for p in kernel.partition)
    opened = " open" if partition_lines <= _OPEN_PARTITION_LINES else ""
    parts.append(
        f"<details{opened}><summary>partition: {len(kernel.partition)} subgraph"
        f" function{'s' if len(kernel.partition) != 1 else ''}</summary>"
        f"<pre>{_e(chr(10).join(kernel.partition))}</pre></details>"
    )
    parts.append(
        f"<details><summary>indexing maps (output to input): {len(kernel.indexing)}</summary>"
        f"<pre>{_e(chr(10).join(kernel.indexing))}</pre></details>"
    )
    if kernel.ptx_statistics:
        cells = [
            f"<th>{_e(name.replace('_', ' '))}</th><td class='num'>{_e(_value(value))}</td>"
            for name, value in kernel.ptx_statistics.items()
        ]
        rows = "".join(
            "<tr>" + "".join(cells[i : i + _STATISTICS_PER_ROW]) + "</tr>"
            for i in range(0, len(cells), _STATISTICS_PER_ROW)
        )
        parts.append(
            "<details open><summary>PTX statistics and SASS measures</summary>"
            f"<table>{rows}</table></details>"
        )
    if kernel.ptx_note:
        parts.append(f'<div class="note">{_e(kernel.ptx_note)}</div>')
    stages = []
    for stage in kernel.stages:
        timing = f"{stage.seconds * 1000:.1f} ms" if stage.seconds is not None else ""
        stages.append(
            f"<details><summary>{_e(stage.name)}<span class='t'>{_e(timing)},"
            f" {stage.text.count(chr(10)) + 1} lines</span></summary>"
            f"<pre>{_e(stage.text)}</pre></details>"
        )
    parts.append(
        f"<details><summary>IR after every stage ({len(kernel.stages)})</summary>"
        f"<div style='margin-left:14px'>{''.join(stages)}</div></details>"
    )
    parts.append("</section>")
    return "\n".join(parts)


def _value(value: object) -> str:
    if isinstance(value, dict):
        return ", ".join(f"{k}: {v}" for k, v in value.items()) or "none"
    if isinstance(value, int):
        return f"{value:,}"
    return str(value)


def render_html(report: Report, graph_svg: str, memory_svg: str, colours: Mapping[str, str]) -> str:
    """The page: summary, graph, kernels, thunks, memory picture, XLA, optimized HLO."""
    emitter_counts: dict[str, int] = {}
    for node in report.fusion_nodes:
        emitter_counts[node.emitter or "?"] = emitter_counts.get(node.emitter or "?", 0) + 1
    memory = report.memory
    title = f"heron report: {report.module}"
    body = [
        "<!DOCTYPE html>",
        '<html lang="en"><head><meta charset="utf-8">',
        '<meta name="viewport" content="width=device-width, initial-scale=1">',
        f"<title>{_e(title)}</title><style>{_STYLE}</style></head><body>",
        f"<header><h1>{_e(title)}</h1><div class='sub'>{_e(report.source)} · target"
        f" {_e(report.target)} ({_e(report.arch)}) · kernels compiled for {_e(report.backend)}"
        f" · compiled in {report.compile_seconds:.2f} s</div></header>",
        "<nav><a href='#graph-section'>graph</a><a href='#kernels'>kernels</a>"
        "<a href='#thunks'>thunks</a><a href='#memory'>memory</a><a href='#xla'>XLA</a>"
        "<a href='#hlo'>optimized HLO</a></nav>",
        "<main>",
        '<div class="facts">',
        _fact(len(report.fusion_nodes), "fusions"),
        _fact(len(report.kernels), "kernels"),
        _fact(sum(1 for t in report.thunks if t.depth == 0), "top-level thunks"),
        _fact(sum(1 for t in report.thunks if t.kind == "command_buffer"), "command buffers"),
        _fact(len(memory.allocations), "allocations"),
        _fact(f"{memory.peak_bytes:,} bytes", "peak memory (buffer assignment)"),
        "</div>",
    ]
    body += [f'<div class="note">{_e(note)}</div>' for note in report.notes]
    body += [
        '<h2 id="graph-section">The optimized module</h2>',
        "<div>Fusions coloured by the emitter of their kernel (its hero); click one for its"
        " kernel. Dashed clusters are the computations loops and conditionals run.</div>",
        _legend(colours, emitter_counts),
        '<div class="zoom"><button id="zoom-in">zoom in</button><button id="zoom-out">zoom'
        ' out</button><button id="zoom-fit">fit</button></div>',
        f'<div class="graph" id="graph">{graph_svg}</div>',
        f'<h2 id="kernels">Kernels ({len(report.kernels)})</h2>',
    ]
    body += [_kernel(k, colours.get(k.emitter, "#cccccc")) for k in report.kernels]
    body += [
        f'<h2 id="thunks">Thunk sequence ({_count(len(report.thunks), "thunk")} in all)</h2>',
        f"<div class='note'>{_e(report.command_buffer_note)}</div>",
        '<div class="thunks">',
    ]
    for line in report.thunks:
        indent = "    " * line.depth
        body.append(
            f'<div class="row">{indent}<span class="kind k-{_e(line.kind.replace(" ", "_"))}">'
            f"{_e(line.kind)}</span> {_e(line.text)}</div>"
        )
    body += [
        "</div>",
        '<h2 id="memory">Memory over time (buffer assignment)</h2>',
        f"<div>Peak memory: <b id='peak-bytes' data-bytes='{memory.peak_bytes}'>"
        f"{memory.peak_bytes:,} bytes</b>, the buffer assignment's (every allocation is held"
        f" for the whole run); at most {max(memory.live_bytes, default=0):,} bytes of buffers"
        f" are live at one position. The executable's allocations, with scratch and result"
        f" copies: {report.artefact_bytes:,} bytes.</div>",
        f'<div class="memory">{memory_svg}</div>',
        "<details><summary>allocations</summary><table><tr><th>#</th><th>kind</th>"
        "<th>bytes</th><th>holds</th></tr>",
    ]
    body += [
        f"<tr><td>{a.index}</td><td>{_e(a.kind)}</td><td class='num'>{a.size:,}</td>"
        f"<td>{_e(a.detail)}</td></tr>"
        for a in memory.allocations
    ]
    body += [
        "</table></details>",
        "<details><summary>schedule positions</summary><pre>"
        + _e("\n".join(f"{t:4d}  {name}" for t, name in enumerate(memory.schedule)))
        + "</pre></details>",
        '<h2 id="xla">Beside XLA:GPU</h2>',
    ]
    if report.xla_comparison is not None:
        body.append(f"<pre>{_e(report.xla_comparison)}</pre>")
    else:
        body.append(
            f'<div class="note" id="xla-note">No XLA comparison: {_e(report.xla_note)}</div>'
        )
    body += [
        '<h2 id="hlo">Optimized HLO</h2>',
        f"<details><summary>the module the thunks were emitted from"
        f" ({report.optimized_hlo.count(chr(10)) + 1} lines)</summary>"
        f"<pre>{_e(report.optimized_hlo)}</pre></details>",
        "</main>",
        f"<script>{_SCRIPT}</script>",
        "</body></html>",
    ]
    return "\n".join(body) + "\n"
