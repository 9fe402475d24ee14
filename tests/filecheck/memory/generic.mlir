// The generic form of every memory op and attribute parses back to the same program.
// RUN: %tasoc opt %s --print-op-generic | %tasoc opt | filecheck %s

module attributes {memory.pool = #memory.pool<[16384 x 4]>} {
  func.func @main(%x: tensor<64x64xf32>) -> tensor<64x64xf32> {
    %h = memory.swap_out %x : tensor<64x64xf32, #memory.space<host>>
    %d = memory.swap_in %h : tensor<64x64xf32>
    memory.free %x
    %y = graph.relu %d : tensor<64x64xf32>
    func.return %y : tensor<64x64xf32>
  }
}

// CHECK:      builtin.module attributes {memory.pool = #memory.pool<[16384 x 4]>} {
// CHECK:        %h = memory.swap_out %x : tensor<64x64xf32, #memory.space<host>>
// CHECK-NEXT:   %d = memory.swap_in %h : tensor<64x64xf32>
// CHECK-NEXT:   memory.free %x
// CHECK-NEXT:   %y = graph.relu %d : tensor<64x64xf32>
