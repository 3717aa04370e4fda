"""The buffer assignment as memory over time: the picture's data, and its SVG.

x is the position in the flattened schedule (``Liveness.sequence``: the
entry, with loop and branch computations numbered just before the
instruction that runs them), y is bytes. The allocations are stacked in
their order (parameters, constants, outputs, then the one temporary block),
each a band as high as its size: every allocation is held for the whole run,
so the top of the stack is the buffer assignment's peak
(``BufferAssignment.total_bytes``), marked with its value. Inside each band,
every buffer is a rectangle at its offset in the allocation, from the first
to the last position its bytes are needed: temporaries that reuse bytes
stack in time, not in height. A line traces the bytes live at each position.
"""

from __future__ import annotations

import html

from heron.hlo.buffers import BufferAssignment
from heron.report.model import Allocation, MemoryBlock, MemoryPicture

__all__ = ["KIND_COLOURS", "memory_picture", "memory_svg"]

KIND_COLOURS = {
    "parameter": "#5c9bd5",
    "constant": "#a0a0a0",
    "output": "#70ad47",
    "temp": "#f0a030",
}


def memory_picture(assignment: BufferAssignment) -> MemoryPicture:
    """The picture's data from ``assignment`` (nothing recomputed: its allocations,
    chunks and live ranges)."""
    buffers = assignment.flow.buffers()
    sequence = assignment.liveness.sequence
    allocations = []
    blocks = []
    base = 0
    ranges = [assignment.live_range(b) for a in assignment.allocations for b in a.chunks]
    live = [0] * max([len(sequence), *(r.end + 1 for r in ranges)])
    for allocation in assignment.allocations:
        names = []
        for buffer, chunk in sorted(allocation.chunks.items(), key=lambda i: (i[1].offset, i[0])):
            span = assignment.live_range(buffer)
            label = ", ".join(dict.fromkeys(v.instruction.name for v in buffers[buffer]))
            names.append(label)
            blocks.append(
                MemoryBlock(
                    allocation.index,
                    allocation.kind,
                    label,
                    base + chunk.offset,
                    chunk.size,
                    span.start,
                    span.end,
                )
            )
            for t in range(max(span.start, 0), span.end + 1):
                live[t] += chunk.size
        detail = names[0] if len(names) == 1 else f"{len(names)} buffers"
        allocations.append(
            Allocation(allocation.index, allocation.kind, allocation.size, base, detail)
        )
        base += allocation.size
    # Outputs are live past the last instruction (the caller reads them).
    last = max((block.end for block in blocks), default=0)
    return MemoryPicture(
        positions=max(len(sequence), last + 1, 1),
        allocations=tuple(allocations),
        blocks=tuple(blocks),
        peak_bytes=assignment.total_bytes,
        live_bytes=tuple(live),
        schedule=tuple(inst.name for inst in sequence),
    )


#: About the width of one character of the blocks' labels, in pixels.
_CHARACTER_WIDTH = 6


def _bytes(n: int) -> str:
    return f"{n:,} bytes"


def _short(n: int) -> str:
    for unit, size in (("GiB", 1 << 30), ("MiB", 1 << 20), ("KiB", 1 << 10)):
        if n >= size:
            return f"{n / size:.3g} {unit}"
    return f"{n} B"


