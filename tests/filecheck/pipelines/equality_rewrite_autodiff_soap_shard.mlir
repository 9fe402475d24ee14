// The order the contracts take: rewrite the forward program, differentiate it, shard
// the step.
// RUN: %tasoc opt %s -p 'equality-rewrite{timeout=2 retime=0},autodiff{loss=mse},soap-shard{mesh=2 search=data-parallel}' | filecheck %s

func.func @main(%x: tensor<16x8xf32>, %w1: tensor<8x32xf32> {graph.param},
                %w2: tensor<32x4xf32> {graph.param}) -> tensor<16x4xf32> {
  %h = graph.matmul %x, %w1 : tensor<16x32xf32>
  %r = graph.relu %h : tensor<16x32xf32>
  %y = graph.matmul %r, %w2 : tensor<16x4xf32>
  func.return %y : tensor<16x4xf32>
}

// CHECK:      parallel.mesh @mesh ["d" = 2]
// CHECK-NEXT: func.func @main(
// CHECK-SAME: {graph.loss}
// CHECK:      parallel.all_reduce
// CHECK:      func.return
