// Bad options and meshes fail with one line naming the pass, exit status 1.
// RUN: not %tasoc opt %s -p 'soap-shard{mesh=0}' 2>&1 | filecheck %s --check-prefix=ZERO
// RUN: not %tasoc opt %s -p 'soap-shard{mesh=2x2x2x2}' 2>&1 | filecheck %s --check-prefix=AXES
// RUN: not %tasoc opt %s -p 'soap-shard{mesh=8 search=annealing}' 2>&1 | filecheck %s --check-prefix=SEARCH
// RUN: not %tasoc opt %s -p 'soap-shard' 2>&1 | filecheck %s --check-prefix=NOMESH

func.func @main(%x: tensor<2x8xf32>) -> tensor<2x8xf32> {
  %0 = graph.relu %x : tensor<2x8xf32>
  func.return %0 : tensor<2x8xf32>
}

// ZERO:       {{^}}tasoc: error: {{.*}}'soap-shard'{{.*}}: mesh must be a device count or up to three axis sizes such as 8 or 2x4, got 0{{$}}
// ZERO-NOT:   {{.}}
// AXES:       {{^}}tasoc: error: {{.*}}'soap-shard'{{.*}}: mesh must be {{.*}}got '2x2x2x2'{{$}}
// SEARCH:     {{^}}tasoc: error: {{.*}}'soap-shard'{{.*}}search{{.*}}'data-parallel', 'expert', 'mcmc', 'exhaustive', got 'annealing'{{$}}
// SEARCH-NOT: {{.}}
// NOMESH:     {{^}}tasoc: error: soap-shard: give mesh=N or mesh=AxB: the module has no parallel.mesh{{$}}
// NOMESH-NOT: {{.}}
