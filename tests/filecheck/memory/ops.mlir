// Every memory op and attribute prints as it parses: a parameter in host memory is
// swapped in for the matmul, an activation goes out to the host and comes back for
// its last reader, the input is freed after its last reader (an argument's device
// memory is the caller's until freed), and the module records capacity, pool and plan.
// RUN: %tasoc opt %s | filecheck %s
// RUN: %tasoc opt %s | %tasoc opt | filecheck %s

module attributes {memory.capacity = 200000 : i64, memory.plan = {peak_bytes = 49152 : i64}, memory.pool = #memory.pool<[1024 x 4, 16384 x 8]>} {
  func.func @main(%x: tensor<64x64xf32>, %w: tensor<64x64xf32, #memory.space<host>> {graph.param}) -> (tensor<64x64xf32>, tensor<64x64xf32, #memory.space<host>>) {
    %wd = memory.swap_in %w : tensor<64x64xf32>
    %y = graph.matmul %x, %wd : tensor<64x64xf32>
    %yh = memory.swap_out %y : tensor<64x64xf32, #memory.space<host>>
    %z = graph.relu %y : tensor<64x64xf32>
    memory.free %x
    %yd = memory.swap_in %yh : tensor<64x64xf32>
    %o = graph.add %z, %yd : tensor<64x64xf32>
    func.return %o, %yh : tensor<64x64xf32>, tensor<64x64xf32, #memory.space<host>>
  }
}

// CHECK:      builtin.module attributes {memory.capacity = 200000 : i64, memory.plan = {peak_bytes = 49152 : i64}, memory.pool = #memory.pool<[1024 x 4, 16384 x 8]>} {
// CHECK-NEXT:   func.func @main(%x: tensor<64x64xf32>, %w: tensor<64x64xf32, #memory.space<host>> {graph.param}) -> (tensor<64x64xf32>, tensor<64x64xf32, #memory.space<host>>) {
// CHECK-NEXT:     %wd = memory.swap_in %w : tensor<64x64xf32>
// CHECK-NEXT:     %y = graph.matmul %x, %wd : tensor<64x64xf32>
// CHECK-NEXT:     %yh = memory.swap_out %y : tensor<64x64xf32, #memory.space<host>>
// CHECK-NEXT:     %z = graph.relu %y : tensor<64x64xf32>
// CHECK-NEXT:     memory.free %x
// CHECK-NEXT:     %yd = memory.swap_in %yh : tensor<64x64xf32>
// CHECK-NEXT:     %o = graph.add %z, %yd : tensor<64x64xf32>
// CHECK-NEXT:     func.return %o, %yh : tensor<64x64xf32>, tensor<64x64xf32, #memory.space<host>>
