// equality-rewrite (search=egraph, the default) batches three one-row matmuls that
// share a weight into one on stacked rows: a batch chain, (x0, x1) then
// (concat(x0, x1), x2), each step the proven rule g3-0196 run backwards. retime=0
// keeps the choice the cost model's alone, so the output does not depend on timing.
// RUN: %tasoc opt %s -p 'equality-rewrite{retime=0}' --verify-each | filecheck %s
// RUN: %tasoc opt %s -p 'equality-rewrite{retime=0 search=backtrack}' | filecheck %s --check-prefix=PAIR

func.func @main(%x0: tensor<1x256xf32>, %x1: tensor<1x256xf32>, %x2: tensor<1x256xf32>,
                %w: tensor<256x256xf32> {graph.param}) -> (tensor<1x256xf32>, tensor<1x256xf32>, tensor<1x256xf32>) {
  %0 = graph.matmul %x0, %w : tensor<1x256xf32>
  %1 = graph.matmul %x1, %w : tensor<1x256xf32>
  %2 = graph.matmul %x2, %w : tensor<1x256xf32>
  func.return %0, %1, %2 : tensor<1x256xf32>, tensor<1x256xf32>, tensor<1x256xf32>
}

// CHECK:      %[[A:.*]] = graph.concat %x0, %x1 {axis = 0 : i64}
// CHECK-NEXT: %[[B:.*]] = graph.concat %[[A]], %x2 {axis = 0 : i64} {{.*}}tensor<3x256xf32>
// CHECK-NEXT: %[[C:.*]] = graph.matmul %[[B]], %w {{.*}}tensor<3x256xf32>
// CHECK-NOT:  graph.matmul
// CHECK:      graph.split %[[C]] {axis = 0 : i64, sizes = array<i64: 2, 1>}
// CHECK:      func.return

// Backtracking reaches the same graph by two pairwise applications of the rule.
// PAIR:       %[[M:.*]] = graph.matmul {{.*}}tensor<3x256xf32>
// PAIR-NOT:   graph.matmul
