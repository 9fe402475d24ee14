// Two small matmuls that read one input (TASO's Figure 2.2): both searches find one
// matmul on the concatenated weights, split into the two results. The concatenation
// reads weights only, so it is precomputed and one launch-bound matmul is cheaper than
// two. retime=0: the choice is the cost model's alone.
// RUN: %tasoc opt %s -p 'equality-rewrite{retime=0}' --verify-each | filecheck %s
// RUN: %tasoc opt %s -p 'equality-rewrite{retime=0 search=backtrack}' | filecheck %s

func.func @main(%x: tensor<4x32xf32>, %a: tensor<32x16xf32> {graph.param},
                %b: tensor<32x16xf32> {graph.param}) -> (tensor<4x16xf32>, tensor<4x16xf32>) {
  %0 = graph.matmul %x, %a : tensor<4x16xf32>
  %1 = graph.matmul %x, %b : tensor<4x16xf32>
  func.return %0, %1 : tensor<4x16xf32>, tensor<4x16xf32>
}

// CHECK:      %[[W:.*]] = graph.concat %a, %b {axis = 1 : i64} {{.*}}tensor<32x32xf32>
// CHECK-NEXT: %[[Y:.*]] = graph.matmul %x, %[[W]] {{.*}}tensor<4x32xf32>
// CHECK-NEXT: %[[Y0:.*]], %[[Y1:.*]] = graph.split %[[Y]] {axis = 1 : i64, sizes = array<i64: 16, 16>}
// CHECK-NEXT: func.return %[[Y0]], %[[Y1]]
