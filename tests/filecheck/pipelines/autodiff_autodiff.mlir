// A training step is not differentiated again.
// RUN: not %tasoc opt %s -p 'autodiff{loss=mse},autodiff' 2>&1 | filecheck %s

func.func @main(%x: tensor<16x8xf32>, %w1: tensor<8x32xf32> {graph.param},
                %w2: tensor<32x4xf32> {graph.param}) -> tensor<16x4xf32> {
  %h = graph.matmul %x, %w1 : tensor<16x32xf32>
  %r = graph.relu %h : tensor<16x32xf32>
  %y = graph.matmul %r, %w2 : tensor<16x4xf32>
  func.return %y : tensor<16x4xf32>
}

// CHECK:     {{^}}tasoc: error: autodiff: @main is already a training step (it computes a loss); apply autodiff to the forward program [pipeline position 2, program kinds: training]{{$}}
// CHECK-NOT: {{.}}
