// The arithmetic, comparison, logic, cast, broadcast and gather ops, the new reduce
// kinds and the element types f64, i8, i16, ui8 and i1 parse, verify and print back;
// printing is stable (a second round trip prints the same text).
// RUN: %tasoc opt %s | filecheck %s
// RUN: %tasoc opt %s | %tasoc opt - | filecheck %s

// Unary ops keep their operand's type; neg and abs take integers too.
// CHECK-LABEL: func.func @unary
// CHECK-NEXT:    %0 = graph.neg %x : tensor<2x3xf64>
// CHECK-NEXT:    %1 = graph.exp %0 : tensor<2x3xf64>
// CHECK-NEXT:    %2 = graph.log %1 : tensor<2x3xf64>
// CHECK-NEXT:    %3 = graph.sqrt %2 : tensor<2x3xf64>
// CHECK-NEXT:    %4 = graph.reciprocal %3 : tensor<2x3xf64>
// CHECK-NEXT:    %5 = graph.erf %4 : tensor<2x3xf64>
// CHECK-NEXT:    %6 = graph.abs %n : tensor<4xi8>
// CHECK-NEXT:    %7 = graph.neg %6 : tensor<4xi8>
// CHECK-NEXT:    func.return %5, %7 : tensor<2x3xf64>, tensor<4xi8>
func.func @unary(%x: tensor<2x3xf64>, %n: tensor<4xi8>) -> (tensor<2x3xf64>, tensor<4xi8>) {
  %0 = graph.neg %x : tensor<2x3xf64>
  %1 = graph.exp %0 : tensor<2x3xf64>
  %2 = graph.log %1 : tensor<2x3xf64>
  %3 = graph.sqrt %2 : tensor<2x3xf64>
  %4 = graph.reciprocal %3 : tensor<2x3xf64>
  %5 = graph.erf %4 : tensor<2x3xf64>
  %6 = graph.abs %n : tensor<4xi8>
  %7 = graph.neg %6 : tensor<4xi8>
  func.return %5, %7 : tensor<2x3xf64>, tensor<4xi8>
}

// Binary ops broadcast NumPy-style.
// CHECK-LABEL: func.func @binary
// CHECK-NEXT:    %0 = graph.sub %a, %b : tensor<2x3xi16>
// CHECK-NEXT:    %1 = graph.div %0, %b : tensor<2x3xi16>
// CHECK-NEXT:    %2 = graph.pow %1, %b : tensor<2x3xi16>
// CHECK-NEXT:    %3 = graph.max %2, %a : tensor<2x3xi16>
// CHECK-NEXT:    %4 = graph.min %3, %b : tensor<2x3xi16>
// CHECK-NEXT:    func.return %4 : tensor<2x3xi16>
func.func @binary(%a: tensor<2x3xi16>, %b: tensor<3xi16>) -> tensor<2x3xi16> {
  %0 = graph.sub %a, %b : tensor<2x3xi16>
  %1 = graph.div %0, %b : tensor<2x3xi16>
  %2 = graph.pow %1, %b : tensor<2x3xi16>
  %3 = graph.max %2, %a : tensor<2x3xi16>
  %4 = graph.min %3, %b : tensor<2x3xi16>
  func.return %4 : tensor<2x3xi16>
}

// Comparisons make i1, which the logic ops and where take.
// CHECK-LABEL: func.func @select
// CHECK-NEXT:    %0 = graph.compare %a, %b {predicate = "ne"} : tensor<2x3xi1>
// CHECK-NEXT:    %1 = graph.not %0 : tensor<2x3xi1>
// CHECK-NEXT:    %2 = graph.and %1, %flags : tensor<2x3xi1>
// CHECK-NEXT:    %3 = graph.or %2, %flags : tensor<2x3xi1>
// CHECK-NEXT:    %4 = graph.xor %3, %0 : tensor<2x3xi1>
// CHECK-NEXT:    %5 = graph.where %4, %a, %b : tensor<2x3xui8>
// CHECK-NEXT:    func.return %5 : tensor<2x3xui8>
func.func @select(%a: tensor<2x3xui8>, %b: tensor<1xui8>, %flags: tensor<3xi1>) -> tensor<2x3xui8> {
  %0 = graph.compare %a, %b {predicate = "ne"} : tensor<2x3xi1>
  %1 = graph.not %0 : tensor<2x3xi1>
  %2 = graph.and %1, %flags : tensor<2x3xi1>
  %3 = graph.or %2, %flags : tensor<2x3xi1>
  %4 = graph.xor %3, %0 : tensor<2x3xi1>
  %5 = graph.where %4, %a, %b : tensor<2x3xui8>
  func.return %5 : tensor<2x3xui8>
}

// A cast names its target type as a type attribute.
// CHECK-LABEL: func.func @casts
// CHECK-NEXT:    %0 = graph.cast %x {to = i1} : tensor<4xi1>
// CHECK-NEXT:    %1 = graph.cast %0 {to = f16} : tensor<4xf16>
// CHECK-NEXT:    %2 = graph.cast %1 {to = ui8} : tensor<4xui8>
// CHECK-NEXT:    func.return %2 : tensor<4xui8>
func.func @casts(%x: tensor<4xf32>) -> tensor<4xui8> {
  %0 = graph.cast %x {to = i1} : tensor<4xi1>
  %1 = graph.cast %0 {to = f16} : tensor<4xf16>
  %2 = graph.cast %1 {to = ui8} : tensor<4xui8>
  func.return %2 : tensor<4xui8>
}

// broadcast's shape is the whole result; gather's result is data's dims before the
// axis, the indices', then data's after it; reduce gains min and prod.
// CHECK-LABEL: func.func @shapes
// CHECK-NEXT:    %0 = graph.broadcast %x {shape = array<i64: 5, 2, 3>} : tensor<5x2x3xf32>
// CHECK-NEXT:    %1 = graph.gather %0, %i {axis = -1 : i64} : tensor<5x2x4x1xf32>
// CHECK-NEXT:    %2 = graph.reduce %1 {kind = "min", axes = array<i64: 0>, keepdims = false} : tensor<2x4x1xf32>
// CHECK-NEXT:    %3 = graph.reduce %2 {kind = "prod", axes = array<i64: 1, 2>, keepdims = true} : tensor<2x1x1xf32>
// CHECK-NEXT:    func.return %3 : tensor<2x1x1xf32>
func.func @shapes(%x: tensor<1x3xf32>, %i: tensor<4x1xi32>) -> tensor<2x1x1xf32> {
  %0 = graph.broadcast %x {shape = array<i64: 5, 2, 3>} : tensor<5x2x3xf32>
  %1 = graph.gather %0, %i {axis = -1 : i64} : tensor<5x2x4x1xf32>
  %2 = graph.reduce %1 {kind = "min", axes = array<i64: 0>, keepdims = false} : tensor<2x4x1xf32>
  %3 = graph.reduce %2 {kind = "prod", axes = array<i64: 1, 2>, keepdims = true} : tensor<2x1x1xf32>
  func.return %3 : tensor<2x1x1xf32>
}
