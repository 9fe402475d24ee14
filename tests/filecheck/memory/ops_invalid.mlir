// Placed programs the verifier refuses, each with its one-line message: compute ops
// read device values only, moves change the space and nothing else, a swap-in reads a
// host value, nothing reads a value after its free, and the schedule's replay stays
// within the capacity and the pool (the message names the op and the bytes).
// RUN: %tasoc opt %s --split-input-file --verify-diagnostics | filecheck %s

// A compute op fed a host value.
// CHECK: {{^}}'graph.matmul': operand #1 (64x64xf32, #memory.space<host>) is in host memory; compute ops read device values only (memory.swap_in it first)
func.func @main(%x: tensor<64x64xf32>, %w: tensor<64x64xf32, #memory.space<host>>) -> tensor<64x64xf32> {
  %y = graph.matmul %x, %w : tensor<64x64xf32>
  func.return %y : tensor<64x64xf32>
}

// -----

// A swap-in of a value never swapped out.
// CHECK: {{^}}'memory.swap_in': swaps in %x (64x64xf32), which is in device memory: only a value swapped out (or born on the host) can be swapped in
func.func @main(%x: tensor<64x64xf32>) -> tensor<64x64xf32> {
  %d = memory.swap_in %x : tensor<64x64xf32>
  func.return %d : tensor<64x64xf32>
}

// -----

// A swap-out of a host value.
// CHECK: {{^}}'memory.swap_out': swaps out %h (64x64xf32, #memory.space<host>), which is in host memory already
func.func @main(%h: tensor<64x64xf32, #memory.space<host>>) -> tensor<64x64xf32, #memory.space<host>> {
  %o = memory.swap_out %h : tensor<64x64xf32, #memory.space<host>>
  func.return %o : tensor<64x64xf32, #memory.space<host>>
}

// -----

// A move that changes the shape as well as the space.
// CHECK: {{^}}'memory.swap_out' moves 64x64xf32 to host memory, so its result is 64x64xf32, #memory.space<host>, not 64x32xf32, #memory.space<host>: a move changes only the space
func.func @main(%x: tensor<64x64xf32>) -> tensor<64x32xf32, #memory.space<host>> {
  %h = memory.swap_out %x : tensor<64x32xf32, #memory.space<host>>
  func.return %h : tensor<64x32xf32, #memory.space<host>>
}

// -----

// A value read after its free.
// CHECK: {{^}}'graph.relu' reads %x after its memory.free
func.func @main(%x: tensor<64x64xf32>) -> tensor<64x64xf32> {
  memory.free %x
  %y = graph.relu %x : tensor<64x64xf32>
  func.return %y : tensor<64x64xf32>
}

// -----

// A returned value freed.
// CHECK: {{^}}'memory.free' frees %y, which @main returns
func.func @main(%x: tensor<64x64xf32>) -> tensor<64x64xf32> {
  %y = graph.relu %x : tensor<64x64xf32>
  memory.free %y
  func.return %y : tensor<64x64xf32>
}

// -----

// A capacity the schedule exceeds: the op and the bytes. The argument (16 KiB) is
// held throughout; the matmul's result makes 32 KiB, the relu's 48 KiB.
// CHECK: {{^}}'graph.relu' holds 49152 bytes (48 KiB) of device memory with %z, over the capacity of 40000 bytes (39 KiB)
module attributes {memory.capacity = 40000 : i64} {
  func.func @main(%x: tensor<64x64xf32>) -> tensor<64x64xf32> {
    %y = graph.matmul %x, %x : tensor<64x64xf32>
    %z = graph.relu %y : tensor<64x64xf32>
    %o = graph.add %y, %z : tensor<64x64xf32>
    func.return %o : tensor<64x64xf32>
  }
}

// -----

// An in-flight swap-in counts from where it starts: written before the matmul, it
// holds its 16 KiB while the matmul runs (48 KiB with %x and %y).
// CHECK: {{^}}'graph.matmul' holds 49152 bytes (48 KiB) of device memory with %y, over the capacity of 40000 bytes (39 KiB)
module attributes {memory.capacity = 40000 : i64} {
  func.func @main(%x: tensor<64x64xf32>, %w: tensor<64x64xf32, #memory.space<host>>) -> tensor<64x64xf32> {
    %wd = memory.swap_in %w : tensor<64x64xf32>
    %y = graph.matmul %x, %x : tensor<64x64xf32>
    memory.free %x
    %o = graph.add %y, %wd : tensor<64x64xf32>
    func.return %o : tensor<64x64xf32>
  }
}

// -----

