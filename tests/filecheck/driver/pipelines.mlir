// xDSL's generic passes on graph IR: `graph` ops are Pure, so cse merges equal ones and
// dce/canonicalize drop unused ones; MLIR-style pipelines run passes in order.
// RUN: %tasoc opt %s -p cse | filecheck %s --check-prefix=CSE
// RUN: %tasoc opt %s -p dce | filecheck %s --check-prefix=DCE
// RUN: %tasoc opt %s -p canonicalize | filecheck %s --check-prefix=DCE
// RUN: %tasoc opt %s -p 'cse,dce,canonicalize' | filecheck %s --check-prefix=ALL

func.func @main(%x: tensor<2x3xf32>, %w: tensor<3x3xf32> {graph.param}) -> tensor<2x3xf32> {
  %0 = graph.matmul %x, %w : (tensor<2x3xf32>, tensor<3x3xf32>) -> tensor<2x3xf32>
  %1 = graph.matmul %x, %w : (tensor<2x3xf32>, tensor<3x3xf32>) -> tensor<2x3xf32>
  %unused = graph.relu %x : (tensor<2x3xf32>) -> tensor<2x3xf32>
  %ones = graph.ones {shape = array<i64: 2, 3>, dtype = f32} : tensor<2x3xf32>
  %2 = graph.add %ones, %0 : (tensor<2x3xf32>, tensor<2x3xf32>) -> tensor<2x3xf32>
  %3 = graph.add %2, %1 : (tensor<2x3xf32>, tensor<2x3xf32>) -> tensor<2x3xf32>
  func.return %3 : tensor<2x3xf32>
}

// cse keeps one matmul, used twice (and, finding it dead, drops the unused relu).
// CSE:      %0 = graph.matmul %x, %w
// CSE-NOT:  graph.matmul
// CSE-NOT:  graph.relu
// CSE:      %1 = graph.add %ones, %0
// CSE-NEXT: %2 = graph.add %1, %0
// CSE-NEXT: func.return %2

// dce and canonicalize drop the unused relu and keep both matmuls.
// DCE:      %0 = graph.matmul %x, %w
// DCE-NEXT: %1 = graph.matmul %x, %w
// DCE-NEXT: %ones = graph.ones
// DCE-NOT:  graph.relu
// DCE:      func.return %3

// ALL:      func.func @main
// ALL-NEXT:   %0 = graph.matmul %x, %w
// ALL-NEXT:   %ones = graph.ones
// ALL-NEXT:   %1 = graph.add %ones, %0
// ALL-NEXT:   %2 = graph.add %1, %0
// ALL-NEXT:   func.return %2
