"""What CUDA conditional graph nodes need: kernels that set a node's condition on the device.

A while loop or a conditional inside a CUDA graph (CUDA 12.4+) is a
conditional node (``cuGraphAddNode`` with ``CU_GRAPH_NODE_TYPE_CONDITIONAL``)
whose condition a kernel upstream of it sets with ``cudaGraphSetConditional``,
a device function of the CUDA device runtime library (``libcudadevrt.a``).
:data:`SET_CONDITION_PTX` holds two such kernels, written for heron's
predicates and selectors:

- ``heron_set_while(handle, predicate)``: the condition is the pred byte at
  ``predicate`` (nonzero: run the loop body again);
- ``heron_set_branch(handle, selector, is_s32, branch, count)``: the condition
  is whether the selector picks ``branch`` of ``count``: a pred picks branch 0
  when true and 1 when false, an s32 picks its value, and an index out of
  range (negative too) picks the last branch, as XLA's conditional does
  (``heron.hlo.control_flow.branch_index``);
- ``heron_set_count(handle, counter, count)`` and ``heron_count_down(handle,
  counter)``: a loop whose trip count the compiler proved runs no condition: the
  first stores ``count`` (the WHILE node's passes) in the s32 at ``counter`` and
  sets the condition to ``count > 0``; the second, last in the node's body,
  decrements it and sets the condition to what is left ``> 0``.

``cudaGraphSetConditional`` is one of the device functions the driver
resolves when it loads a module (as ``vprintf``): ptxas accepts the call in a
whole-program compile, leaving the symbol for the loader, and refuses any
other unresolved name. So the device loads this PTX with a plain
``cuModuleLoadData`` (the driver JIT-compiles it for the device), once, when it
first records a loop or a conditional; no device-runtime library is linked.
"""

from __future__ import annotations

__all__ = [
    "BRANCH_KERNEL",
    "COUNTDOWN_KERNEL",
    "COUNT_KERNEL",
    "MINIMUM_DRIVER",
    "SET_CONDITION_PTX",
    "WHILE_KERNEL",
]

WHILE_KERNEL = "heron_set_while"
BRANCH_KERNEL = "heron_set_branch"
COUNT_KERNEL = "heron_set_count"
COUNTDOWN_KERNEL = "heron_count_down"
#: cuDriverGetVersion's value from which conditional nodes exist (CUDA 12.4).
MINIMUM_DRIVER = 12040

#: Every kernel's ending: the condition (in ``%value``) handed to the node's handle.
_SET_AND_RETURN = """\
    {
        .param .b64 handle_argument;
        .param .b32 value_argument;
        st.param.b64 [handle_argument], %handle;
        st.param.b32 [value_argument], %value;
        call.uni cudaGraphSetConditional, (handle_argument, value_argument);
    }
    ret;
}
"""

SET_CONDITION_PTX = (
    """\
.version 8.4
.target sm_70
.address_size 64

.extern .func cudaGraphSetConditional
(
    .param .b64 handle,
    .param .b32 value
);

.visible .entry heron_set_while(
    .param .u64 heron_set_while_handle,
    .param .u64 heron_set_while_predicate
)
{
    .reg .pred %taken;
    .reg .b16 %byte;
    .reg .b32 %value;
    .reg .b64 %handle, %address;

    ld.param.u64 %handle, [heron_set_while_handle];
    ld.param.u64 %address, [heron_set_while_predicate];
    cvta.to.global.u64 %address, %address;
    ld.global.u8 %byte, [%address];
    setp.ne.s16 %taken, %byte, 0;
    selp.u32 %value, 1, 0, %taken;
"""
    + _SET_AND_RETURN
    + """
.visible .entry heron_set_branch(
    .param .u64 heron_set_branch_handle,
    .param .u64 heron_set_branch_selector,
    .param .u32 heron_set_branch_is_s32,
    .param .u32 heron_set_branch_branch,
    .param .u32 heron_set_branch_count
)
{
    .reg .pred %wide, %negative, %too_large, %out_of_range, %picked;
    .reg .b16 %byte;
    .reg .b32 %is_s32, %branch, %count, %last, %index, %from_pred, %value;
    .reg .b64 %handle, %address;

    ld.param.u64 %handle, [heron_set_branch_handle];
    ld.param.u64 %address, [heron_set_branch_selector];
    ld.param.u32 %is_s32, [heron_set_branch_is_s32];
    ld.param.u32 %branch, [heron_set_branch_branch];
    ld.param.u32 %count, [heron_set_branch_count];
    cvta.to.global.u64 %address, %address;
    setp.ne.u32 %wide, %is_s32, 0;
    @%wide bra SELECTOR_S32;
    ld.global.u8 %byte, [%address];
    setp.ne.s16 %picked, %byte, 0;
    selp.u32 %index, 0, 1, %picked;
    bra.uni COMPARE;
SELECTOR_S32:
    ld.global.s32 %index, [%address];
    sub.u32 %last, %count, 1;
    setp.lt.s32 %negative, %index, 0;
    setp.ge.s32 %too_large, %index, %count;
    or.pred %out_of_range, %negative, %too_large;
    selp.u32 %index, %last, %index, %out_of_range;
COMPARE:
    setp.eq.u32 %picked, %index, %branch;
    selp.u32 %value, 1, 0, %picked;
"""
    + _SET_AND_RETURN
    + """
.visible .entry heron_set_count(
    .param .u64 heron_set_count_handle,
    .param .u64 heron_set_count_counter,
    .param .u32 heron_set_count_count
)
{
    .reg .pred %taken;
    .reg .b32 %count, %value;
    .reg .b64 %handle, %address;

    ld.param.u64 %handle, [heron_set_count_handle];
    ld.param.u64 %address, [heron_set_count_counter];
    ld.param.u32 %count, [heron_set_count_count];
    cvta.to.global.u64 %address, %address;
    st.global.u32 [%address], %count;
    setp.gt.s32 %taken, %count, 0;
    selp.u32 %value, 1, 0, %taken;
"""
    + _SET_AND_RETURN
    + """
.visible .entry heron_count_down(
    .param .u64 heron_count_down_handle,
    .param .u64 heron_count_down_counter
)
{
    .reg .pred %taken;
    .reg .b32 %count, %value;
    .reg .b64 %handle, %address;

    ld.param.u64 %handle, [heron_count_down_handle];
    ld.param.u64 %address, [heron_count_down_counter];
    cvta.to.global.u64 %address, %address;
    ld.global.u32 %count, [%address];
    sub.s32 %count, %count, 1;
    st.global.u32 [%address], %count;
    setp.gt.s32 %taken, %count, 0;
    selp.u32 %value, 1, 0, %taken;
"""
    + _SET_AND_RETURN
)
