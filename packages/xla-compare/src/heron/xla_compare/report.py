"""A comparison as text (``heron xla``) or JSON (``heron xla --json``, the reference table)."""

from __future__ import annotations

from heron.xla_compare.compare import Comparison, Pair
from heron.xla_compare.heron_side import HeronKernel
from heron.xla_compare.xla_side import XlaKernel


def launch_text(blocks: int, threads: int) -> str:
    """``blocks x threads`` (``2x128``), the form of the exceptions table in docs/emitters.md."""
    return f"{blocks}x{threads}"


def kernel_record(kernel: HeronKernel | XlaKernel | None) -> dict | None:
    """One side of a pair as plain data (None for a missing side)."""
    if kernel is None:
        return None
    if isinstance(kernel, HeronKernel):
        record: dict = {"fusion": kernel.fusion, "kernel": kernel.kernel, "emitter": kernel.emitter}
        if kernel.library:
            record["library"] = kernel.library
            return record
        if kernel.error:
            record["error"] = kernel.error
            return record
        record["seconds"] = round(kernel.seconds, 4)
    else:
        record = {"fusion": kernel.fusion, "kernel": kernel.name, "emitter": kernel.emitter}
    record["grid"] = list(kernel.grid)
    record["block"] = list(kernel.block)
    record["launch"] = launch_text(kernel.blocks, kernel.threads)
    if isinstance(kernel, XlaKernel):
        record["dynamic_shared_memory"] = kernel.shared_memory
    if kernel.resources is not None:
        record.update(kernel.resources.as_dict())
    if kernel.stats is not None:
        stats = kernel.stats.as_dict()
        stats.pop("name")
        record.update(stats)
    if kernel.sass is not None:
        record.update(kernel.sass.as_dict())
    return record


def pair_record(pair: Pair) -> dict:
    return {
        "heron": kernel_record(pair.heron),
        "xla": kernel_record(pair.xla),
        "same_launch": pair.same_launch,
    }


def comparison_record(comparison: Comparison) -> dict:
    xla = comparison.xla
    return {
        "file": comparison.file,
        "target": comparison.target,
        "xla": None
        if xla is None
        else {
            "plugin": f"jax-cuda13-pjrt {xla.plugin_version}",
            "jaxlib": xla.jaxlib_version,
            "pjrt_api": xla.pjrt_api,
            "seconds": round(xla.seconds, 4),
        },
        "xla_error": comparison.xla_error,
        "ptxas": comparison.ptxas,
        "nvdisasm": comparison.nvdisasm,
        "pairs": [pair_record(p) for p in comparison.pairs],
        "notes": comparison.notes,
    }


def _widths(widths: dict[str, int]) -> str:
    total = sum(widths.values())
    if not widths:
        return "0"
    parts = ", ".join(f"{w}b:{n}" for w, n in sorted(widths.items(), key=lambda i: -int(i[0])))
    return f"{total} ({parts})"


