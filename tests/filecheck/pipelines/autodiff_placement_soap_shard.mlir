// soap-shard plans an unplaced program: after placement it refuses.
// RUN: not %tasoc opt %s -p 'autodiff{loss=mse},placement,soap-shard{mesh=2}' 2>&1 | filecheck %s

func.func @main(%x: tensor<16x8xf32>, %w1: tensor<8x32xf32> {graph.param},
                %w2: tensor<32x4xf32> {graph.param}) -> tensor<16x4xf32> {
  %h = graph.matmul %x, %w1 : tensor<16x32xf32>
  %r = graph.relu %h : tensor<16x32xf32>
  %y = graph.matmul %r, %w2 : tensor<16x4xf32>
  func.return %y : tensor<16x4xf32>
}

// CHECK:     {{^}}tasoc: error: soap-shard: the program is placed; run soap-shard before placement (soap-shard{place=belady} prices swapping while it searches) [pipeline position 3, program kinds: training, placed]{{$}}
// CHECK-NOT: {{.}}
