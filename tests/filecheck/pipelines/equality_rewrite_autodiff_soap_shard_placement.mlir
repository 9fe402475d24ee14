// The whole pipeline: rewrite the forward program, differentiate it, shard the step on
// 2 devices, then place each device's blocks within 3500 bytes (two thirds of the 5380
// bytes one device holds at its peak without placement). Swapped values keep their
// sharding under the host space, and the verifier replays the schedule per device.
// RUN: %tasoc opt %s -p 'equality-rewrite{timeout=2 retime=0},autodiff{loss=mse},soap-shard{mesh=2 search=data-parallel},placement{search=belady capacity=3500}' | filecheck %s

func.func @main(%x: tensor<16x8xf32>, %w1: tensor<8x32xf32> {graph.param},
                %w2: tensor<32x4xf32> {graph.param}) -> tensor<16x4xf32> {
  %h = graph.matmul %x, %w1 : tensor<16x32xf32>
  %r = graph.relu %h : tensor<16x32xf32>
  %y = graph.matmul %r, %w2 : tensor<16x4xf32>
  func.return %y : tensor<16x4xf32>
}

// CHECK:      builtin.module attributes {
// CHECK-SAME: parallel.machine = "cpu-2"
// CHECK-SAME: memory.capacity = 3500 : i64
// CHECK:      parallel.mesh @mesh ["d" = 2]
// CHECK:      memory.swap_out %{{.*}} : tensor<{{.*}}, #memory.space<host, #parallel.sharding<@mesh, [{{.*}}]>>>
// CHECK:      memory.swap_in %{{.*}} : tensor<{{.*}}, #parallel.sharding<@mesh, [{{.*}}]>>
// CHECK:      parallel.all_reduce
// CHECK:      func.return