def _rows(record: dict | None) -> dict[str, str]:
    if record is None:
        return {}
    if "error" in record:
        return {"hero / emitter": f"refused: {record['error']}"}
    if "library" in record:
        return {"hero / emitter": f"library call ({record['library']}), no kernel"}
    rows = {
        "kernel": record["kernel"],
        "hero / emitter": record["emitter"],
        "launch (blocks x threads)": record["launch"],
        "grid / block": f"{record['grid']} / {record['block']}",
    }
    if "registers" in record:
        dynamic = record.get("dynamic_shared_memory") or 0
        rows["shared memory"] = f"{record['shared_memory']} B" + (
            f" + {dynamic} B dynamic" if dynamic else ""
        )
        rows["registers"] = str(record["registers"])
        rows["spills (stores/loads)"] = f"{record['spill_stores']}/{record['spill_loads']} B"
    if "instructions" in record:
        rows["PTX instructions"] = str(record["instructions"])
        rows["global loads (width:count)"] = _widths(record["global_loads"])
        rows[".nc loads"] = str(record["nc_loads"])
        rows["global stores (width:count)"] = _widths(record["global_stores"])
        rows["shared loads/stores"] = f"{record['shared_loads']}/{record['shared_stores']}"
        rows["atomics"] = str(record["atomics"])
        rows["shuffles"] = str(record["shuffles"])
        rows["barriers"] = str(record["barriers"])
        rows["fma / approx"] = f"{record['fma']}/{record['approx']}"
    if "sass_instructions" in record:
        rows["SASS instructions"] = str(record["sass_instructions"])
        rows["SASS in slow paths / calls"] = (
            f"{record['sass_subroutine_instructions']}/{record['sass_calls']}"
        )
        rows["SASS branches"] = str(record["sass_branches"])
        mufu = record["sass_mufu"]
        rows["MUFU"] = f"{sum(mufu.values())}" + (
            f" ({', '.join(f'{k}:{n}' for k, n in mufu.items())})" if mufu else ""
        )
        rows["SASS global loads"] = _widths(record["sass_global_loads"])
        rows["SASS global stores"] = _widths(record["sass_global_stores"])
        rows["SASS atomics"] = _widths(record["sass_atomics"])
        rows["SASS local accesses"] = str(record["sass_local"])
    return rows


def format_comparison(comparison: Comparison) -> str:
    """The side-by-side text ``heron xla`` prints."""
    record = comparison_record(comparison)
    lines = [f"{comparison.file} for {comparison.target}"]
    xla = record["xla"]
    if xla is not None:
        lines.append(
            f"XLA:GPU {xla['plugin']} (jaxlib {xla['jaxlib']}, PJRT C API {xla['pjrt_api']}):"
            f" the whole module compiled in {xla['seconds'] * 1000:.0f} ms (a fresh process's"
            " first compile: benchmarks/opt_time.py times warm ones)"
        )
    else:
        lines.append(f"XLA: error: {comparison.xla_error}")
    if comparison.ptxas:
        lines.append(f"ptxas -v for both sides: {comparison.ptxas}")
    if comparison.nvdisasm:
        lines.append(f"SASS of both sides: {comparison.nvdisasm}")
    for pair in record["pairs"]:
        heron, xla_kernel = pair["heron"], pair["xla"]
        left = f"heron fusion '{heron['fusion']}'" if heron else "(no heron fusion)"
        right = f"XLA kernel '{xla_kernel['kernel']}'" if xla_kernel else "(no XLA kernel)"
        lines += ["", f"{left}  <->  {right}"]
        heron_rows, xla_rows = _rows(heron), _rows(xla_kernel)
        if heron and "seconds" in heron:
            heron_rows["compile time"] = f"{heron['seconds'] * 1000:.0f} ms"
        if xla_kernel and xla is not None:
            xla_rows["compile time"] = f"{xla['seconds'] * 1000:.0f} ms (module)"
        keys = list(dict.fromkeys([*heron_rows, *xla_rows]))
        width = max(len(k) for k in keys) if keys else 0
        left_width = max([len("heron"), *(len(v) for v in heron_rows.values())])
        lines.append(f"  {'':{width}}  {'heron':{left_width}}  XLA")
        for key in keys:
            left_value = heron_rows.get(key, "-")
            right_value = xla_rows.get(key, "-")
            mark = ""
            if key.startswith("launch") and pair["same_launch"] is not None:
                mark = "   same" if pair["same_launch"] else "   DIFFERENT"
            both = key in heron_rows and key in xla_rows
            if key in ("PTX instructions", "SASS instructions") and both:
                ratio = int(left_value) / max(int(right_value), 1)
                mark = f"   heron/XLA {ratio:.2f}"
            lines.append(f"  {key:{width}}  {left_value:{left_width}}  {right_value}{mark}")
    lines.append("")
    lines += [f"note: {note}" for note in comparison.notes]
    return "\n".join(lines)
