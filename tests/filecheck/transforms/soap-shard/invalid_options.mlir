// Bad options and meshes fail with one line naming the pass, exit status 1.
// RUN: not %tasoc opt %s -p 'soap-shard{mesh=0}' 2>&1 | filecheck %s --check-prefix=ZERO
// RUN: not %tasoc opt %s -p 'soap-shard{mesh=2x2x2x2}' 2>&1 | filecheck %s --check-prefix=AXES
// RUN: not %tasoc opt %s -p 'soap-shard{mesh=8 search=annealing}' 2>&1 | filecheck %s --check-prefix=SEARCH
// RUN: not %tasoc opt %s -p 'soap-shard' 2>&1 | filecheck %s --check-prefix=NOMESH
// RUN: not %tasoc opt %s -p 'soap-shard{mesh=4 search=ft pick=2}' 2>&1 | filecheck %s --check-prefix=PICK
// RUN: not %tasoc opt %s -p 'soap-shard{mesh=4 search=ft objective=frontier pick=99}' 2>&1 | filecheck %s --check-prefix=NOPOINT
// RUN: not %tasoc opt %s -p 'soap-shard{mesh=4 search=ft objective=mini-time memory-cap=1}' 2>&1 | filecheck %s --check-prefix=CAP
// RUN: not %tasoc opt %s -p 'soap-shard{search=ft objective=profile devices=1-64 machine=v100-tensoropt}' 2>&1 | filecheck %s --check-prefix=RANGE

func.func @main(%x: tensor<2x8xf32>) -> tensor<2x8xf32> {
  %0 = graph.relu %x : tensor<2x8xf32>
  func.return %0 : tensor<2x8xf32>
}

// ZERO:       {{^}}tasoc: error: {{.*}}'soap-shard'{{.*}}: mesh must be a device count or up to three axis sizes such as 8 or 2x4, got 0{{$}}
// ZERO-NOT:   {{.}}
// AXES:       {{^}}tasoc: error: {{.*}}'soap-shard'{{.*}}: mesh must be {{.*}}got '2x2x2x2'{{$}}
// SEARCH:     {{^}}tasoc: error: {{.*}}'soap-shard'{{.*}}search{{.*}}'auto', 'data-parallel', 'owt', 'dlrm-hybrid', 'megatron', 'layer-wise', 'zero', 'expert', 'mcmc', 'exhaustive', 'ft', 'greedy', 'ilp', 'roc', got 'annealing'{{$}}
// SEARCH-NOT: {{.}}
// NOMESH:     {{^}}tasoc: error: soap-shard: give mesh=N or mesh=AxB (or machine=, whose devices it then uses): the module has no parallel.mesh{{$}}
// NOMESH-NOT: {{.}}
// PICK:       {{^}}tasoc: error: {{.*}}'soap-shard'{{.*}}pick= chooses a frontier point: give objective=frontier{{$}}
// PICK-NOT:   {{.}}
// NOPOINT:    {{^}}tasoc: error: soap-shard: pick=99 names no frontier point: the frontier has {{[0-9]+}} (pick=1 to {{[0-9]+}}, fastest or smallest){{$}}
// NOPOINT-NOT: {{.}}
// CAP:        {{^}}tasoc: error: soap-shard: memory-cap=1 bytes is under the frontier's least memory per device, {{[0-9]+ bytes( \([0-9.]+ KiB\))?}} (FT's estimate){{$}}
// CAP-NOT:    {{.}}
// RANGE:      {{^}}tasoc: error: soap-shard: devices=1-64 asks for 64 devices, more than machine v100-tensoropt's 16{{$}}
// RANGE-NOT:  {{.}}
