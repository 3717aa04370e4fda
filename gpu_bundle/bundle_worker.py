"""The bundle's worker: one process that opens the device once and runs the cases it is sent.

``run.py`` starts it (with the bundle's wheels on ``PYTHONPATH``) and talks to it
over a pipe, one JSON line per request and one per answer: a case per request,
and after a speed case its autotuning step (``bundle_autotune``: a request of
its own, so that a hang there costs the step, not the case's numbers).
One process for every case because opening a CUDA context, importing heron, jax
and torch cost seconds that one process per case would pay again each time; a
separate process all the same so that the parent can stop a hung case (a kernel
that never ends cannot be interrupted from the thread that waits for it), report
it, and start a fresh worker for the rest.

The first line it writes is ``hello``: the backend and device it opened, or why
it could not. Anything else a library prints goes to stderr (``run.py`` keeps it
in ``worker.log``): file descriptor 1 is pointed at 2 at start-up and the answers
go to a private copy of the original stdout.
"""

from __future__ import annotations

import json
import os
import platform
import statistics
import sys
import time
import traceback
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

import bundle_autotune  # noqa: E402
import bundle_compare  # noqa: E402
import bundle_workloads  # noqa: E402

#: Runs with command buffers in a correctness case: repeated runs must give the same bits.
REPEATS = 3
#: Single runs timed (median reported) and back-to-back batches (median of their means).
SINGLE_RUNS = 5
BATCHES = 3
#: A back-to-back batch aims at this much device time (at least 3, at most 100 runs).
BATCH_SECONDS = 0.03
#: A speed case's float outputs may differ from jax's on the same GPU by this much
#: (relative to jax's largest magnitude): summation orders differ, bf16 rounds.
SPEED_FLOAT_TOLERANCE = 0.05
#: Integer outputs (top-k indices) may differ in this fraction of elements (ties).
SPEED_INT_TOLERANCE = 1e-3


