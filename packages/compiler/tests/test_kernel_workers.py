"""Kernels compiled on worker processes (HERON_COMPILE_WORKERS): the images of an
in-process compile, errors that reach the compile, and a worker that dies."""

from __future__ import annotations

from pathlib import Path

import pytest

from heron.compiler import Target
from heron.compiler import kernel_workers as workers_module
from heron.compiler.executable import (
    WORKER_KERNELS,
    _kernel_workers,
    compile_program,
    prepare_module,
)
from heron.compiler.kernel_workers import WORKERS_ENV, KernelWorkers, configured_workers
from heron.hlo.errors import UnsupportedError
from heron.hlo.parser import parse_module

ROOT = Path(__file__).resolve().parents[3]
PROGRAMS = ("adam_step", "while_loop_collatz", "softmax_axis0")


def _program(name: str):
    return parse_module((ROOT / "programs" / name / "module.hlo").read_text())


@pytest.mark.parametrize(("text", "count"), [(None, 0), ("", 0), ("0", 0), ("2", 2), (" 3 ", 3)])
def test_the_environment_says_how_many_workers(monkeypatch, text, count):
    if text is None:
        monkeypatch.delenv(WORKERS_ENV, raising=False)
    else:
        monkeypatch.setenv(WORKERS_ENV, text)
    assert configured_workers() == count


@pytest.mark.parametrize("text", ["two", "-1", "1.5"])
def test_a_worker_count_that_is_not_one_is_refused_by_name(monkeypatch, text):
    monkeypatch.setenv(WORKERS_ENV, text)
    with pytest.raises(UnsupportedError, match=f"{WORKERS_ENV}="):
        configured_workers()


def test_a_one_kernel_program_is_compiled_in_process(monkeypatch):
    monkeypatch.setenv(WORKERS_ENV, "2")
    asked = []
    monkeypatch.setattr(workers_module, "shared_workers", lambda: asked.append(1) or None)
    one, _ = prepare_module(_program("softmax_bf16"), Target.preset("h100"))
    assert sum(i.opcode == "fusion" for i in one.instructions()) < WORKER_KERNELS
    assert _kernel_workers(one) is None and not asked
    several, _ = prepare_module(_program("adam_step"), Target.preset("h100"))
    _kernel_workers(several)
    assert asked == [1]


@pytest.fixture(scope="module")
def in_process():
    target = Target.preset("h100")
    return {name: compile_program(_program(name), target) for name in PROGRAMS}


@pytest.mark.parametrize("name", PROGRAMS)
def test_workers_make_the_images_of_an_in_process_compile(monkeypatch, in_process, name):
    monkeypatch.setenv(WORKERS_ENV, "2")
    on_workers = compile_program(_program(name), Target.preset("h100"))
    alone = in_process[name]
    assert [(k.backend, k.key, k.image) for k in on_workers.artefact.kernels] == [
        (k.backend, k.key, k.image) for k in alone.artefact.kernels
    ]
    assert _stage_names(on_workers) == _stage_names(alone)


def _stage_names(compiled) -> list[list[tuple[str, list[str]]]]:
    return [
        [(backend, [r.name for r in kernel.stages]) for backend, kernel in emitted.compiled.items()]
        for emitted in compiled.program.kernels
    ]


def test_an_error_on_a_worker_reaches_the_compile():
    workers = KernelWorkers(1)
    try:
        future = workers.submit(
            "this is not MLIR", "k", "fusion.1", Target.preset("h100"), ("cuda",)
        )
        error = future.exception(timeout=120)
        assert isinstance(error, Exception) and "this is not MLIR" not in type(error).__name__
        assert workers.alive  # a failed request leaves the worker serving
    finally:
        workers.end()


def test_a_worker_that_dies_fails_what_it_held_and_takes_no_more():
    workers = KernelWorkers(1)
    (worker,) = workers._workers
    worker.process.kill()
    worker.process.wait()
    with pytest.raises(UnsupportedError, match="kernel worker"):
        for _ in range(50):  # until its reader has seen the end
            workers.submit("module {}", "k", "f", Target.preset("h100"), ("cuda",)).result(60)
    assert not workers.alive
    workers.end()


def test_a_compile_whose_workers_ended_compiles_in_process(monkeypatch, in_process):
    dead = KernelWorkers(1)
    dead._workers[0].process.kill()
    dead._workers[0].process.wait()
    monkeypatch.setenv(WORKERS_ENV, "1")
    monkeypatch.setattr(workers_module, "shared_workers", lambda: dead)
    compiled = compile_program(_program("adam_step"), Target.preset("h100"))
    assert [k.image for k in compiled.artefact.kernels] == [
        k.image for k in in_process["adam_step"].artefact.kernels
    ]
    dead.end()
