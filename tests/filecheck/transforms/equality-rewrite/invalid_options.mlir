// A bad option fails when the pipeline is built, before any pass runs: one line naming
// the pass and the option, exit status 1.
// RUN: not %tasoc opt %s -p 'equality-rewrite{budget=0}' 2>&1 | filecheck %s --check-prefix=BUDGET
// RUN: not %tasoc opt %s -p 'equality-rewrite{alpha=0.5}' 2>&1 | filecheck %s --check-prefix=ALPHA
// RUN: not %tasoc opt %s -p 'equality-rewrite{memory-limit=12XB}' 2>&1 | filecheck %s --check-prefix=BYTES
// RUN: not %tasoc opt %s -p 'equality-rewrite{search=dfs}' 2>&1 | filecheck %s --check-prefix=SEARCH
// RUN: not %tasoc opt %s -p 'equality-rewrite{timeout=true}' 2>&1 | filecheck %s --check-prefix=TIMEOUT

func.func @main(%x: tensor<2x8xf32>) -> tensor<2x8xf32> {
  %0 = graph.relu %x : tensor<2x8xf32>
  func.return %0 : tensor<2x8xf32>
}

// BUDGET:      {{^}}tasoc: error: {{.*}}'equality-rewrite'{{.*}}: budget must be positive, got 0{{$}}
// BUDGET-NOT:  {{.}}
// ALPHA:       {{^}}tasoc: error: {{.*}}'equality-rewrite'{{.*}}: alpha must be at least 1, got 0.5{{$}}
// BYTES:       {{^}}tasoc: error: {{.*}}'equality-rewrite'{{.*}}: memory-limit: unknown unit 'XB' in byte size '12XB'
// SEARCH:      {{^}}tasoc: error: {{.*}}'equality-rewrite'{{.*}}search{{.*}}dfs{{.*$}}
// SEARCH-NOT:  {{.}}
// TIMEOUT:     {{^}}tasoc: error: {{.*}}'equality-rewrite'{{.*}}timeout{{.*}}true