class Worker:
    """The device, the bundle's manifest, and a handler per kind of case."""

    def __init__(self, bundle: Path, backend: str) -> None:
        from heron.runtime.core.heron_run import DEVICE_BACKENDS
        from heron.runtime.core.registry import default_backends

        self.bundle = bundle
        self.manifest = json.loads((bundle / "bundle.json").read_text())
        registry = default_backends()
        if backend == "auto":
            backend = registry.choose("auto", DEVICE_BACKENDS, lambda name: None).name
        self.backend = backend
        self.device = None if backend == "interpreter" else registry.create_device(backend, None)
        self.target = self._target()
        self.peak_name, self.peak = self._peak()
        #: The last speed case's untuned run, for its autotuning step (one at a time: the
        #: GPU-size inputs and outputs are large).
        self.speed_run: bundle_autotune.SpeedRun | None = None

    # -- the device and its artefacts --------------------------------------------------------

    def _arch(self) -> str:
        if self.backend == "cuda":
            major, minor = self.device.compute_capability
            return f"sm_{major}{minor}"
        if self.backend == "rocm":
            return str(self.device.info.architecture).split(":", 1)[0]
        return "interpreter"

    def _target(self) -> str | None:
        """The bundle's Target whose images run here: the reference one on the interpreter;
        on CUDA the newest arch of the device's major not newer than the device (a cubin
        runs on its own major only); on ROCm the same gfx arch."""
        if self.backend == "interpreter":
            return self.manifest["reference_target"]
        arch = self._arch()
        peaks = self.manifest["peaks"]
        candidates = []
        for name in self.manifest["targets"]:
            theirs = peaks.get(name, {}).get("arch", "")
            if self.backend == "rocm" and theirs == arch:
                return name
            if self.backend == "cuda" and theirs.startswith("sm_") and arch.startswith("sm_"):
                t, d = int(theirs[3:]), int(arch[3:])
                if t // 10 == d // 10 and t <= d:
                    candidates.append((t, name))
        return max(candidates)[1] if candidates else None

    def _peak(self) -> tuple[str, dict[str, Any]]:
        """The Target preset whose peaks the speed cases are measured against."""
        peaks = self.manifest["peaks"]
        description = self.description().upper()
        for marker, name in (
            ("H200", "h200"),
            ("H100", "h100"),
            ("A100", "a100"),
            ("MI300", "mi300x"),
            ("MI250", "mi250x"),
        ):
            if marker in description and name in peaks:
                return name, peaks[name]
        name = self.target or self.manifest["reference_target"]
        return name, peaks.get(name, {})

    def description(self) -> str:
        if self.device is None:
            return f"heron interpreter on {platform.processor() or platform.machine()}"
        return str(self.device.description)

    def hello(self) -> dict[str, Any]:
        info: dict[str, Any] = {
            "backend": self.backend,
            "device": self.description(),
            "arch": self._arch(),
            "target": self.target,
            "peak_preset": self.peak_name,
            "python": sys.version.split()[0],
            "numpy": np.__version__,
            "modules": _versions(),
        }
        if self.backend == "cuda":
            info["conditional_nodes"] = bool(self.device.supports_conditional_nodes)
            info["library_reasons"] = _jsonable(getattr(self.device, "library_reasons", {}))
            try:
                from cuda.bindings import driver

                version = int(driver.cuDriverGetVersion()[1])
                info["driver_cuda"] = f"{version // 1000}.{version % 1000 // 10}"
            except Exception as error:  # noqa: BLE001 - the report says it could not tell
                info["driver_cuda"] = f"unknown ({error})"
        return info

    def _device_for(self, artefact: Any) -> Any:
        if self.device is not None:
            return self.device
        from heron.runtime.interpreter import InterpreterDevice

        return InterpreterDevice(warp_size=artefact.target.warp_size)

    def _load(self, case: dict[str, Any]) -> Any:
        from heron.runtime.core.artefact import load

        if self.target is None:
            raise _Skip(f"the bundle has no artefacts for {self._arch()}")
        relative = case["artefacts"].get(self.target)
        if relative is None:
            error = case.get("build_errors", {}).get(self.target, "not built")
            raise _Error(f"no artefact for {self.target}: heron did not compile it: {error}")
        return load(self.bundle / relative)

    def _stored_inputs(self, case: dict[str, Any], artefact: Any) -> list[np.ndarray]:
        """The case's inputs from the bundle's npz, in the artefact's parameter types."""
        from heron.hlo.npz_io import load_inputs
        from heron.hlo.parser import parse_shape

        shapes = [parse_shape(text) for text in artefact.signature.parameters]
        return load_inputs(self.bundle / case["inputs"], shapes)

    def _speed_inputs(self, case: dict[str, Any], artefact: Any) -> list[np.ndarray]:
        """A speed case's inputs: a program's are its corpus inputs (stored in the bundle), a
        workload's are drawn here from its seed at the GPU size (too large to store)."""
        if case.get("program"):
            return self._stored_inputs(case, artefact)
        workload = bundle_workloads.BY_NAME[case["workload"]]
        return bundle_workloads.make_inputs(workload.gpu, case["seed"])

    # -- correctness ---------------------------------------------------------------------

    def correctness(self, case: dict[str, Any]) -> dict[str, Any]:
        """No command buffers once; with them REPEATS times. Against XLA:CPU's outputs and the
        interpreter's; command buffers or not and the repeats identical, except for the
        kernels the artefact marks order-dependent (a deterministic compile has none)."""
        from heron.hlo.npz_io import load_outputs
        from heron.runtime.core.executor import Executable
        from heron.runtime.core.thunks import order_dependent_kernels

        artefact = self._load(case)
        inputs = self._stored_inputs(case, artefact)
        device = self._device_for(artefact)
        backend = self.backend
        details: dict[str, Any] = {"target": self.target}
        start = time.perf_counter()
        plain = Executable(artefact, device, backend, command_buffers=False, timing=True)
        try:
            without = plain.run(inputs)
            details["kernels"] = _top_kernels(plain.stats)
            details["library_calls"] = [c.to_json() for c in plain.library_choices]
        finally:
            plain.close()
        # min_graph_size 1: every run of recordable thunks becomes a command buffer, so that
        # "with command buffers" exercises them also in programs shorter than XLA's 5.
        buffered = Executable(artefact, device, backend, command_buffers=True, min_graph_size=1)
        try:
            runs = [buffered.run(inputs) for _ in range(REPEATS)]
            order_dependent = order_dependent_kernels(buffered.program)
            details["command_buffers_recorded"] = sum(
                r.command_buffers_recorded for r in buffered.runs
            )
        finally:
            buffered.close()
        details["seconds"] = round(time.perf_counter() - start, 4)
        details["order_dependent_kernels"] = [k for k, _ in order_dependent]
        problems: list[str] = []
        resident = self._resident(artefact, device, inputs, runs[0], bool(order_dependent))
        details["resident"] = resident
        problems += resident.pop("problems", [])
        deterministic = bool(case.get("deterministic"))
        if deterministic and order_dependent:
            problems.append(
                "compiled deterministic, yet order-dependent kernels: "
                + ", ".join(k for k, _ in order_dependent)
            )
        same_repeats = all(bundle_compare.identical(runs[0], r) for r in runs[1:])
        same_buffers = bundle_compare.identical(without, runs[0])
        for label, same in (("repeated runs", same_repeats), ("command buffers", same_buffers)):
            key = "repeats" if label == "repeated runs" else "command_buffers"
            if same:
                details[key] = "identical"
            elif order_dependent:
                details[key] = f"differ (expected: order-dependent {len(order_dependent)})"
            else:
                details[key] = "DIFFER"
                what = "with and without command buffers" if key == "command_buffers" else ""
                problems.append(f"{label} {what} differ".replace("  ", " ").strip())
        if case.get("xla_cpu"):
            versus = bundle_compare.compare_all(
                runs[0], load_outputs(self.bundle / case["xla_cpu"]), case.get("ulps")
            )
            details["xla_cpu"] = versus
            if not versus["ok"]:
                problems.append(f"against XLA:CPU: {versus.get('why')}")
        if case.get("interpreter"):
            versus = bundle_compare.compare_all(
                runs[0], load_outputs(self.bundle / case["interpreter"]), case.get("ulps")
            )
            details["interpreter"] = versus
            if self.backend == "interpreter":
                if not versus["identical"] and not order_dependent:
                    problems.append("the interpreter's outputs differ from the build's")
            elif not case.get("xla_cpu") and not versus["ok"]:
                problems.append(f"against the interpreter: {versus.get('why')}")
        elif not case.get("xla_cpu"):
            problems.append("no reference outputs in the bundle")
        status = "fail" if problems else "pass"
        return {"status": status, "reason": "; ".join(problems), "details": details}

    def _resident(
        self,
        artefact: Any,
        device: Any,
        inputs: list[np.ndarray],
        expected: list,
        order_dependent: bool,
    ) -> dict[str, Any]:
        """heron.jax's path on this GPU (issue 30): the inputs as another library's arrays on
        the device (jax's, else torch's), taken through DLPack in place by a
        :class:`~heron.runtime.core.resident.ResidentRunner`, the results handed back to that
        library without a copy; they must equal the executor's run bit for bit (unless the
        program has order-dependent kernels). Host time of one call both ways, too."""
        from heron.hlo.memory_layout import is_c_order
        from heron.runtime.core.executor import Executable
        from heron.runtime.core.resident import ResidentRunner

        library = _dlpack_library(device)
        if library is None:
            return {"skipped": "neither jax nor torch has memory on this device"}
        name, to_device, from_dlpack = library
        try:
            arguments = [to_device(a) for a in inputs]
        except Exception as error:  # noqa: BLE001 - a type the library lacks: not heron's fault
            return {"skipped": f"{name} cannot hold the inputs: {error}"[:300]}
        changed = [
            f"{a.dtype} as {b.dtype}"
            for a, b in zip(inputs, arguments, strict=True)
            if np.dtype(a.dtype) != np.dtype(b.dtype)
        ]
        if changed:  # jax without x64 holds f64 as f32
            return {"skipped": f"{name} holds {', '.join(changed)}"}
        executable = Executable(artefact, device, self.backend, command_buffers=True)
        result: dict[str, Any] = {"library": name, "problems": []}
        try:
            runner = ResidentRunner(executable)
            arrays = runner(arguments)
            result["ways"] = sorted(set(runner.last_inputs.ways))
            outputs = [np.asarray(a) for a in arrays]
            same = bundle_compare.identical(expected, outputs)
            result["identical_to_run"] = same
            if not same and not order_dependent:
                result["problems"].append("device-resident results differ from run()'s")
            exported = 0
            for array, output in zip(arrays, outputs, strict=True):
                if not is_c_order(array.hlo_shape):
                    continue
                back = np.asarray(from_dlpack(array))
                if not bundle_compare.identical([output], [back]):
                    result["problems"].append(f"{name} reads a result differently via DLPack")
                exported += 1
            result["exported"] = exported
            singles = {"resident_s": [], "run_s": []}
            for _ in range(SINGLE_RUNS):
                begun = time.perf_counter()
                kept = runner(arguments)
                for array in kept:
                    array.block_until_ready()
                singles["resident_s"].append(time.perf_counter() - begun)
                begun = time.perf_counter()
                executable.run(inputs)
                singles["run_s"].append(time.perf_counter() - begun)
            result.update({k: statistics.median(v) for k, v in singles.items()})
        except Exception as error:  # noqa: BLE001 - reported, the case's other checks stand
            result["problems"].append(f"resident run: {type(error).__name__}: {error}"[:300])
        finally:
            executable.close()
        return result

    # -- speed ---------------------------------------------------------------------------

    def speed(self, case: dict[str, Any]) -> dict[str, Any]:
        """heron (its artefact) and jax.jit, side by side on this device: a workload at its
        GPU size, a corpus program (``case["program"]``) on its own small inputs."""
        if self.device is None:
            raise _Skip("speed cases need a GPU (backend interpreter)")
        artefact = self._load(case)
        inputs = self._speed_inputs(case, artefact)
        details: dict[str, Any] = {"target": self.target, "peak_preset": self.peak_name}
        self.speed_run = None
        begun = time.perf_counter()
        heron_out, details["heron"] = self._heron_times(artefact, inputs)
        self.speed_run = bundle_autotune.SpeedRun(
            case["name"], artefact, inputs, heron_out, details["heron"], time.perf_counter() - begun
        )
        try:
            jax_out, details["jax"] = _jax_times(speed_function(case), inputs)
        except ImportError as error:
            jax_out, details["jax"] = None, {"skipped": f"jax is not installed ({error})"}
        except Exception as error:  # noqa: BLE001 - heron's numbers still count
            jax_out, details["jax"] = None, {"error": f"{type(error).__name__}: {error}"[:300]}
        details["resident"] = self._resident_times(artefact, inputs)
        self._rates(case, details)
        problems = []
        if jax_out is not None:
            errors = [bundle_compare.relative_error(h, j) for h, j in zip(heron_out, jax_out)]
            details["error_vs_jax"] = errors
            for i, (error, reference) in enumerate(zip(errors, jax_out, strict=True)):
                floating = reference.dtype.kind == "f" or str(reference.dtype) == "bfloat16"
                bound = SPEED_FLOAT_TOLERANCE if floating else SPEED_INT_TOLERANCE
                if error is None or error > bound:
                    problems.append(f"out{i} differs from jax's on this GPU: {error}")
            if len(heron_out) != len(jax_out):
                problems.append(f"{len(heron_out)} outputs, jax {len(jax_out)}")
        return {
            "status": "fail" if problems else "pass",
            "reason": "; ".join(problems),
            "details": details,
        }

    def _heron_times(self, artefact: Any, inputs: list[np.ndarray]) -> tuple[list, dict]:
        from heron.hlo.memory_layout import to_memory
        from heron.runtime.core.executor import Executable

        device = self.device
        executable = Executable(artefact, device, self.backend, timing=False)
        buffers = []
        try:
            for array, shape in zip(inputs, executable.parameter_shapes, strict=True):
                raw = to_memory(array, shape)
                buffer = device.allocate(raw.nbytes, "bundle input")
                device.copy_to_device(buffer, raw)
                buffers.append(buffer)
            begun = time.perf_counter()
            executable.execute(buffers)  # records the command buffers
            first = time.perf_counter() - begun
            outputs = list(executable.results())
            singles = []
            for _ in range(SINGLE_RUNS):
                begun = time.perf_counter()
                executable.execute(buffers)
                singles.append(time.perf_counter() - begun)
            single = statistics.median(singles)
            count = max(3, min(100, int(BATCH_SECONDS / max(single, 1e-6))))
            batches, device_batches = [], []
            for _ in range(BATCHES):
                timer = device.timer()
                begun = time.perf_counter()
                timer.start()
                for _ in range(count):
                    executable.execute(buffers, synchronize=False)
                timer.stop()
                device.synchronize()
                batches.append((time.perf_counter() - begun) / count)
                device_batches.append(timer.seconds() / count)
            result = {
                "first_s": first,
                "single_s": single,
                "batch_runs": count,
                "throughput_s": statistics.median(batches),
                "device_s": statistics.median(device_batches),
                "library_calls": [c.chosen for c in executable.library_choices],
                # which algorithm each library call ran (cuBLASLt: the heuristic's or a
                # tuned one), by the call's path: the autotuning step compares them
                "library_algorithms": {
                    c.path: c.algorithm for c in executable.library_choices if c.algorithm
                },
                "command_buffers": sum(1 for _ in executable.program if _.kind == "command_buffer"),
            }
            result["kernels"] = self._kernel_times(artefact, buffers)
            return outputs, result
        finally:
            executable.close()
            for buffer in buffers:
                device.free(buffer)

    def _resident_times(self, artefact: Any, inputs: list[np.ndarray]) -> dict[str, Any]:
        """The artefact as heron.jax runs it (issue 30): a
        :class:`~heron.runtime.core.resident.ResidentRunner` over jax's (else torch's) arrays
        on this GPU, results left on the device; timed as jax is (``_times``). Skipped
        where no such library has the device's memory or holds the inputs' types."""
        from heron.runtime.core.executor import Executable
        from heron.runtime.core.resident import ResidentRunner

        library = _dlpack_library(self.device)
        if library is None:
            return {"skipped": "neither jax nor torch has memory on this device"}
        name, to_device, _ = library
        try:
            arguments = [to_device(a) for a in inputs]
        except Exception as error:  # noqa: BLE001 - a type the library lacks
            return {"skipped": f"{name} cannot hold the inputs: {error}"[:300]}
        if any(np.dtype(a.dtype) != np.dtype(b.dtype) for a, b in zip(inputs, arguments)):
            return {"skipped": f"{name} holds the inputs in other types (no x64?)"}
        executable = Executable(artefact, self.device, self.backend, command_buffers=True)
        try:
            runner = ResidentRunner(executable, immutable=_immutable_arrays(name))
            begun = time.perf_counter()
            last = [runner(arguments)]
            for array in last[0]:
                array.block_until_ready()
            entry: dict[str, Any] = {"library": name, "first_s": time.perf_counter() - begun}

            def call() -> None:
                last[:] = [runner(arguments)]

            def synchronize() -> None:
                for array in last[0]:
                    array.block_until_ready()

            entry.update(_times(call, synchronize))
            entry.update(_host_work(call, synchronize))
            entry["ways"] = sorted(set(runner.last_inputs.ways))
            return entry
        except Exception as error:  # noqa: BLE001 - the executor's numbers still count
            return {"error": f"{type(error).__name__}: {error}"[:300]}
        finally:
            executable.close()

    def _kernel_times(self, artefact: Any, buffers: list) -> list[dict[str, Any]]:
        """Per-kernel device times (event timers around each thunk, no command buffers)."""
        from heron.runtime.core.executor import Executable

        executable = Executable(
            artefact, self.device, self.backend, command_buffers=False, timing=True
        )
        try:
            executable.execute(buffers)
            return _top_kernels(executable.stats, 8)
        finally:
            executable.close()

    def _rates(self, case: dict, details: dict[str, Any]) -> None:
        """Achieved GB/s and TFLOP/s from each side's throughput time, against the peak (a
        program case counts no FLOPs: its bytes only)."""
        peak = self.peak
        workload = bundle_workloads.BY_NAME.get(case.get("workload") or "")
        unit = case.get("flops_unit") or (
            "mma"
            if workload and any(a.dtype in ("bfloat16", "float16") for a in workload.gpu)
            else "fp32"
        )
        flops_peak = peak.get(f"{unit}_flops") or peak.get("fp32_flops") or 0
        details["flops_unit"] = unit
        for side in ("heron", "jax", "torch"):
            entry = details.get(side)
            if not isinstance(entry, dict) or not entry.get("throughput_s"):
                continue
            seconds = entry["throughput_s"]
            entry["gb_per_s"] = case["bytes"] / seconds / 1e9
            if peak.get("memory_bandwidth"):
                entry["bandwidth_of_peak"] = case["bytes"] / seconds / peak["memory_bandwidth"]
            if case["flops"]:
                entry["tflop_per_s"] = case["flops"] / seconds / 1e12
                if flops_peak:
                    entry["flops_of_peak"] = case["flops"] / seconds / flops_peak

    def autotune(self, case: dict[str, Any], seconds: float) -> dict[str, Any]:
        """The speed case's autotuning step (``bundle_autotune.measure``): its artefact's
        GEMM calls tuned on this device, the tuned copy timed as the untuned one was and
        compared with it, within ``seconds``. The untuned run is the speed case's own,
        kept from it; a fresh worker (the last one was stopped) runs it again."""
        deadline = time.monotonic() + seconds
        if self.backend != "cuda":
            raise _Skip(
                "autotuning times cuBLASLt's algorithms on a CUDA device; this worker's"
                f" backend is {self.backend}"
            )
        run, self.speed_run = self.speed_run, None
        if run is None or run.name != case["name"]:
            artefact = self._load(case)
            inputs = self._speed_inputs(case, artefact)
            begun = time.perf_counter()
            outputs, times = self._heron_times(artefact, inputs)
            run = bundle_autotune.SpeedRun(
                case["name"], artefact, inputs, outputs, times, time.perf_counter() - begun
            )
        return bundle_autotune.measure(
            run,
            self.device,
            lambda tuned: self._heron_times(tuned, run.inputs),
            deadline,
            SPEED_INT_TOLERANCE,
        )

    def torch(self, case: dict[str, Any]) -> dict[str, Any]:
        """torch.compile's times for the workload's torch twin (when torch sees a GPU)."""
        if self.device is None:
            raise _Skip("speed cases need a GPU (backend interpreter)")
        try:
            import torch
        except ImportError as error:
            raise _Skip(f"torch is not installed ({error})") from None
        if not torch.cuda.is_available():
            raise _Skip("torch sees no GPU")
        workload = bundle_workloads.BY_NAME[case["workload"]]
        inputs = bundle_workloads.make_inputs(workload.gpu, case["seed"])
        tensors = [_to_torch(torch, a) for a in inputs]
        function = torch.compile(workload.torch())
        begun = time.perf_counter()
        function(*tensors)
        torch.cuda.synchronize()
        entry: dict[str, Any] = {
            "first_s": time.perf_counter() - begun,
            "version": torch.__version__,
        }
        entry.update(_times(lambda: function(*tensors), torch.cuda.synchronize))
        details = {"torch": entry}
        self._rates(case, details)
        torch.cuda.empty_cache()
        return {"status": "pass", "reason": "", "details": details}


