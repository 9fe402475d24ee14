// search=belady (and dp) on a small MLP step whose peak is over the capacity: the planner
// swaps out what the backward pass reads late, prefetches it back, and the module
// records the capacity and the simulated times of the plan and its baselines (on the
// v100-swapadvisor preset). The placed program verifies within the capacity, and
// --verify-each checks the unplaced program computes the step. Without capacity= the
// planner takes the machine's device memory (the preset's 16 GB), which the step fits.
// RUN: %tasoc opt %s --verify-each -p 'autodiff{loss=mse optimizer=sgd lr=0.1},placement{search=belady capacity=60000}' | filecheck %s
// RUN: %tasoc opt %s -p 'autodiff{loss=mse optimizer=sgd lr=0.1},placement{search=lru capacity=60000}' | filecheck %s --check-prefix=LRU
// RUN: %tasoc opt %s -p 'autodiff{loss=mse optimizer=sgd lr=0.1},placement{search=belady capacity=1MiB}' | filecheck %s --check-prefix=FITS
// RUN: %tasoc opt %s -p 'autodiff{loss=mse optimizer=sgd lr=0.1},placement{search=dp-fixed-order capacity=60000}' | filecheck %s --check-prefix=DP
// RUN: not %tasoc opt %s -p 'autodiff{loss=mse optimizer=sgd lr=0.1},placement{search=belady capacity=4KiB}' 2>&1 | filecheck %s --check-prefix=SMALL
// RUN: %tasoc opt %s -p 'autodiff{loss=mse optimizer=sgd lr=0.1},placement{search=belady}' | filecheck %s --check-prefix=NOCAP

func.func @main(%x: tensor<64x32xf32>, %w1: tensor<32x64xf32> {graph.param},
                %w2: tensor<64x16xf32> {graph.param}) -> tensor<64x16xf32> {
  %h = graph.matmul %x, %w1 : tensor<64x64xf32>
  %r = graph.relu %h : tensor<64x64xf32>
  %y = graph.matmul %r, %w2 : tensor<64x16xf32>
  func.return %y : tensor<64x16xf32>
}

// CHECK:      builtin.module attributes {memory.capacity = 60000 : i64, memory.plan = {belady_seconds = {{.*}}, ideal_seconds = {{.*}}, lru_seconds = {{.*}}, peak_bytes = {{[0-9]+}} : i64,
// CHECK:        memory.swap_out
// CHECK:        memory.swap_in
// CHECK:        func.return
// LRU:        memory.capacity = 60000 : i64
// LRU:        memory.swap_in
// DP:         memory.capacity = 60000 : i64, memory.plan = {belady_seconds = {{.*}}, "dp-fixed-order_seconds" = {{.*}}, ideal_seconds
// DP:         memory.swap_in
// FITS:       memory.capacity = 1048576 : i64
// FITS-NOT:   memory.swap_
// SMALL:      {{^}}tasoc: error: placement: op {{[0-9]+}} ({{[a-z_0-9]+}}) needs {{[0-9]+}} bytes ({{[0-9.]+}} KiB) of device memory at once (its inputs and results, with what cannot be moved), over the capacity of 4096 bytes (4 KiB){{$}}
// NOCAP:      memory.capacity = 16000000000 : i64
// NOCAP-NOT:  memory.swap_
