"""Kernels over more than 2^31 elements, checked where their index arithmetic is widest.

A GPU with 141 GB runs tensors of more than 2^31 elements (bf16 logits of 8,192 tokens
by a 262,144-word vocabulary are 2^31), and there every offset past 2^31 must stay in
64-bit arithmetic: ``narrow-index-types`` narrows what the ranges allow, and a wrong
range would wrap an offset silently. The interpreter cannot run such a launch whole,
so each program here goes through heron's pipeline (``prepare_module`` for the h100
preset), then each of its kernels runs on the interpreter with only its first and
last blocks (``InterpreterDevice(sampled_blocks=K, count_accesses=False)``); every
element those blocks wrote is compared with the reference evaluator's value of the
same fusion (or, where the evaluator would need tens of GB for an iota, with the
case's own numpy formula at those elements), and each output's last element must be
among them.

The shapes are u8 (2 GB an array); a case takes 10-40 s and up to 11 GB of memory,
too much for CI: run it by hand, one case or all::

    python tests/fuzz/large_indices.py [--cases elementwise,full_sum,...] [--sample 3]

It prints one line per kernel (elements compared, elements wrong) and exits 1 when
an element is wrong or a last element was not written. docs/reliability.md has what
it found.
"""

from __future__ import annotations

import argparse
import sys
import time
from collections.abc import Callable, Sequence

import attrs
import numpy as np

from heron.compiler import compile_fusion, run_on_device
from heron.compiler.executable import prepare_module
from heron.hlo.evaluator.interpreter import evaluate_computation
from heron.hlo.ir import Instruction
from heron.hlo.parser import parse_module
from heron.runtime.interpreter.device import POISON, InterpreterDevice
from heron.target import Target

#: Elements of the one-dimensional cases: past 2^31 by 32M.
N = 2**31 + 2**25
#: Two-dimensional cases: 65,536 x 40,000 = 2.6e9 elements.
ROWS, COLUMNS = 65536, 40000

Expect = Callable[[Sequence[np.ndarray], np.ndarray], np.ndarray]


@attrs.frozen
class Case:
    """A program over u8 parameters of ``shapes``; ``expect(arguments, flat_positions)``
    gives its single kernel's values at those positions where the evaluator cannot."""

    hlo: str
    shapes: tuple[tuple[int, ...], ...]
    expect: Expect | None = None


def _causal(arguments: Sequence[np.ndarray], at: np.ndarray) -> np.ndarray:
    rows, columns = at // COLUMNS, at % COLUMNS
    return np.where(rows >= columns, arguments[0].reshape(-1)[at], 0).astype(np.uint8)


_ADD = "add { a = u8[] parameter(0) b = u8[] parameter(1) ROOT s = u8[] add(a, b) }"