class _Skip(Exception):
    """The case does not apply here (status skipped, this reason)."""


class _Error(Exception):
    """The case could not run (status error, this reason)."""


def _times(call: Any, synchronize: Any) -> dict[str, Any]:
    """Median single run (call + synchronize) and median of batches of back-to-back calls."""
    singles = []
    for _ in range(SINGLE_RUNS):
        begun = time.perf_counter()
        call()
        synchronize()
        singles.append(time.perf_counter() - begun)
    single = statistics.median(singles)
    count = max(3, min(100, int(BATCH_SECONDS / max(single, 1e-6))))
    batches = []
    for _ in range(BATCHES):
        begun = time.perf_counter()
        for _ in range(count):
            call()
        synchronize()
        batches.append((time.perf_counter() - begun) / count)
    return {"single_s": single, "batch_runs": count, "throughput_s": statistics.median(batches)}


def _immutable_arrays(library: str) -> tuple[type, ...]:
    """The array types of ``library`` whose arrays never change (jax's), which a
    ResidentRunner adopts once (heron.jax names them so too)."""
    if library != "jax":
        return ()
    import jax

    return (jax.Array,)


#: Calls whose host work :func:`_host_work` profiles.
PROFILED_CALLS = 50


def _host_work(call: Any, synchronize: Any) -> dict[str, Any]:
    """What one call costs the host: the median time to issue it (the device idle
    before it, so nothing queued delays it) and where that time goes (the functions of
    :data:`PROFILED_CALLS` calls with the most time of their own, in us a call). A
    call whose issue takes longer than its device work leaves the device waiting in
    back-to-back runs."""
    import cProfile
    import pstats

    issues = []
    for _ in range(SINGLE_RUNS):
        synchronize()
        begun = time.perf_counter()
        call()
        issues.append(time.perf_counter() - begun)
    synchronize()
    profile = cProfile.Profile()
    profile.enable()
    for _ in range(PROFILED_CALLS):
        call()
    profile.disable()
    synchronize()
    stats = pstats.Stats(profile).stats  # type: ignore[attr-defined]
    ranked = sorted(stats.items(), key=lambda item: item[1][2], reverse=True)[:10]
    return {
        "issue_s": statistics.median(issues),
        "host_profile": [
            {
                "function": f"{Path(file).name}:{line}({name})",
                "own_us": own / PROFILED_CALLS * 1e6,
                "calls": count / PROFILED_CALLS,
            }
            for (file, line, name), (_, count, own, _, _) in ranked
        ],
    }


