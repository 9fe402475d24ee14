// search=ga on a small MLP step whose peak is over the capacity: SwapAdvisor's genetic
// algorithm searches schedules and memory pools for the swap planner, for 40 simulated
// plans from seed 0, and writes its plan (never slower than belady's) with the
// capacity and the simulated times of the plan and its baselines (v100-swapadvisor).
// The placed program verifies within the capacity (and its pool, when the plan has
// one), and --verify-each checks the unplaced program computes the step. The same
// seed writes the same program.
// RUN: %tasoc opt %s --verify-each -p 'autodiff{loss=mse optimizer=sgd lr=0.1},placement{search=ga capacity=60000 budget=40 seed=0}' | filecheck %s
// RUN: %tasoc opt %s -p 'autodiff{loss=mse optimizer=sgd lr=0.1},placement{search=ga capacity=60000 budget=40 seed=0}' > %t.1.mlir
// RUN: %tasoc opt %s -p 'autodiff{loss=mse optimizer=sgd lr=0.1},placement{search=ga capacity=60000 budget=40}' --seed 0 > %t.2.mlir
// RUN: diff %t.1.mlir %t.2.mlir
// RUN: not %tasoc opt %s -p 'autodiff{loss=mse optimizer=sgd lr=0.1},placement{search=ga capacity=60000 population=1}' 2>&1 | filecheck %s --check-prefix=POPULATION

func.func @main(%x: tensor<64x32xf32>, %w1: tensor<32x64xf32> {graph.param},
                %w2: tensor<64x16xf32> {graph.param}) -> tensor<64x16xf32> {
  %h = graph.matmul %x, %w1 : tensor<64x64xf32>
  %r = graph.relu %h : tensor<64x64xf32>
  %y = graph.matmul %r, %w2 : tensor<64x16xf32>
  func.return %y : tensor<64x16xf32>
}

// CHECK:      builtin.module attributes {memory.capacity = 60000 : i64, memory.plan = {belady_seconds = {{.*}}, ga_seconds = {{.*}}, ideal_seconds = {{.*}}, lru_seconds = {{.*}}, peak_bytes = {{[0-9]+}} : i64,
// CHECK:        memory.swap_out
// CHECK:        memory.swap_in
// CHECK:        func.return
// POPULATION: {{^}}tasoc: error: {{.*}}'placement'{{.*}}population must be at least 2, got 1{{$}}
