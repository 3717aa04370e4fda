"""Buffer assignment over every corpus program: both checkers.

Every program goes through copy insertion and the scheduler and is assigned;
no two buffers live at one time share a byte. Where the evaluator can run the
program, the simulated run through the assigned bytes gives its result bit for
bit; the few corpus programs with terabyte-sized shapes (codegen limit tests,
which the evaluator refuses by name) get the overlap check only.
"""

from __future__ import annotations

from heron.hlo.buffers import assign_buffers
from heron.hlo.buffers.check import overlapping_buffers
from heron.hlo.evaluator import EvaluatorOptions
from heron.hlo.evaluator.interpreter import shape_bytes
from heron.hlo.memory_layout import memory_bytes
from heron.hlo.parser import parse_module_file


def test_corpus_program_bytes_never_clash(corpus_file, check_buffers, prepare_buffers) -> None:
    module = parse_module_file(corpus_file)
    largest = max(shape_bytes(inst.shape) for inst in module.instructions())
    if largest <= EvaluatorOptions().max_bytes:
        check_buffers(module)
        return
    prepare_buffers(module)
    assignment = assign_buffers(module, alignment=64)
    assert overlapping_buffers(assignment) == []
    arguments = [leaf for p in module.entry.parameters for leaf in p.shape.leaves()]
    assert assignment.bytes_of("parameter") == sum(
        memory_bytes(leaf) for leaf in arguments if not leaf.is_token
    )