def speed_function(case: dict[str, Any]) -> Callable[..., Any]:
    """The jax function a speed case's artefact is timed against: the workload's, or the
    program's (:func:`program_function`)."""
    if case.get("program"):
        return program_function(case["program"])
    return bundle_workloads.BY_NAME[case["workload"]].function()


def program_function(name: str) -> Callable[..., Any]:
    """The corpus program's jax function, from the bundle's copy of
    ``programs/definitions.py`` (``bundle_programs``), taking its inputs' leaves in order as
    the module's entry does: a program whose arguments are a pytree (``adam_step``'s
    parameter dicts) gets them put back together (the structure of its example arguments).
    Imported here, not at the top: it imports jax, which a worker may lack."""
    import bundle_programs
    import jax

    (program,) = [p for p in bundle_programs.PROGRAMS if p.name == name]
    structure = jax.tree.structure(program.arguments())

    def function(*leaves: Any) -> Any:
        return program.function(*jax.tree.unflatten(structure, leaves))

    return function


def _jax_times(function: Callable[..., Any], inputs: list[np.ndarray]) -> tuple[list, dict]:
    """jax.jit of ``function`` on ``inputs`` (on jax's default device), timed as heron is:
    the first call (compile included), then :func:`_times`; its outputs' leaves."""
    import jax

    function = jax.jit(function)
    arguments = [jax.device_put(a) for a in inputs]
    begun = time.perf_counter()
    result = function(*arguments)
    jax.block_until_ready(result)
    entry: dict[str, Any] = {
        "first_s": time.perf_counter() - begun,
        "version": jax.__version__,
        "device": str(jax.devices()[0]),
    }
    last: list[Any] = []

    def call() -> None:
        last[:] = [function(*arguments)]

    entry.update(_times(call, lambda: jax.block_until_ready(last[0])))
    outputs = [np.asarray(x) for x in jax.tree.leaves(result)]
    return outputs, entry


