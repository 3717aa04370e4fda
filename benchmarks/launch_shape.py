"""What heron launches for the GPU bundle's workloads at GPU size, without a GPU (issues 28, 29).

    python benchmarks/launch_shape.py [--target h100] [--workloads matmul,mlp,...]

For each workload of ``gpu_bundle/bundle_workloads.py`` (the sizes issue 28's and
29's tables were measured at on an H200), jax lowers it from shapes alone and heron
prepares it for the target as ``compile_program`` does (simplification, the scan and
tree-reduction rewriters, library GEMM fusion and the fusion passes), then prints:
kernels, GEMM library calls (with their compute type and epilogue) against dot
fusions, cuDNN convolution and attention calls (forward and backward; a
training step's pair shows as a forward ``-> ... and f32[...] stats`` and a
backward ``..., reading the forward's o and stats``), the
reduce and reduce-window fusions with the fewest blocks (a reduction in fewer
blocks than the device has SMs leaves it idle) and the longest window any
kernel still computes per element (a quadratic scan's mark). The structural
facts the GPU gaps came from, measured on the CPU: nothing here is timed.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "gpu_bundle"))

import bundle_workloads  # noqa: E402


def _shape_of(workload) -> list:
    import jax

    return [jax.ShapeDtypeStruct(a.shape, bundle_workloads._dtype(a.dtype)) for a in workload.gpu]


def describe(workload, target) -> dict:
    """The launch facts of one workload (see the module docstring)."""
    from heron.compiler.executable import prepare_module
    from heron.compiler.library_attention import attention_call, is_library_attention
    from heron.compiler.library_attention_backward import (
        attention_backward_call,
        is_library_attention_backward,
    )
    from heron.compiler.library_convolution import convolution_call, is_library_convolution
    from heron.compiler.library_gemm import match_gemm
    from heron.emitters.fusion_analysis import analyse_fusion
    from heron.hlo.parser import parse_module
    from heron.jax.lowering import lower

    module = parse_module(lower(workload.function(), *_shape_of(workload)).hlo_text)
    optimized, _ = prepare_module(module, target)
    fusions = [i for i in optimized.instructions() if i.opcode == "fusion"]
    library, heron_gemms, reductions, windows = [], [], [], []
    for fusion in fusions:
        body = fusion.called("calls")
        opcodes = {i.opcode for i in body.instructions}
        if "dot" in opcodes:
            found = match_gemm(body, target)
            (heron_gemms if isinstance(found, str) else library).append(found)
        if "reduce" in opcodes:
            analysis = analyse_fusion(fusion, target)
            outputs = min(
                i.shape.leaves().__next__().num_elements
                for i in body.instructions
                if i.opcode == "reduce"
            )
            reductions.append((analysis.kind, outputs))
        for inst in body.instructions:
            if inst.opcode == "reduce-window":
                windows.append(max(d.size for d in inst.attr("window").dims))
    convolutions = [
        f"{target.dnn_library}: {convolution_call(inst, target).describe()}"
        for inst in optimized.instructions()
        if is_library_convolution(inst)
    ]
    convolutions += [
        f"{target.fused_attention_library}: {attention_call(inst).describe()}"
        for inst in optimized.instructions()
        if is_library_attention(inst)
    ]
    convolutions += [
        f"{target.fused_attention_library}: {attention_backward_call(inst).describe()}"
        for inst in optimized.instructions()
        if is_library_attention_backward(inst)
    ]
    return {
        "kernels": len(fusions),
        "library": [call.call.describe() for call in library] + convolutions,
        "heron_gemm": heron_gemms,
        "fewest_reduce_outputs": min((n for _, n in reductions), default=None),
        "longest_window": max(windows, default=None),
    }


def main(argv: list[str] | None = None) -> int:
    from heron.compiler import Target

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--target", default="h100")
    parser.add_argument("--workloads", help="comma-separated names (default: all)")
    args = parser.parse_args(argv)
    target = Target.preset(args.target)
    names = set(args.workloads.split(",")) if args.workloads else None
    print(
        f"target {target.name}: {target.core_count} SMs; libraries {target.gemm_library}"
        f" {target.dnn_library}".rstrip()
    )
    columns = (
        "workload",
        "kernels",
        "library calls",
        "heron GEMM kernels",
        "fewest reduce outputs",
        "longest window",
    )
    print("| " + " | ".join(columns) + " |")
    print("|" + "---|" * len(columns))
    for workload in bundle_workloads.WORKLOADS:
        if names is not None and workload.name not in names:
            continue
        facts = describe(workload, target)
        calls = "; ".join(facts["library"]) or "-"
        heron = "; ".join(facts["heron_gemm"]) or "-"
        print(
            f"| {workload.name} | {facts['kernels']} | {calls} | {heron} |"
            f" {facts['fewest_reduce_outputs'] or '-'} | {facts['longest_window'] or '-'} |"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
