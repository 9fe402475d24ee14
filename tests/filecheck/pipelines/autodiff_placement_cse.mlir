// cse would merge equal ops across a placement's swaps and frees: it refuses placed
// programs (dce and canonicalize, which only drop unused ops, take them).
// RUN: not %tasoc opt %s -p 'autodiff{loss=mse},placement,cse' 2>&1 | filecheck %s
// RUN: %tasoc opt %s -p 'autodiff{loss=mse},placement,dce,canonicalize' | filecheck %s --check-prefix=DROPS

func.func @main(%x: tensor<16x8xf32>, %w1: tensor<8x32xf32> {graph.param},
                %w2: tensor<32x4xf32> {graph.param}) -> tensor<16x4xf32> {
  %h = graph.matmul %x, %w1 : tensor<16x32xf32>
  %r = graph.relu %h : tensor<16x32xf32>
  %y = graph.matmul %r, %w2 : tensor<16x4xf32>
  func.return %y : tensor<16x4xf32>
}

// CHECK:     {{^}}tasoc: error: cse: the program is placed; run cse before placement {{.*}} [pipeline position 3, program kinds: training, placed]{{$}}
// CHECK-NOT: {{.}}
// DROPS:     memory.swap_out
// DROPS:     memory.swap_in
