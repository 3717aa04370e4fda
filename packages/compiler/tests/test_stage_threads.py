"""The process's stage threads: each compile's view of them cancels and waits for its own work."""

from __future__ import annotations

import os
import subprocess
import sys
import threading
from concurrent.futures import ThreadPoolExecutor

import pytest

from heron.compiler.stage_threads import CompileThreads, shared_threads


@pytest.fixture
def one_thread():
    pool = ThreadPoolExecutor(1)
    yield pool
    pool.shutdown()


def test_a_compile_cancels_its_own_queued_work_and_waits_for_the_running(one_thread):
    release = threading.Event()
    started = threading.Event()
    ran: list[str] = []

    def blocking() -> None:
        started.set()
        release.wait(10)
        ran.append("running")

    failed, other = CompileThreads(one_thread), CompileThreads(one_thread)
    running = failed.submit(blocking)
    assert started.wait(10)
    queued = failed.submit(ran.append, "queued")
    others = other.submit(ran.append, "other compile's")
    threading.Timer(0.05, release.set).start()
    failed.shutdown(cancel_futures=True)
    assert running.done() and not running.cancelled()  # waited for, not abandoned
    assert queued.cancelled()
    others.result(10)  # another compile's work still runs on the same pool
    assert ran == ["running", "other compile's"]


def test_shutdown_waits_for_work_queued_by_running_work(one_thread):
    threads = CompileThreads(one_thread)
    ran: list[int] = []
    # a stage's callback queues the next (a ptxas batch once its kernels' LLVM is done)
    threads.submit(lambda: threads.submit(ran.append, 2) and ran.append(1))
    threads.shutdown()
    assert sorted(ran) == [1, 2]


def test_compiles_share_one_pool_of_named_threads():
    assert shared_threads() is shared_threads()
    name = CompileThreads().submit(lambda: threading.current_thread().name).result(10)
    assert name.startswith("heron-stages")


#: Run in a fresh interpreter: forking the test process, whose other libraries (jax) run
#: threads of their own, could leave a lock of theirs held in the child.
FORK_CHECK = """
import os
from heron.compiler.stage_threads import CompileThreads, shared_threads

parent_pool = shared_threads()
parent_pool.submit(lambda: None).result(10)  # its threads exist in the parent only
read, write = os.pipe()
pid = os.fork()
if pid == 0:  # the child: its pool is new, and runs work
    try:
        ok = shared_threads() is not parent_pool
        ok = ok and CompileThreads().submit(lambda: 42).result(10) == 42
        os.write(write, b"1" if ok else b"0")
    finally:
        os._exit(0)
os.close(write)
answer = os.read(read, 1)
os.waitpid(pid, 0)
print(answer.decode())
"""


@pytest.mark.skipif(not hasattr(os, "fork"), reason="os.fork is POSIX-only")
def test_a_forked_child_starts_a_pool_of_its_own():
    done = subprocess.run(
        [sys.executable, "-c", FORK_CHECK], capture_output=True, text=True, timeout=60
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "1"
