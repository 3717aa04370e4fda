module attributes {gpu.container_module} {
  gpu.module @kernels {
    gpu.func @tanh_vec4(%a: memref<4096xf32>, %c: memref<4096xf32>) kernel {
      %tid = gpu.thread_id x
      %bid = gpu.block_id x
      %bdim = gpu.block_dim x
      %base = arith.muli %bid, %bdim : index
      %t = arith.addi %base, %tid : index
      %four = arith.constant 4 : index
      %i = arith.muli %t, %four : index
      %n = arith.constant 4096 : index
      %in_bounds = arith.cmpi ult, %i, %n : index
      scf.if %in_bounds {
        %x = vector.load %a[%i] {alignment = 16} : memref<4096xf32>, vector<4xf32>
        %y = math.tanh %x : vector<4xf32>
        vector.store %y, %c[%i] {alignment = 16} : memref<4096xf32>, vector<4xf32>
      }
      gpu.return
    }
  }
}
