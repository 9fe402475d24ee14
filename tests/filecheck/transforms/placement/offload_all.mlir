// offload-all on a small MLP's training step: each saved activation (the input, the
// hidden relu, the error) is swapped out right after it is made and swapped back in
// one op before its first backward reader, which reads the copy; the input, an
// argument the caller would hold, is freed after its last forward reader. The
// module records the plan's figures; --verify-each checks the unplaced program.
// RUN: %tasoc opt %s --verify-each -p 'autodiff{loss=mse optimizer=sgd lr=0.1},placement{search=offload-all}' | filecheck %s

func.func @main(%x: tensor<16x8xf32>, %w1: tensor<8x32xf32> {graph.param},
                %w2: tensor<32x4xf32> {graph.param}) -> tensor<16x4xf32> {
  %h = graph.matmul %x, %w1 : tensor<16x32xf32>
  %r = graph.relu %h : tensor<16x32xf32>
  %y = graph.matmul %r, %w2 : tensor<16x4xf32>
  func.return %y : tensor<16x4xf32>
}

// CHECK:      builtin.module attributes {memory.plan = {peak_bytes = 8968 : i64, swapped_in_bytes = 2816 : i64, swapped_out_bytes = 2816 : i64, unplaced_peak_bytes = 9220 : i64}} {
// CHECK-NEXT:   func.func @main(%x: tensor<16x8xf32>, %labels: tensor<16x4xf32> {graph.labels}
// CHECK-NEXT:     %[[XH:.*]] = memory.swap_out %x : tensor<16x8xf32, #memory.space<host>>
// CHECK-NEXT:     %[[H:.*]] = graph.matmul %x, %w1 : tensor<16x32xf32>
// CHECK-NEXT:     memory.free %x
// CHECK-NEXT:     %[[R:.*]] = graph.relu %[[H]] : tensor<16x32xf32>
// CHECK-NEXT:     %[[RH:.*]] = memory.swap_out %[[R]] : tensor<16x32xf32, #memory.space<host>>
// CHECK-NEXT:     graph.matmul %[[R]], %w2
// CHECK:          %[[RD:.*]] = memory.swap_in %[[RH]] : tensor<16x32xf32>
// CHECK-NEXT:     %[[DR:.*]] = graph.matmul
// CHECK-NEXT:     graph.transpose %[[RD]]
// CHECK:          %[[XD:.*]] = memory.swap_in %[[XH]] : tensor<16x8xf32>
// CHECK-NEXT:     graph.relu_grad %[[RD]], %[[DR]]
// CHECK-NEXT:     graph.transpose %[[XD]]
// CHECK-NOT:      memory.
// CHECK:          func.return
