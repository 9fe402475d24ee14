// equality-rewrite's rules hold for unsharded graph ops: after soap-shard it refuses,
// and the pipeline fails before its first pass runs, writing nothing.
// RUN: rm -f %t
// RUN: not %tasoc opt %s -p 'autodiff{loss=mse},soap-shard{mesh=2 search=data-parallel},equality-rewrite{timeout=2}' -o %t 2>&1 | filecheck %s
// RUN: not test -e %t

func.func @main(%x: tensor<16x8xf32>, %w1: tensor<8x32xf32> {graph.param},
                %w2: tensor<32x4xf32> {graph.param}) -> tensor<16x4xf32> {
  %h = graph.matmul %x, %w1 : tensor<16x32xf32>
  %r = graph.relu %h : tensor<16x32xf32>
  %y = graph.matmul %r, %w2 : tensor<16x4xf32>
  func.return %y : tensor<16x4xf32>
}

// CHECK:     {{^}}tasoc: error: equality-rewrite: the program is sharded; run equality-rewrite before soap-shard (its rules are proven on unsharded graph ops) [pipeline position 3, program kinds: training, sharded]{{$}}
// CHECK-NOT: {{.}}
