"""``heron profile FILE.hlo [--fusion NAME] [--target h100] [--json]``: profile on the interpreter.

Runs each kernel of the module on the interpreter with an access recorder
and prints, per kernel, what a profiler would report: coalescing (32-byte
sectors per warp request against the ideal), unique DRAM bytes, the vector
width achieved, shared-memory bank conflicts, occupancy from ``ptxas -v``
and the Target, and a roofline estimate (:mod:`heron.harness.profile`;
docs/profile.md maps each number to Nsight Compute's).
"""

from __future__ import annotations

import argparse
import json

from heron.cli.common import (
    CommandError,
    add_target_arguments,
    load_module,
    refuse_tiled_layouts,
    resolve_target,
)


def register(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser(
        "profile",
        help="run each kernel on the interpreter and report coalescing, bank conflicts,"
        " occupancy and a roofline estimate",
        description=(
            "Run every kernel of an HLO module on the interpreter device, recording each"
            " warp's memory requests, and print per kernel: global bytes requested, 32-byte"
            " sectors per request against the ideal, unique DRAM bytes, bytes per lane,"
            " shared-memory bank conflicts, occupancy (ptxas -v and the Target) and a"
            " roofline estimate for the Target (docs/profile.md)."
        ),
    )
    parser.add_argument("file", metavar="FILE.hlo", help="HLO text, as XLA or JAX dump it")
    parser.add_argument("--fusion", metavar="NAME", help="report only this fusion")
    add_target_arguments(parser, "the kernels are compiled for and the profile models")
    parser.add_argument("--json", action="store_true", help="print the profile as JSON")
    parser.add_argument(
        "--seed", type=int, default=0, help="seed of the random arguments (default 0)"
    )
    parser.add_argument(
        "--max-blocks",
        type=_positive,
        metavar="N",
        help="profile each fusion alone, on its own random inputs, for its first N blocks only"
        " (large kernels; the roofline scales the sample to the grid)",
    )
    parser.set_defaults(handler=run)


def _positive(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        value = 0
    if value <= 0:
        raise argparse.ArgumentTypeError(f"expected a positive number of blocks, got {text!r}")
    return value


def run(args: argparse.Namespace) -> int:
    from heron.harness.profile import profile_module
    from heron.runtime.core.device import DeviceError

    module = load_module(args.file)
    refuse_tiled_layouts(module, "heron profile")
    target = resolve_target(args)
    try:
        profiles = profile_module(
            module, target, fusion=args.fusion, seed=args.seed, max_blocks=args.max_blocks
        )
    except DeviceError as exc:  # a sanitizer finding, an op the interpreter cannot run
        raise CommandError(f"the interpreter device failed: {exc}") from exc
    if args.json:
        document = {
            "module": module.name,
            "target": target.name,
            "kernels": [p.as_dict() for p in profiles],
        }
        print(json.dumps(document, indent=2))
        return 0
    print(f"module {module.name}: target {target.summary()}")
    for profile in profiles:
        for line in describe(profile, target):
            print(line)
    return 0


def _ratio(value: float) -> str:
    return f"{value:.2f}".rstrip("0").rstrip(".")


def describe(profile, target) -> list[str]:
    """The text report of one kernel."""
    rec = profile.recorder
    grid = "x".join(map(str, profile.grid))
    block = "x".join(map(str, profile.block))
    blocks = profile.grid[0] * profile.grid[1] * profile.grid[2]
    sample = (
        f" (sampled: the first {rec.blocks_run} blocks of {blocks})"
        if rec.blocks_run < blocks
        else ""
    )
    lines = [
        f"kernel {profile.kernel} (fusion {profile.fusion}, emitter {profile.emitter}):"
        f" grid {grid}, block {block}, {rec.warps_launched} warps run{sample}"
    ]
    for kind in ("load", "store", "atomic"):
        stats = rec.stats("global", kind)
        if not stats.requests:
            continue
        efficiency = stats.ideal_sectors / stats.sectors if stats.sectors else 1.0
        widths = ", ".join(f"{w} B x {n}" for w, n in sorted(stats.widths.items()))
        lines.append(
            f"  global {kind}s: {stats.requests} requests, {stats.bytes_requested} B requested,"
            f" {_ratio(stats.sectors_per_request)} sectors/request"
            f" (ideal {_ratio(stats.ideal_sectors_per_request)}, {efficiency:.0%}),"
            f" {_ratio(stats.bytes_per_lane)} B/lane ({widths})"
        )
    for kind in ("load", "store", "atomic"):
        stats = rec.stats("workgroup", kind)
        if not stats.requests:
            continue
        lines.append(
            f"  shared {kind}s: {stats.requests} requests, {stats.bank_conflicts} bank conflicts"
            f" ({_ratio(stats.bank_conflicts / stats.requests)}/request),"
            f" {_ratio(stats.bytes_per_lane)} B/lane"
        )
    for buffer in rec.buffers():
        lines.append(
            f"  buffer {buffer['name']}: {buffer['unique_bytes']} unique B"
            f" (read {buffer['unique_bytes_read']}, written {buffer['unique_bytes_written']}),"
            f" {buffer['unique_sectors']} sectors"
        )
    res = profile.resources
    if res.registers is not None:
        spills = f", spills {res.spill_stores}/{res.spill_loads}" if res.spill_stores else ""
        lines.append(
            f"  resources: {res.registers} registers, {res.shared_memory} B shared{spills},"
            f" {res.ptx_instructions} PTX instructions"
        )
    else:
        lines.append(f"  resources: {res.note}")
    occ = profile.occupancy
    limits = ", ".join(f"{k} {v}" for k, v in occ.limits.items())
    note = f"; {occ.note}" if occ.note else ""
    lines.append(
        f"  occupancy: {occ.theoretical:.0%} theoretical ({occ.blocks_per_core} blocks/core,"
        f" limited by {occ.limiter}; {limits}), {occ.grid_limited:.0%} with this grid{note}"
    )
    roof = profile.roofline
    lines.append(
        f"  roofline ({target.name}): DRAM {roof.dram_bytes} B"
        f" -> {roof.memory_seconds * 1e6:.3f} us,"
        f" issue {roof.warp_instructions} warp instructions -> {roof.issue_seconds * 1e6:.3f} us,"
        f" launch {roof.launch_seconds * 1e6:.3f} us; estimate {roof.estimate_seconds * 1e6:.3f} us"
        f" ({roof.bound} bound), {roof.bandwidth_fraction:.0%} of the bandwidth bound"
    )
    lines.append(
        f"  arithmetic: {roof.flops} FLOPs -> {roof.compute_seconds * 1e6:.3f} us at the"
        f" {roof.peak} peak, intensity {roof.arithmetic_intensity:.2f} FLOP/B"
    )
    return lines
