// Gradients of a sharded forward program are not supported: autodiff runs first.
// RUN: not %tasoc opt %s -p 'soap-shard{mesh=2},autodiff{loss=mse}' 2>&1 | filecheck %s

func.func @main(%x: tensor<16x8xf32>, %w1: tensor<8x32xf32> {graph.param},
                %w2: tensor<32x4xf32> {graph.param}) -> tensor<16x4xf32> {
  %h = graph.matmul %x, %w1 : tensor<16x32xf32>
  %r = graph.relu %h : tensor<16x32xf32>
  %y = graph.matmul %r, %w2 : tensor<16x4xf32>
  func.return %y : tensor<16x4xf32>
}

// CHECK:     {{^}}tasoc: error: autodiff: the program is sharded; run autodiff before soap-shard {{.*}} [pipeline position 2, program kinds: graph, sharded]{{$}}
// CHECK-NOT: {{.}}
