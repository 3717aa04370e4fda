"""declared_functions: what an LLVM IR module calls and does not define, read from its text."""

from __future__ import annotations

from heron.emitters.pipeline.gpu_lowering import declared_functions

_IR = """
; ModuleID = 'LLVMDialectModule'
declare float @__nv_tanhf(float)

declare ptr @malloc(i64)
declare noundef i32 @llvm.nvvm.read.ptx.sreg.tid.x() #0
declare void @"odd$name.1"(ptr addrspace(1))
declare void @never_called(float)
define internal float @helper(float %0) {
  %t = call float @__nv_tanhf(float %0)
  ret float %t
}
define ptx_kernel void @k(ptr %0) {
  %m = call ptr @malloc(i64 4)
  %i = call i32 @llvm.nvvm.read.ptx.sreg.tid.x()
  call void @"odd$name.1"(ptr addrspace(1) null)
  ret void
}
"""


def test_used_declarations_are_read_with_their_names():
    assert declared_functions(_IR) == {
        "__nv_tanhf",
        "malloc",
        "llvm.nvvm.read.ptx.sreg.tid.x",
        "odd$name.1",
    }


def test_a_declaration_nothing_uses_is_left_out():
    assert "never_called" not in declared_functions(_IR)


def test_definitions_are_not_declarations():
    assert "helper" not in declared_functions(_IR) and "k" not in declared_functions(_IR)


def test_a_module_without_declarations_has_none():
    assert declared_functions("define void @k() {\n  ret void\n}\n") == frozenset()


def test_a_longer_name_is_not_a_use():
    text = "declare float @f(float)\ndeclare float @f2(float)\n" + (
        "define void @k() {\n  %a = call float @f2(float 0.0)\n  ret void\n}\n"
    )
    assert declared_functions(text) == {"f2"}