def memory_svg(picture: MemoryPicture, width: int = 1100, height: int = 380) -> str:
    """The picture as an inline ``<svg id="memory-picture">`` with ``data-peak-bytes``."""
    left, right, top, bottom = 80, 24, 34, 46
    plot_w, plot_h = width - left - right, height - top - bottom
    peak = max(picture.peak_bytes, 1)
    positions = picture.positions

    def x(t: float) -> float:
        return left + plot_w * t / positions

    def y(b: float) -> float:
        return top + plot_h * (1 - b / peak)

    out = [
        f'<svg id="memory-picture" xmlns="http://www.w3.org/2000/svg" width="{width}"'
        f' height="{height}" viewBox="0 0 {width} {height}" role="img"'
        f' data-peak-bytes="{picture.peak_bytes}" font-family="Helvetica, Arial, sans-serif"'
        ' font-size="11">',
        f'<rect x="{left}" y="{top}" width="{plot_w}" height="{plot_h}" fill="#fbfcfd"'
        ' stroke="#d9e2ec"/>',
    ]
    for allocation in picture.allocations:
        colour = KIND_COLOURS.get(allocation.kind, "#cccccc")
        y0, y1 = y(allocation.base + allocation.size), y(allocation.base)
        title = html.escape(
            f"allocation {allocation.index} ({allocation.kind}): {_bytes(allocation.size)}"
            f" — {allocation.detail}"
        )
        out.append(
            f'<rect class="allocation" x="{left}" y="{y0:.2f}" width="{plot_w}"'
            f' height="{max(y1 - y0, 0.5):.2f}" fill="{colour}" fill-opacity="0.12"'
            f' stroke="{colour}" stroke-opacity="0.5" stroke-width="0.6">'
            f"<title>{title}</title></rect>"
        )
    for block in picture.blocks:
        colour = KIND_COLOURS.get(block.kind, "#cccccc")
        x0, x1 = x(block.start), x(block.end + 1)
        y0, y1 = y(block.y + block.size), y(block.y)
        title = html.escape(
            f"{block.label}: {_bytes(block.size)} in allocation {block.allocation}"
            f" ({block.kind}), live at positions {block.start}..{block.end}"
        )
        out.append(
            f'<rect class="buffer" x="{x0:.2f}" y="{y0:.2f}" width="{max(x1 - x0, 1):.2f}"'
            f' height="{max(y1 - y0, 1):.2f}" fill="{colour}" fill-opacity="0.85"'
            f' stroke="#ffffff" stroke-width="0.5"><title>{title}</title></rect>'
        )
        if x1 - x0 >= _CHARACTER_WIDTH * (len(block.label) + 2) and y1 - y0 >= 14:
            out.append(
                f'<text x="{x0 + 4:.2f}" y="{(y0 + y1) / 2 + 4:.2f}" fill="#102a43"'
                f' font-size="10.5">{html.escape(block.label)}</text>'
            )
    if picture.live_bytes:
        points = []
        for t, value in enumerate(picture.live_bytes):
            points.append(f"{x(t):.2f},{y(value):.2f}")
            points.append(f"{x(t + 1):.2f},{y(value):.2f}")
        most = max(picture.live_bytes)
        out.append(
            f'<polyline class="live-bytes" points="{" ".join(points)}" fill="none"'
            ' stroke="#243b53" stroke-width="1.4"><title>'
            f"bytes live at each position (at most {most:,})</title></polyline>"
        )
    # The peak: the top of the stack, the buffer assignment's total.
    py = y(picture.peak_bytes)
    out.append(
        f'<line id="memory-peak" x1="{left}" x2="{left + plot_w}" y1="{py:.2f}" y2="{py:.2f}"'
        ' stroke="#d64545" stroke-width="1.6" stroke-dasharray="6 3"/>'
    )
    out.append(
        f'<text x="{left + plot_w}" y="{py - 8:.2f}" text-anchor="end" fill="#d64545"'
        f' font-weight="bold" font-size="12">peak {_bytes(picture.peak_bytes)}'
        " (buffer assignment)</text>"
    )
    # Axes: bytes on the left, schedule positions below.
    for fraction in (0, 0.25, 0.5, 0.75, 1):
        value = picture.peak_bytes * fraction
        ty = y(value)
        out.append(
            f'<line x1="{left - 4}" x2="{left}" y1="{ty:.2f}" y2="{ty:.2f}" stroke="#627d98"/>'
        )
        out.append(
            f'<text x="{left - 7}" y="{ty + 4:.2f}" text-anchor="end" fill="#486581">'
            f"{_short(int(value))}</text>"
        )
    step = max(1, round(positions / 10))
    for t in range(0, positions + 1, step):
        tx = x(t)
        out.append(
            f'<line x1="{tx:.2f}" x2="{tx:.2f}" y1="{top + plot_h}" y2="{top + plot_h + 4}"'
            ' stroke="#627d98"/>'
        )
        out.append(
            f'<text x="{tx:.2f}" y="{top + plot_h + 16}" text-anchor="middle"'
            f' fill="#486581">{t}</text>'
        )
    out.append(
        f'<text x="{left + plot_w / 2}" y="{height - 8}" text-anchor="middle" fill="#334e68">'
        "schedule position</text>"
    )
    out.append(
        f'<text x="14" y="{top + plot_h / 2}" text-anchor="middle" fill="#334e68"'
        f' transform="rotate(-90 14 {top + plot_h / 2})">bytes</text>'
    )
    legend_x = left
    for kind, colour in KIND_COLOURS.items():
        out.append(
            f'<rect x="{legend_x}" y="10" width="12" height="12" fill="{colour}"'
            ' fill-opacity="0.85"/>'
        )
        out.append(f'<text x="{legend_x + 16}" y="20" fill="#243b53">{kind}</text>')
        legend_x += 96
    out.append(f'<line x1="{legend_x}" x2="{legend_x + 18}" y1="16" y2="16" stroke="#243b53"/>')
    out.append(f'<text x="{legend_x + 22}" y="20" fill="#243b53">bytes live</text>')
    out.append("</svg>")
    return "\n".join(out)