def _dlpack_library(device: Any) -> tuple[str, Any, Any] | None:
    """(name, numpy -> its array on ``device``, DLPack consumer) of jax or torch, whichever
    has a GPU at ``device``'s DLPack address; None where neither does."""
    where = tuple(device.dlpack_device or ())
    if not where:
        return None
    try:
        import jax

        for candidate in jax.devices("cpu" if where[0] == 1 else "gpu"):
            if where[0] == 1:  # kDLCPU: the interpreter's memory is the host's
                put = lambda array, at=candidate: jax.device_put(array, at)  # noqa: E731
                return "jax", put, jax.dlpack.from_dlpack
            if (where[1:] or (0,))[0] == candidate.local_hardware_id:
                return (
                    "jax",
                    lambda array, at=candidate: jax.device_put(array, at),
                    jax.dlpack.from_dlpack,
                )
    except Exception:  # noqa: BLE001 - no jax, or jax without a GPU
        pass
    try:
        import torch

        if where[0] != 1 and torch.cuda.is_available():
            return "torch", lambda array: _to_torch(torch, array), torch.from_dlpack
    except Exception:  # noqa: BLE001 - no torch
        pass
    return None


def _to_torch(torch: Any, array: np.ndarray) -> Any:
    if str(array.dtype) == "bfloat16":
        return torch.from_numpy(array.view(np.int16)).view(torch.bfloat16).cuda()
    return torch.from_numpy(array).cuda()


