"""Where a real-size model's work goes on heron and on XLA:GPU, without a GPU (issue 29).

    python benchmarks/model_launches.py [--bf16] [--only gpt2,resnet50] [--xla] [--idle-mib 4]

The GPU runs of issue 29 found heron slow where a kernel left the device idle (a
reduction in one block) or did work a library does better (GEMMs, convolutions). The
corpora's programs are small; this looks at the training steps of
``flax_models.MODELS`` (GPT-2 small, ResNet-50, ViT-B/16, ConvNeXt-T, a diffusion UNet,
at the sizes people train them), lowered for CUDA, and counts for heron's pipeline for
the h100 preset and, with ``--xla``, for XLA:GPU's deviceless compile of the same text:

- kernels launched, and library calls: GEMMs (cuBLASLt; XLA's Triton GEMM fusions
  counted beside its cuBLAS calls), convolutions and fused attention (cuDNN);
- the dot FLOPs heron leaves to its own kernels instead of a library (0 is the goal);
- the bytes the kernels move between DRAM and the SMs, both sides' fusions measured by
  one rule, heron's fusion cost model's (:func:`heron.compiler.fusion.cost_model.
  estimate_computation`: the distinct elements each kernel reads, at most each operand
  once, and its writes; library calls left out): a memory-bound step's time follows it,
  and a kernel split where XLA makes one shows here (the model's seconds are not
  printed: its re-reads from the cache are priced for heron's fusion decisions, and a
  Triton normalisation of XLA's, a reduce inside a loop body, reads as 10^14 bytes);
- idle kernels: launched in fewer blocks than the device has SMs while moving at least
  ``--idle-mib`` MiB (the one-block reduction issue 29 measured at 60x XLA's time).

Nothing is timed. Needs flax and optax beside heron[jax] (and heron[xla] or
``HERON_XLA_PYTHON`` for ``--xla``).
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import attrs

sys.path.insert(0, str(Path(__file__).resolve().parent))

from benchlib.selection import selected  # noqa: E402
from flax_models import MODELS  # noqa: E402

#: XLA's library calls in its optimized HLO, by what they compute.
_XLA_GEMM_TARGETS = ("__cublas$gemm", "__cublas$lt$matmul")
_XLA_DNN_PREFIX = "__cudnn$conv"
_XLA_ATTENTION_PREFIX = "__cudnn$fmha"


@attrs.define
class Side:
    """One compiler's account of a model's step."""

    kernels: int = 0
    gemm_calls: int = 0
    convolution_calls: int = 0
    attention_calls: int = 0
    own_gemm_gflop: float = 0.0
    #: DRAM bytes of the kernels, by the cost model
    kernel_bytes: float = 0.0
    #: kernels the cost model could not price (counted by their shapes' bytes)
    unpriced: int = 0
    #: (kernel name, blocks, bytes) of each idle kernel
    idle: list[tuple[str, int, int]] = attrs.field(factory=list)

    def idle_text(self) -> str:
        if not self.idle:
            return "0"
        largest = max(self.idle, key=lambda k: k[2])
        return f"{len(self.idle)} (largest {largest[2] / 2**20:.0f} MiB in {largest[1]} blocks)"


def _price(fusion, target, side: Side, threads: int) -> float:
    """Add the DRAM bytes of ``fusion``'s kernel (launched with ``threads`` threads) to
    ``side``'s, and return them."""
    from heron.compiler.fusion.cost_model import estimate_computation
    from heron.hlo.errors import HloError

    try:
        # tiled: bytes as they are, without the model's penalty for uncoalesced reads
        cost = estimate_computation(
            fusion.called("calls"), list(fusion.operands), target, threads=threads, tiled=True
        )
    except HloError:  # an op the cost model does not price: counted by its shapes, and said
        side.unpriced += 1
        moved = sum(
            leaf.num_elements * max(8, leaf.element_type.bit_width) // 8
            for shape in (*(o.shape for o in fusion.operands), fusion.shape)
            for leaf in shape.leaves()
        )
        side.kernel_bytes += moved
        return moved
    moved = cost.dram_bytes + cost.write_bytes
    side.kernel_bytes += moved
    return moved


def _dot_flops(dot) -> int:
    lhs = dot.operands[0].array_shape
    contracted = 1
    for d in dot.attr("lhs_contracting_dims"):
        contracted *= lhs.dims[int(d)]
    return 2 * dot.array_shape.num_elements * contracted


