// `mesh=` must say what the module's own parallel.mesh says.
// RUN: not %tasoc opt %s -p 'soap-shard{mesh=8}' 2>&1 | filecheck %s

parallel.mesh @m ["d" = 4]
func.func @main(%x: tensor<8x8xf32>) -> tensor<8x8xf32> {
  %0 = graph.relu %x : tensor<8x8xf32>
  func.return %0 : tensor<8x8xf32>
}

// CHECK:     {{^}}tasoc: error: soap-shard: mesh=8 disagrees with the module's parallel.mesh @m ["d" = 4]{{$}}
// CHECK-NOT: {{.}}