CASES: dict[str, Case] = {
    "elementwise": Case(
        f"""HloModule m
ENTRY e {{ p = u8[{N}] parameter(0) c = u8[] constant(3) b = u8[{N}] broadcast(c), dimensions={{}}
  ROOT a = u8[{N}] add(p, b) }}""",
        ((N,),),
        lambda arguments, at: arguments[0][at] + np.uint8(3),
    ),
    "iota": Case(
        f"""HloModule m
ENTRY e {{ p = u8[{N}] parameter(0) i = u8[{N}] iota(), iota_dimension=0
  ROOT a = u8[{N}] add(p, i) }}""",
        ((N,),),
        lambda arguments, at: ((arguments[0][at].astype(np.int64) + at) % 256).astype(np.uint8),
    ),
    "reverse": Case(
        f"""HloModule m
ENTRY e {{ p = u8[{N}] parameter(0) ROOT r = u8[{N}] reverse(p), dimensions={{0}} }}""",
        ((N,),),
    ),
    "pad": Case(
        f"""HloModule m
ENTRY e {{ p = u8[{N - 1000}] parameter(0) z = u8[] constant(9)
  ROOT r = u8[{N}] pad(p, z), padding=500_500 }}""",
        ((N - 1000,),),
    ),
    "concatenate": Case(
        f"""HloModule m
ENTRY e {{ a = u8[{2**30 + 7}] parameter(0) b = u8[{2**30 + 2**25}] parameter(1)
  ROOT c = u8[{2**31 + 2**25 + 7}] concatenate(a, b), dimensions={{0}} }}""",
        ((2**30 + 7,), (2**30 + 2**25,)),
    ),
    "full_sum": Case(
        f"""HloModule m
{_ADD}
ENTRY e {{ p = u8[{N}] parameter(0) z = u8[] constant(0)
  ROOT r = u8[] reduce(p, z), dimensions={{0}}, to_apply=add }}""",
        ((N,),),
    ),
    "long_rows": Case(
        f"""HloModule m
{_ADD}
ENTRY e {{ p = u8[3,{2**30 + 2**20}] parameter(0) z = u8[] constant(0)
  ROOT r = u8[3] reduce(p, z), dimensions={{1}}, to_apply=add }}""",
        ((3, 2**30 + 2**20),),
    ),
    "column_sum": Case(
        f"""HloModule m
{_ADD}
ENTRY e {{ p = u8[139264,16384] parameter(0) z = u8[] constant(0)
  ROOT r = u8[16384] reduce(p, z), dimensions={{0}}, to_apply=add }}""",
        ((139264, 16384),),
    ),
    "causal_mask": Case(
        f"""HloModule m
ENTRY e {{ p = u8[{ROWS},{COLUMNS}] parameter(0)
  r = s32[{ROWS},{COLUMNS}] iota(), iota_dimension=0
  c = s32[{ROWS},{COLUMNS}] iota(), iota_dimension=1
  m = pred[{ROWS},{COLUMNS}] compare(r, c), direction=GE z = u8[] constant(0)
  zb = u8[{ROWS},{COLUMNS}] broadcast(z), dimensions={{}}
  ROOT s = u8[{ROWS},{COLUMNS}] select(m, p, zb) }}""",
        ((ROWS, COLUMNS),),
        _causal,
    ),
    "transpose": Case(
        """HloModule m
ENTRY e { p = u8[49152,49152] parameter(0)
  ROOT t = u8[49152,49152] transpose(p), dimensions={1,0} }""",
        ((49152, 49152),),
    ),
    "dynamic_update_slice": Case(
        """HloModule m
ENTRY e { p = u8[139264,16384] parameter(0) u = u8[4,16384] parameter(1) i = s32[] constant(139260)
  z = s32[] constant(0) ROOT d = u8[139264,16384] dynamic-update-slice(p, u, i, z) }""",
        ((139264, 16384), (4, 16384)),
    ),
    "gather": Case(
        """HloModule m
ENTRY e { p = u8[139264,16384] parameter(0)
  i = s32[4,1] constant({{139263}, {139262}, {0}, {139263}})
  ROOT g = u8[4,16384] gather(p, i), offset_dims={1}, collapsed_slice_dims={0}, start_index_map={0},
  index_vector_dim=1, slice_sizes={1,16384} }""",
        ((139264, 16384),),
    ),
    "scatter_add": Case(
        f"""HloModule m
{_ADD}
ENTRY e {{ p = u8[139264,16384] parameter(0) i = s32[2,1] constant({{{{139263}}, {{139261}}}})
  u = u8[2,16384] parameter(1)
  ROOT s = u8[139264,16384] scatter(p, i, u), update_window_dims={{1}},
  inserted_window_dims={{0}}, scatter_dims_to_operand_dims={{0}}, index_vector_dim=1,
  to_apply=add }}""",
        ((139264, 16384), (2, 16384)),
    ),
}


def arguments_for(case: Case) -> list[np.ndarray]:
    """Zeros with random values in the first 4,096 and the last 4M elements: the pages
    between are never written, so an argument costs what it holds."""
    rng = np.random.default_rng(0)
    arguments = []
    for shape in case.shapes:
        array = np.zeros(shape, np.uint8)
        flat = array.reshape(-1)
        head, tail = min(4096, flat.size), min(2**22, flat.size)
        flat[:head] = rng.integers(0, 160, head)
        flat[-tail:] = rng.integers(0, 160, tail)
        arguments.append(array)
    return arguments