def heron_side(text: str, target, idle_bytes: int) -> Side:
    """heron's pipeline for ``target``: each fusion a library call or emitted (launch only)."""
    from heron.compiler import compile_fusion
    from heron.compiler.executable import prepare_module
    from heron.compiler.library_attention import is_library_attention
    from heron.compiler.library_attention_backward import is_library_attention_backward
    from heron.compiler.library_convolution import is_library_convolution
    from heron.compiler.library_gemm import gemm_fusion
    from heron.compiler.library_kernels import library_kernels_for
    from heron.hlo.parser import parse_module

    optimized, _ = prepare_module(parse_module(text), target)
    side = Side()
    for inst in optimized.instructions():
        if is_library_convolution(inst):
            side.convolution_calls += 1
        elif is_library_attention(inst) or is_library_attention_backward(inst):
            side.attention_calls += 1
        if inst.opcode != "fusion":
            continue
        if gemm_fusion(inst, target) is not None:
            side.gemm_calls += 1
            continue
        side.kernels += 1
        dots = [i for i in inst.called("calls").instructions if i.opcode == "dot"]
        side.own_gemm_gflop += sum(map(_dot_flops, dots)) / 1e9
        library = library_kernels_for(inst, target, ("cuda",))
        compiled = (library or {}).get("cuda") or compile_fusion(
            inst, target, "cuda", stop_after="emitted"
        )
        blocks = compiled.grid[0] * compiled.grid[1] * compiled.grid[2]
        threads = compiled.block[0] * compiled.block[1] * compiled.block[2]
        moved = _price(inst, target, side, blocks * threads)
        if blocks < target.core_count and moved >= idle_bytes:
            side.idle.append((inst.name, blocks, int(moved)))
    return side


def xla_side(text: str, target, idle_bytes: int) -> Side:
    """XLA:GPU's deviceless compile of ``text``: its thunk sequence, and its optimized HLO
    (parsed by heron, so that its fusions are priced as heron's are)."""
    from heron.hlo.parser import parse_module
    from heron.xla_compare import find_xla
    from heron.xla_compare.module_text import xla_module_text, xla_options
    from heron.xla_compare.targets import target_config
    from heron.xla_compare.xla_side import compile_with_xla

    module = parse_module(text)
    compiled = compile_with_xla(
        xla_module_text(module), target_config(target.name), find_xla(), xla_options(module)
    )
    optimized = parse_module(compiled.optimized_hlo)
    side = Side()
    fusions = {}
    for inst in optimized.instructions():
        if inst.opcode == "fusion":
            fusions[inst.name] = inst
        elif inst.opcode == "custom-call":
            target_attribute = inst.attributes.get("custom_call_target", "")
            called = str(getattr(target_attribute, "text", target_attribute))
            side.gemm_calls += called in _XLA_GEMM_TARGETS
            side.convolution_calls += called.startswith(_XLA_DNN_PREFIX)
            side.attention_calls += called.startswith(_XLA_ATTENTION_PREFIX)
    for kernel in compiled.kernels:
        if kernel.backend_kind and "gemm" in kernel.backend_kind:
            side.gemm_calls += 1  # a Triton GEMM fusion: XLA's GEMM without autotuning
            continue
        side.kernels += 1
        fusion = fusions.get(kernel.fusion or "")
        if fusion is None:
            side.unpriced += 1
            continue
        moved = _price(fusion, target, side, kernel.blocks * kernel.threads)
        if kernel.blocks < target.core_count and moved >= idle_bytes:
            side.idle.append((kernel.name, kernel.blocks, int(moved)))
    return side


def main(argv: list[str] | None = None) -> int:
    from heron.compiler import Target

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--bf16", action="store_true", help="activations in bf16")
    parser.add_argument("--only", help="comma-separated model names")
    parser.add_argument("--xla", action="store_true", help="also XLA:GPU's deviceless compile")
    parser.add_argument("--idle-mib", type=float, default=4.0)
    parser.add_argument("--list-idle", action="store_true", help="name every idle kernel")
    args = parser.parse_args(argv)
    names = selected(parser, args.only, MODELS, "model")
    target = Target.preset("h100")
    idle_bytes = int(args.idle_mib * 2**20)
    print(
        f"flax training steps, {'bf16 activations' if args.bf16 else 'f32'}; {target.name}"
        f" ({target.core_count} SMs); idle: fewer blocks than SMs moving >= {args.idle_mib:g} MiB"
    )
    columns = [
        "model",
        "compiler",
        "kernels",
        "GEMM calls",
        "conv calls",
        "attention calls",
        "own-kernel dot GFLOP",
        "kernel DRAM GiB",
        "idle kernels",
    ]
    print("| " + " | ".join(columns) + " |")
    print("|" + "---|" * len(columns))
    for name in names:
        text = MODELS[name](args.bf16)
        sides = [("heron", heron_side(text, target, idle_bytes))]
        if args.xla:
            sides.append(("XLA", xla_side(text, target, idle_bytes)))
        for compiler, side in sides:
            own = f"{side.own_gemm_gflop:.1f}" if compiler == "heron" else "-"
            print(
                f"| {name} | {compiler} | {side.kernels} | {side.gemm_calls} |"
                f" {side.convolution_calls} | {side.attention_calls} | {own} |"
                f" {side.kernel_bytes / 2**30:.2f} | {side.idle_text()} |",
                flush=True,
            )
            if side.unpriced:
                print(
                    f"    {compiler}: {side.unpriced} kernel(s) not priced by the cost model"
                    " (their bytes are their shapes', or none where no fusion matched)"
                )
            if args.list_idle:
                for kernel, blocks, moved in side.idle:
                    print(f"    idle {compiler}: {kernel} {blocks} blocks {moved / 2**20:.1f} MiB")
    return 0


if __name__ == "__main__":
    sys.exit(main())
