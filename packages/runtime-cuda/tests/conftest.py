"""Fixtures of the CUDA tests: the stand-in driver (``heron_test_support.fake_cuda``)
and a stand-in for nvmath's cuBLASLt bindings."""

from __future__ import annotations

import ctypes

import ml_dtypes
import numpy as np
import pytest
from heron_test_support.fake_cuda import FakeCuda


@pytest.fixture
def fake_cuda():
    return FakeCuda


class FakeCublasLt:
    """A stand-in for ``nvmath.bindings.cublasLt``: records every argument, then computes.

    Its enums and attribute types are the real module's (so the wrapper is
    checked against nvmath's values); descriptors, layouts and preferences are
    dictionaries of the attribute values the wrapper set (decoded from the
    bytes it passed, in the attribute's own type); ``matmul`` records its
    arguments and puts a column-major GEMM of exactly those arguments on the
    stream (``heron_test_support.fake_blas``), through ``memory``, run at once
    or captured by ``driver`` when given. ``no_algorithm(desc, layouts)``
    makes the heuristic find none.

    Algorithms: the heuristic returns ``candidates`` distinct algorithms per
    descriptor (``cublasLtMatmulAlgo_t`` bytes: the descriptor's handle and the
    candidate's number), which ``matmul_algo_check`` accepts for that
    descriptor only (and refuses where ``reject(algo)`` says so, as cuBLASLt
    raises: ``CUBLAS_STATUS_NOT_SUPPORTED``); ``matmul`` records the algorithm it
    was given, takes ``cost_ms(algo)`` of :attr:`clock_ms` (what a stand-in
    driver's event timer reads) and, where ``wrong(algo)``, computes a wrong
    result (adds 1 to D). ``version`` is ``cublasLtGetVersion``'s.
    """

    def __init__(
        self,
        memory=None,
        driver=None,
        no_algorithm=lambda desc, layouts: False,
        candidates=3,
        version=120805,
        reject=lambda algo: False,
        wrong=lambda algo: False,
        cost_ms=lambda algo: 1.0,
    ):
        from nvmath.bindings import cublasLt as real

        self.real = real
        for name in (
            "MatrixLayoutAttribute",
            "MatmulDescAttribute",
            "MatmulPreferenceAttribute",
            "Order",
            "Epilogue",
            "MatmulHeuristicResult",
            "matmul_heuristic_result_dtype",
            "get_matrix_layout_attribute_dtype",
            "get_matmul_desc_attribute_dtype",
            "get_matmul_preference_attribute_dtype",
        ):
            setattr(self, name, getattr(real, name))
        from heron_test_support.fake_blas import HostMemory

        self.memory = memory or HostMemory()
        self.driver = driver
        self.no_algorithm = no_algorithm
        self.objects: dict[int, dict] = {}
        self.matmuls: list[dict] = []
        self.destroyed: list[int] = []
        self.heuristics = 0
        self.candidates = candidates
        self.version = version
        self.reject = reject
        self.wrong = wrong
        self.cost_ms = cost_ms
        self.clock_ms = 0.0
        self.checks: list[bytes] = []

    def get_version(self):
        return self.version

    @staticmethod
    def algorithm(layouts, number):
        """The stand-in's ``cublasLtMatmulAlgo_t`` bytes for candidate ``number`` of a call
        with these A, B, C, D layouts (a real one depends on the problem, not on the
        descriptors' handles: another library object accepts it too)."""
        a, b, _, d = layouts
        words = [number + 1, a["ROWS"], a["COLS"], b["ROWS"], b["COLS"], d["ROWS"], d["COLS"]]
        return np.array([*words, d["TYPE"]], np.uint64).tobytes()

    def _new(self, **fields):
        handle = 100 + len(self.objects)
        self.objects[handle] = dict(fields)
        return handle

    @staticmethod
    def _value(dtype, pointer, size):
        raw = ctypes.string_at(pointer, size)
        assert len(raw) == np.dtype(dtype).itemsize, "attribute size"
        return np.frombuffer(raw, dtype)[0].item()

    def create(self):
        return self._new(kind="handle")

    def matmul_desc_create(self, compute_type, scale_type):
        return self._new(kind="desc", compute_type=compute_type, scale_type=scale_type)

    def matmul_desc_set_attribute(self, desc, attribute, pointer, size):
        dtype = self.real.get_matmul_desc_attribute_dtype(attribute)
        self.objects[desc][self.real.MatmulDescAttribute(attribute).name] = self._value(
            dtype, pointer, size
        )

    def matrix_layout_create(self, data_type, rows, cols, ld):
        return self._new(kind="layout", TYPE=data_type, ROWS=rows, COLS=cols, LD=ld)

    def matrix_layout_set_attribute(self, layout, attribute, pointer, size):
        dtype = self.real.get_matrix_layout_attribute_dtype(attribute)
        self.objects[layout][self.real.MatrixLayoutAttribute(attribute).name] = self._value(
            dtype, pointer, size
        )

    def matmul_preference_create(self):
        return self._new(kind="preference")

    def matmul_preference_set_attribute(self, preference, attribute, pointer, size):
        dtype = self.real.get_matmul_preference_attribute_dtype(attribute)
        name = self.real.MatmulPreferenceAttribute(attribute).name
        self.objects[preference][name] = self._value(dtype, pointer, size)

    def matmul_algo_get_heuristic(self, handle, desc, a, b, c, d, preference, count, out, found):
        self.heuristics += 1
        assert count >= 1 and self.objects[preference]["MAX_WORKSPACE_BYTES"] > 0
        layouts = [self.objects[x] for x in (a, b, c, d)]
        none = self.no_algorithm(self.objects[desc], layouts)
        returned = 0 if none else min(count, self.candidates)
        dtype = np.dtype(self.real.matmul_heuristic_result_dtype)
        results = np.frombuffer((ctypes.c_char * (dtype.itemsize * count)).from_address(out), dtype)
        for number in range(returned):
            algorithm = self.algorithm(layouts, number)
            results[number]["algo"] = np.frombuffer(algorithm, dtype["algo"])[0]
            results[number]["state"] = 0
        ctypes.c_int32.from_address(found).value = returned

    def matmul_algo_check(self, handle, desc, a, b, c, d, algo, result):
        algorithm = ctypes.string_at(algo, 64)
        self.checks.append(algorithm)
        layouts = [self.objects[x] for x in (a, b, c, d)]
        ours = {self.algorithm(layouts, n) for n in range(self.candidates)}
        if algorithm not in ours or self.reject(algorithm):
            raise RuntimeError("CUBLAS_STATUS_NOT_SUPPORTED (15)")
        dtype = np.dtype(self.real.matmul_heuristic_result_dtype)
        np.frombuffer((ctypes.c_char * dtype.itemsize).from_address(result), dtype)[0][
            "workspace_size"
        ] = 1024

    def _destroy(self, handle):
        self.destroyed.append(handle)

    matmul_preference_destroy = matrix_layout_destroy = matmul_desc_destroy = _destroy

    def matmul(self, handle, desc, alpha, a, adesc, b, bdesc, beta, c, cdesc, d, ddesc, algo,
               workspace, workspace_size, stream):  # fmt: skip
        record = dict(
            desc=dict(self.objects[desc]),
            a=(a, dict(self.objects[adesc])),
            b=(b, dict(self.objects[bdesc])),
            c=(c, dict(self.objects[cdesc])),
            d=(d, dict(self.objects[ddesc])),
            workspace=(workspace, workspace_size),
            stream=stream,
            algo=ctypes.string_at(algo, 64),
        )
        record["alpha"], record["beta"] = (
            self._scalar(record["desc"]["scale_type"], p) for p in (alpha, beta)
        )
        self.matmuls.append(record)
        if self.driver is not None:
            self.driver.run(("call", lambda: self._execute(record)), stream)
        else:
            self._execute(record)

    def _execute(self, record):
        """What the GPU does when the call runs: the GEMM, the time it takes, and the
        wrong result of a broken algorithm."""
        self.compute(record)
        self.clock_ms += self.cost_ms(record["algo"])
        if self.wrong(record["algo"]):
            from heron_test_support.fake_blas import Matrix

            address, layout = record["d"]
            dtype = {0: np.float32, 2: np.float16, 14: ml_dtypes.bfloat16}[layout["TYPE"]]
            d = Matrix(address, dtype, layout["ROWS"], layout["COLS"], layout["LD"],
                       layout.get("STRIDED_BATCH_OFFSET", 0))  # fmt: skip
            batch = layout.get("BATCH_COUNT", 1)
            d.write(self.memory, (d.read(self.memory, batch).astype(np.float64) + 1).astype(dtype))

    def _scalar(self, scale_type, pointer):
        dtype = {0: np.float32, 1: np.float64, 4: np.complex64, 5: np.complex128, 10: np.int32}
        dtype = dtype[int(scale_type)]  # cudaDataType_t: R_32F, R_64F, C_32F, C_64F, R_32I
        return np.frombuffer(ctypes.string_at(pointer, np.dtype(dtype).itemsize), dtype)[0]

    def compute(self, record):
        """What cuBLASLt computes from the recorded arguments (column-major)."""
        from heron_test_support.fake_blas import Matrix, column_major_gemm

        types = {0: np.float32, 1: np.float64, 2: np.float16, 14: ml_dtypes.bfloat16, 3: np.int8}
        types |= {28: ml_dtypes.float8_e4m3fn, 29: ml_dtypes.float8_e5m2}  # CUDA_R_8F_E4M3, E5M2
        types[10] = np.int32  # cudaDataType_t: CUDA_R_32I
        types |= {4: np.complex64, 5: np.complex128}  # CUDA_C_32F, CUDA_C_64F
        compute_type = record["desc"]["compute_type"]
        accumulate = {68: np.float32, 70: np.float64, 72: np.int32, 75: np.float32, 77: np.float32}
        accumulate = accumulate[compute_type]
        if int(record["desc"]["scale_type"]) in (4, 5):  # complex: the scale type's precision
            accumulate = np.result_type(accumulate, np.complex64)
        compute = {75: "bf16", 77: "tf32"}.get(compute_type, "")

        def matrix(address, layout):
            assert layout.get("ORDER", 0) == int(self.real.Order.COL)
            return Matrix(
                address,
                types[layout["TYPE"]],
                layout["ROWS"],
                layout["COLS"],
                layout["LD"],
                layout.get("STRIDED_BATCH_OFFSET", 0),
            )

        desc = record["desc"]
        batch = record["d"][1].get("BATCH_COUNT", 1)
        epilogue = self.real.Epilogue(desc.get("EPILOGUE", 1)).name
        bias = None
        if "BIAS" in epilogue:
            bias = (desc["BIAS_POINTER"], types[desc["BIAS_DATA_TYPE"]])
        column_major_gemm(
            self.memory,
            batch,
            matrix(*record["a"]),
            matrix(*record["b"]),
            matrix(*record["d"]),
            accumulate,
            record["alpha"],
            record["beta"],
            bias,
            activation="relu" if "RELU" in epilogue else "gelu" if "GELU" in epilogue else "none",
            transpose=lambda side: bool(desc.get(f"TRANS{side.upper()}", 0)),
            c=matrix(*record["c"]),
            compute=compute,
            aux=self._aux(desc, record["d"][1]) if "AUX" in epilogue else None,
            scale=self._scale(desc, "A") * self._scale(desc, "B"),
            d_scale=self._scale(desc, "D"),
        )

    def _scale(self, desc, matrix):
        """The f32 a ``{matrix}_SCALE_POINTER`` points at (1 where none is set)."""
        pointer = desc.get(f"{matrix}_SCALE_POINTER", 0)
        if not pointer:
            return 1.0
        return float(np.frombuffer(self.memory.read(pointer, 4), np.float32)[0])

    def _aux(self, desc, d_layout):
        """The aux matrix the descriptor points at: D's type and shape, its own leading
        dimension and batch stride (cuBLASLt's rules: both multiples of 8)."""
        from heron_test_support.fake_blas import Matrix

        types = {0: np.float32, 2: np.float16, 14: ml_dtypes.bfloat16}
        ld = desc["EPILOGUE_AUX_LD"]
        assert ld % 8 == 0 and ld >= d_layout["ROWS"], "EPILOGUE_AUX_LD"
        stride = desc.get("EPILOGUE_AUX_BATCH_STRIDE", 0)
        assert stride % 8 == 0 and (stride or d_layout.get("BATCH_COUNT", 1) == 1)
        return Matrix(
            desc["EPILOGUE_AUX_POINTER"],
            types[d_layout["TYPE"]],
            d_layout["ROWS"],
            d_layout["COLS"],
            ld,
            stride,
        )


@pytest.fixture
def fake_cublaslt():
    pytest.importorskip("nvmath", reason="the cuBLASLt stand-in borrows nvmath-python's enums")
    return FakeCublasLt