def run_case(name: str, case: Case, device: InterpreterDevice, target: Target) -> bool:
    """Run ``case`` kernel by kernel; whether every compared element was right."""
    module, _ = prepare_module(parse_module(case.hlo), target)
    arguments = arguments_for(case)
    values: dict[Instruction, object] = {
        p: arguments[k] for k, p in enumerate(module.entry.parameters)
    }
    good = True
    for inst in module.entry.instructions:
        if inst.opcode == "parameter":
            continue
        operands = [values[o] for o in inst.operands]
        if inst.opcode != "fusion":
            values[inst] = _top_level(inst, operands)
            continue
        start = time.perf_counter()
        kernel = compile_fusion(inst, target, "interpreter")
        run = run_on_device(device, kernel, operands)
        seconds = time.perf_counter() - start
        launch = f"{kernel.grid[0] * kernel.grid[1] * kernel.grid[2]}x{kernel.block[0]}"
        if case.expect is not None:
            outputs = [np.asarray(run.outputs[0]).reshape(-1)]
            want = None
        else:
            want = evaluate_computation(inst.called("calls"), operands)
            outputs = [np.asarray(o) for o in run.outputs]
        wants = want if isinstance(want, tuple) else [want]
        for k, got in enumerate(outputs):
            flat = got.reshape(-1)
            if k in kernel.output_aliases:  # in place: it starts as its operand, all "written"
                written = np.ones(flat.size, bool)
            else:
                raw = flat.view(np.uint8).reshape(flat.size, -1)
                written = np.any(raw != POISON, axis=1)
            if case.expect is not None:
                at = np.flatnonzero(written)
                wrong_at = at[flat[at] != case.expect(operands, at)]
            else:
                expected = np.asarray(wants[k]).reshape(-1)
                wrong_at = np.flatnonzero(written & (flat != expected))
            last_written = bool(written[-1])
            print(
                f"  {inst.name}[{k}] {kernel.emitter} {launch}: {flat.size} elements,"
                f" {np.count_nonzero(written)} written by the blocks run, {wrong_at.size} wrong"
                f"{'' if last_written else ', THE LAST ELEMENT NOT WRITTEN'} ({seconds:.1f} s)",
                flush=True,
            )
            if wrong_at.size:
                print(f"    first wrong at {wrong_at[:5].tolist()}: {flat[wrong_at[:5]].tolist()}")
            good = good and wrong_at.size == 0 and last_written
        values[inst] = want
    return good


def _top_level(inst: Instruction, operands: list) -> object:
    """A top-level instruction between kernels (a constant, a copy, a bitcast, a tuple, an
    element of one)."""
    if inst.opcode == "constant":
        return np.asarray(inst.literal)
    if inst.opcode == "copy":
        return np.array(operands[0])
    if inst.opcode == "bitcast":
        return np.asarray(operands[0]).reshape(inst.shape.dims)
    if inst.opcode == "get-tuple-element":
        return operands[0][inst.attributes["index"]]
    if inst.opcode == "tuple":
        return tuple(operands)
    raise SystemExit(f"large_indices: {inst.opcode} '{inst.name}' between kernels is not run here")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--cases", help=f"comma-separated, of: {', '.join(CASES)} (default all)")
    parser.add_argument(
        "--sample",
        type=int,
        default=1024,
        help="blocks run at each end of a launch of more than twice as many (1024)",
    )
    options = parser.parse_args(argv)
    names = options.cases.split(",") if options.cases else list(CASES)
    unknown = [n for n in names if n not in CASES]
    if unknown:
        parser.error(f"no case {', '.join(unknown)} (there are: {', '.join(CASES)})")
    target = Target.preset("h100")
    device = InterpreterDevice(
        warp_size=target.warp_size, sampled_blocks=options.sample, count_accesses=False
    )
    failed = []
    for name in names:
        print(name, flush=True)
        if not run_case(name, CASES[name], device, target):
            failed.append(name)
    print(
        f"{len(names) - len(failed)} of {len(names)} cases right"
        + (f"; wrong: {', '.join(failed)}" if failed else "")
    )
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
