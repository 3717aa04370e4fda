module attributes {gpu.container_module} {
  gpu.module @kernels {
    gpu.func @vector_add(%a: memref<1000xf32>, %b: memref<1000xf32>, %c: memref<1000xf32>)
        kernel {
      %tid = gpu.thread_id x
      %bid = gpu.block_id x
      %bdim = gpu.block_dim x
      %base = arith.muli %bid, %bdim : index
      %i = arith.addi %base, %tid : index
      %n = arith.constant 1000 : index
      %in_bounds = arith.cmpi ult, %i, %n : index
      scf.if %in_bounds {
        %x = memref.load %a[%i] : memref<1000xf32>
        %y = memref.load %b[%i] : memref<1000xf32>
        %s = arith.addf %x, %y : f32
        memref.store %s, %c[%i] : memref<1000xf32>
      }
      gpu.return
    }
  }
}
