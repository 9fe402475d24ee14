// equality-rewrite replaces @main's body and nothing else: the module's attributes, a
// helper function, an op of another dialect and a declaration stay as they were, and
// so do @main's visibility and attributes, its argument and result attributes and
// every tensor's encoding (here the string "host", standing in for a memory space).
// RUN: %tasoc opt %s --allow-unregistered-dialect -p 'equality-rewrite{retime=0}' | filecheck %s

builtin.module attributes {my.module = 7 : i64} {
  func.func @helper(%a: tensor<4xf32>) -> tensor<4xf32> {
    %b = graph.relu %a : tensor<4xf32>
    func.return %b : tensor<4xf32>
  }
  "my.mesh"() {sym_name = "mesh"} : () -> ()
  func.func private @main(%x0: tensor<1x256xf32, "host"> {my.attr = 1 : i64},
                          %x1: tensor<1x256xf32, "host">,
                          %x2: tensor<1x256xf32, "host">,
                          %w: tensor<256x256xf32, "host"> {graph.param})
      -> (tensor<1x256xf32, "host"> {my.res = "a"}, tensor<1x256xf32, "host">,
          tensor<1x256xf32, "host">) attributes {my.fn} {
    %0 = graph.matmul %x0, %w : tensor<1x256xf32, "host">
    %1 = graph.matmul %x1, %w : tensor<1x256xf32, "host">
    %2 = graph.matmul %x2, %w : tensor<1x256xf32, "host">
    func.return %0, %1, %2 : tensor<1x256xf32, "host">, tensor<1x256xf32, "host">, tensor<1x256xf32, "host">
  }
  func.func private @decl(tensor<4xf32>) -> tensor<4xf32>
}

// CHECK:      builtin.module attributes {my.module = 7 : i64} {
// CHECK-NEXT:   func.func @helper(%a: tensor<4xf32>) -> tensor<4xf32> {
// CHECK-NEXT:     %b = graph.relu %a : {{.*}}tensor<4xf32>
// CHECK-NEXT:     func.return %b : tensor<4xf32>
// CHECK-NEXT:   }
// CHECK-NEXT:   "my.mesh"() {sym_name = "mesh"} : () -> ()
// CHECK-NEXT:   func.func private @main(%x0: tensor<1x256xf32, "host"> {my.attr = 1 : i64}, %x1: tensor<1x256xf32, "host">, %x2: tensor<1x256xf32, "host">, %w: tensor<256x256xf32, "host"> {graph.param}) -> (tensor<1x256xf32, "host"> {my.res = "a"}, tensor<1x256xf32, "host">, tensor<1x256xf32, "host">) attributes {my.fn} {
// CHECK:          %[[A:.*]] = graph.concat %x0, %x1 {axis = 0 : i64} : {{.*}}tensor<2x256xf32, "host">
// CHECK-NEXT:     %[[B:.*]] = graph.concat %[[A]], %x2 {axis = 0 : i64} : {{.*}}tensor<3x256xf32, "host">
// CHECK-NEXT:     %[[C:.*]] = graph.matmul %[[B]], %w : {{.*}}tensor<3x256xf32, "host">
// CHECK-NOT:      graph.matmul
// CHECK:          graph.split %[[C]] {axis = 0 : i64, sizes = array<i64: 2, 1>}
// CHECK:          func.return
// CHECK-NEXT:   }
// CHECK-NEXT:   func.func private @decl(tensor<4xf32>) -> tensor<4xf32>
// CHECK-NEXT: }
