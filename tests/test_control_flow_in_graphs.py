"""Loops and conditionals inside one graph on the CUDA device (issue 30), over the stand-in driver.

Every program of the corpus with a while loop or a conditional, compiled for an
H100 with CUDA kernel images, is loaded on heron's CUDA device over the
stand-in for ``cuda.bindings.driver`` (``heron_test_support.fake_cuda``, whose
CUDA 12.8 driver has conditional nodes): the whole program is one command
buffer, recorded once with WHILE / IF nodes, and each later run is one
``cuGraphLaunch`` with no predicate or selector read back (the only
device-to-host copies are the results'). The stand-in runs no PTX, so the
numbers are checked elsewhere (tests/test_executables.py on the interpreter);
here what the host asks of the driver is.
"""

from __future__ import annotations

from collections import Counter

import pytest
from heron_test_support.fake_cuda import FakeCuda
from heron_test_support.programs import corpus_programs

from heron.compiler import Target
from heron.compiler.executable import compile_program
from heron.runtime.core.executor import Executable
from heron.runtime.core.thunks import (
    CommandBufferThunk,
    ConditionalThunk,
    KernelThunk,
    WhileThunk,
    walk,
)
from heron.runtime.cuda.device import CudaDevice

CONTROL_FLOW = [
    program
    for program in corpus_programs("programs")
    if any(
        word in (program.folder / "module.hlo").read_text() for word in (" while(", " conditional(")
    )
]


#: Programs whose control flow the simplifier removes.
SIMPLIFIED = {"cond"}


def test_the_corpus_has_loops_and_conditionals():
    names = {program.name for program in CONTROL_FLOW}
    assert {"fori_loop_newton_sqrt", "while_loop_collatz", "switch", "cond"} <= names


@pytest.mark.parametrize("program", CONTROL_FLOW, ids=lambda p: p.name)
def test_a_control_flow_program_is_one_graph_launch_without_reads(program):
    # The stand-in driver has no cuBLASLt: heron's kernel runs beside each GEMM call.
    compiled = compile_program(
        program.module(), Target.preset("h100"), ("cuda",), library_fallbacks=True
    )
    thunks = list(walk(compiled.artefact.program))
    if not any(isinstance(t, (WhileThunk, ConditionalThunk)) for t in thunks):
        # cond's two cheap branches become a select (the conditional simplifier)
        assert program.name in SIMPLIFIED, program.name
        return
    driver = FakeCuda()
    for thunk in thunks:  # the cubins' parameters, as a driver reads them
        if isinstance(thunk, KernelThunk):
            driver.param_info[thunk.kernel_name] = [(8 * k, 8) for k in range(len(thunk.arguments))]
    executable = Executable(compiled.artefact, CudaDevice(bindings=driver))
    assert [type(t) for t in executable.program] == [CommandBufferThunk]
    arguments = program.inputs(program.module())
    executable.run(arguments)  # records and instantiates the graph
    assert executable.stats.command_buffers_recorded == 1
    assert driver.calls.count("cuGraphAddNode") >= 1  # a WHILE or IF node
    before = len(driver.calls)
    executable.run(arguments)
    calls = Counter(driver.calls[before:])
    assert calls["cuGraphLaunch"] == 1
    assert calls["cuLaunchKernel"] == 0
    assert calls["cuMemcpyDtoHAsync"] == len(executable.result_shapes)
    assert executable.stats.predicate_reads == 0
