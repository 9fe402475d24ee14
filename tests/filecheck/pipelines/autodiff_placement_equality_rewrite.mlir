// A rewrite would not keep a placement's schedule, swaps and frees: after placement,
// equality-rewrite refuses.
// RUN: not %tasoc opt %s -p 'autodiff{loss=mse},placement,equality-rewrite{timeout=2}' 2>&1 | filecheck %s

func.func @main(%x: tensor<16x8xf32>, %w1: tensor<8x32xf32> {graph.param},
                %w2: tensor<32x4xf32> {graph.param}) -> tensor<16x4xf32> {
  %h = graph.matmul %x, %w1 : tensor<16x32xf32>
  %r = graph.relu %h : tensor<16x32xf32>
  %y = graph.matmul %r, %w2 : tensor<16x4xf32>
  func.return %y : tensor<16x4xf32>
}

// CHECK:     {{^}}tasoc: error: equality-rewrite: the program is placed; run equality-rewrite before placement {{.*}} [pipeline position 3, program kinds: training, placed]{{$}}
// CHECK-NOT: {{.}}
