// soap-shard prices swapping while it searches: under a memory cap no strategy meets
// without swaps, `place=belady` writes the fastest strategy with its swaps priced,
// and placement then writes them; without `place=` the search finds nothing.
// RUN: %tasoc opt %s -p 'autodiff{loss=mse},soap-shard{mesh=2 search=mcmc budget=10 seed=0 memory-cap=3500 place=belady},placement{search=belady capacity=3500}' | filecheck %s
// RUN: not %tasoc opt %s -p 'autodiff{loss=mse},soap-shard{mesh=2 search=mcmc budget=10 seed=0 memory-cap=3500}' 2>&1 | filecheck %s --check-prefix=NO-PLACE

func.func @main(%x: tensor<16x8xf32>, %w1: tensor<8x32xf32> {graph.param},
                %w2: tensor<32x4xf32> {graph.param}) -> tensor<16x4xf32> {
  %h = graph.matmul %x, %w1 : tensor<16x32xf32>
  %r = graph.relu %h : tensor<16x32xf32>
  %y = graph.matmul %r, %w2 : tensor<16x4xf32>
  func.return %y : tensor<16x4xf32>
}

// CHECK:      memory.capacity = 3500 : i64
// CHECK:      parallel.mesh @mesh ["d" = 2]
// CHECK:      memory.swap_out
// CHECK:      func.return

// NO-PLACE: {{^}}tasoc: error: soap-shard: no strategy fits under memory-cap=3500 bytes (3.4 KiB) per device: the smallest per-device memory found is {{[0-9]+}} bytes ({{[0-9.]+}} KiB){{$}}