def _top_kernels(stats: Any, count: int = 5) -> list[dict[str, Any]]:
    entries = sorted(stats.by_thunk(), key=lambda e: -e["seconds"])
    return [
        {
            "path": e["path"],
            "kind": e["kind"],
            "name": e["name"],
            "emitter": e["emitter"],
            "launch": e["launch"],
            "executions": e["executions"],
            "seconds": e["seconds"],
        }
        for e in entries[:count]
    ]


def _versions() -> dict[str, str]:
    from importlib import metadata

    versions = {}
    for name in (
        "heron-runtime-core",
        "heron-runtime-cuda",
        "nvmath-python",
        "cuda-bindings",
        "cuda-core",
        "jax",
        "jaxlib",
        "torch",
        "ml-dtypes",
    ):
        try:
            versions[name] = metadata.version(name)
        except metadata.PackageNotFoundError:
            pass
    return versions


def _jsonable(value: Any) -> Any:
    return json.loads(json.dumps(value, default=str))


def main() -> int:
    bundle, backend = Path(sys.argv[1]), sys.argv[2]
    answers = os.fdopen(os.dup(1), "w", buffering=1)
    os.dup2(2, 1)  # stray prints from libraries go to the log, not into the protocol
    sys.stdout = sys.stderr
    try:
        worker = Worker(bundle, backend)
        answers.write(json.dumps({"hello": _jsonable(worker.hello())}) + "\n")
    except Exception as error:  # noqa: BLE001 - the parent reports why no case can run
        traceback.print_exc()
        answers.write(json.dumps({"hello": None, "error": f"{type(error).__name__}: {error}"}))
        answers.write("\n")
        return 1
    handlers = {"correctness": worker.correctness, "speed": worker.speed, "torch": worker.torch}
    for line in sys.stdin:
        request = json.loads(line)
        case = request["case"]
        begun = time.perf_counter()
        try:
            if request["mode"] == "autotune":  # a speed case's step: its time is run.py's
                answer = worker.autotune(case, float(request["seconds"]))
            else:
                answer = handlers[request["mode"]](case)
        except _Skip as skip:
            answer = {"status": "skipped", "reason": str(skip)}
        except _Error as error:
            answer = {"status": "error", "reason": str(error)}
        except Exception as error:  # noqa: BLE001 - one case's failure is its result
            print(f"case {case['name']}:", file=sys.stderr)
            traceback.print_exc()
            answer = {"status": "error", "reason": f"{type(error).__name__}: {error}"[:500]}
        answer["seconds"] = round(time.perf_counter() - begun, 4)
        answers.write(json.dumps(_jsonable(answer)) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
