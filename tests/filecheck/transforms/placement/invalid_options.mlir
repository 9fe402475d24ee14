// Bad options, programs and capacities fail with one line naming the pass, exit 1.
// RUN: not %tasoc opt %s -p 'placement{capacity=16XB}' 2>&1 | filecheck %s --check-prefix=UNIT
// RUN: not %tasoc opt %s -p 'placement{capacity=-3}' 2>&1 | filecheck %s --check-prefix=NEGATIVE
// RUN: not %tasoc opt %s -p 'placement{search=belady-ish}' 2>&1 | filecheck %s --check-prefix=SEARCH
// RUN: not %tasoc opt %s -p 'autodiff{loss=mse},placement{search=dp max-states=1 capacity=8KiB}' 2>&1 | filecheck %s --check-prefix=DP
// RUN: not %tasoc opt %s -p 'placement{prefetch=-1}' 2>&1 | filecheck %s --check-prefix=PREFETCH
// RUN: not %tasoc opt %s -p 'placement' 2>&1 | filecheck %s --check-prefix=FORWARD
// RUN: not %tasoc opt %s -p 'autodiff{loss=mse},placement{capacity=1KiB}' 2>&1 | filecheck %s --check-prefix=CAPACITY
// RUN: not %tasoc opt %s -p 'autodiff{loss=mse},placement{search=belady recompute=on capacity=1KiB}' 2>&1 | filecheck %s --check-prefix=RECOMPUTE
// RUN: not %tasoc opt %s -p 'placement{recompute=on}' 2>&1 | filecheck %s --check-prefix=OFFLOAD
// RUN: %tasoc opt %s -p 'autodiff{loss=mse},placement{capacity=16GiB}' | filecheck %s --check-prefix=FITS
// RUN: %tasoc opt %s -p 'autodiff{loss=mse},placement{capacity=1.5e9}' | filecheck %s --check-prefix=DECIMAL

func.func @main(%x: tensor<64x8xf32>, %w: tensor<8x8xf32> {graph.param}) -> tensor<64x8xf32> {
  %y = graph.matmul %x, %w : tensor<64x8xf32>
  %r = graph.relu %y : tensor<64x8xf32>
  func.return %r : tensor<64x8xf32>
}

// UNIT:       {{^}}tasoc: error: {{.*}}'placement'{{.*}}capacity: unknown unit 'XB' in byte size '16XB'{{.*}}
// NEGATIVE:   {{^}}tasoc: error: {{.*}}'placement'{{.*}}capacity: a byte size must not be negative, got -3{{$}}
// SEARCH:     {{^}}tasoc: error: {{.*}}'placement'{{.*}}search{{.*}}'offload-all', 'belady', 'lru', {{.*}}got 'belady-ish'{{$}}
// DP:       {{^}}tasoc: error: placement: search=dp: ROC's DP has at least 2 (execution state, cached tensor set) pairs even with the step as one op, over max-states=1{{$}}
// DP-NOT:   {{.}}
// PREFETCH:   {{^}}tasoc: error: {{.*}}'placement'{{.*}}prefetch{{.*}}
// FORWARD:    {{^}}tasoc: error: placement: @main is not a training step (it computes no loss); run autodiff before placement [pipeline position 1, program kinds: graph]{{$}}
// CAPACITY:   {{^}}tasoc: error: placement: search=offload-all holds {{[0-9]+}} bytes ({{[0-9.]+}} KiB) of device memory at op {{[0-9]+}} ('graph.{{[a-z_]+}}'), over the capacity of 1024 bytes (1 KiB){{$}}
// CAPACITY-NOT: {{.}}
// RECOMPUTE:  {{^}}tasoc: error: placement: op {{[0-9]+}} ({{[a-z_0-9]+}}) needs {{[0-9]+}} bytes {{.*}} over the capacity of 1024 bytes (1 KiB){{$}}
// RECOMPUTE-NOT: {{.}}
// OFFLOAD:    {{^}}tasoc: error: {{.*}}'placement'{{.*}}recompute=on needs a swapping planner (belady, lru, ga, dp-fixed-order); offload-all only swaps{{$}}
// FITS:       memory.capacity = 17179869184 : i64
// DECIMAL:    memory.capacity = 1500000000 : i64