// A pool size class with no free object left.
// CHECK: {{^}}'graph.relu' needs a 16384-byte pool object for %z (16384 bytes), but all 2 of that size class are in use
module attributes {memory.pool = #memory.pool<[16384 x 2]>} {
  func.func @main(%x: tensor<64x64xf32>) -> tensor<64x64xf32> {
    %y = graph.matmul %x, %x : tensor<64x64xf32>
    %z = graph.relu %y : tensor<64x64xf32>
    func.return %z : tensor<64x64xf32>
  }
}

// -----

// A tensor larger than every size class.
// CHECK: {{^}}'graph.matmul' has a result of 16384 bytes (16 KiB) (%y), larger than the memory pool's largest size class (4096 bytes (4 KiB))
module attributes {memory.pool = #memory.pool<[4096 x 8]>} {
  func.func @main(%x: tensor<32x32xf32>) -> tensor<64x64xf32> {
    %r = graph.reshape %x {shape = array<i64: 16, 64>} : tensor<16x64xf32>
    %t = graph.transpose %r {perm = array<i64: 1, 0>} : tensor<64x16xf32>
    %y = graph.matmul %t, %r : tensor<64x64xf32>
    func.return %y : tensor<64x64xf32>
  }
}

// -----

// A pool larger than the capacity.
// CHECK: {{^}}'builtin.module' the memory pool takes 131072 bytes (128 KiB), over the capacity of 40000 bytes (39 KiB)
module attributes {memory.capacity = 40000 : i64, memory.pool = #memory.pool<[16384 x 8]>} {
  func.func @main(%x: tensor<64x64xf32>) -> tensor<64x64xf32> {
    func.return %x : tensor<64x64xf32>
  }
}

// -----

// A capacity that is no byte count.
// CHECK: {{^}}'builtin.module' memory.capacity must be a positive byte count (i64), got -3 : i64
module attributes {memory.capacity = -3 : i64} {
  func.func @main(%x: tensor<64x64xf32>) -> tensor<64x64xf32> {
    func.return %x : tensor<64x64xf32>
  }
}

// -----

// Pool classes out of order.
// CHECK: {{^}}a memory pool's size classes must be strictly ascending
module attributes {memory.pool = #memory.pool<[4096 x 2, 1024 x 2]>} {
  func.func @main(%x: tensor<4xf32>) -> tensor<4xf32> {
    func.return %x : tensor<4xf32>
  }
}

// -----

// A training step whose new param leaves in another space than it came in: the next
// step would read it from the wrong memory.
// CHECK: {{^}}'func.func' result #1 of @main (tensor<64x64xf32>) is marked graph.replaces = 1, but argument #1 has type tensor<64x64xf32, #memory.space<host>>
func.func @main(%x: tensor<64x64xf32>, %w: tensor<64x64xf32, #memory.space<host>> {graph.param}) -> (tensor<f32> {graph.loss}, tensor<64x64xf32> {graph.replaces = 1 : i64}) {
  %wd = memory.swap_in %w : tensor<64x64xf32>
  %y = graph.matmul %x, %wd : tensor<64x64xf32>
  %l = graph.reduce %y {kind = "sum", axes = array<i64: 0, 1>, keepdims = false} : tensor<f32>
  func.return %l, %wd : tensor<f32>, tensor<64x64xf32>
}

// -----

// In place on an op that is not element-wise: a matmul reads its operands' elements
// after it writes some of its result.
// CHECK: {{^}}'graph.matmul' is marked memory.in_place, but it is not an element-wise op
module {
  func.func @main(%x: tensor<64x64xf32>) -> tensor<64x64xf32> {
    %y = graph.relu %x : tensor<64x64xf32>
    %z = graph.matmul %y, %y {memory.in_place = 0 : i64} : tensor<64x64xf32>
    func.return %z : tensor<64x64xf32>
  }
}

// -----

// In place over an operand read later: the add still reads %y.
// CHECK: {{^}}'graph.relu' is marked memory.in_place, but %y does not die at it (read again later, returned, freed later, or read twice by it)
module {
  func.func @main(%x: tensor<64x64xf32>) -> tensor<64x64xf32> {
    %y = graph.matmul %x, %x : tensor<64x64xf32>
    %z = graph.relu %y {memory.in_place = 0 : i64} : tensor<64x64xf32>
    %o = graph.add %y, %z : tensor<64x64xf32>
    func.return %o : tensor<64x64xf32>
  }
}

// -----

// In place over an operand of another type: a broadcast add's smaller operand.
// CHECK: {{^}}'graph.add' is marked memory.in_place, but %b is not of its result's type
module {
  func.func @main(%x: tensor<64x64xf32>, %c: tensor<64xf32>) -> tensor<64x64xf32> {
    %b = graph.relu %c : tensor<64xf32>
    %o = graph.add %x, %b {memory.in_place = 1 : i64} : tensor<64x64xf32>
    func.return %o : tensor<64x64xf32>
  }
}
