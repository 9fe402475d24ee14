# One entry point for setting up, testing and demonstrating tasoc.
#   make demo   set up .venv, optimize zoo:bert and zoo:nasrnn, run them against the reference,
#               train a small classifier and a zoo model for a few steps, shard and place steps
#   make test   set up .venv and run the whole test suite (lit + pytest), as CI does
#   make test-long   the suite with thousands of examples per property (not in CI)
#   make rules  regenerate the shipped rewrite-rule library (docs/rules.md)
VENV    := .venv
PY      := $(VENV)/bin/python
TASOC   := $(VENV)/bin/tasoc
STAMP   := $(VENV)/.installed
PYTEST_WORKERS := -n auto --maxprocesses=4 --dist worksteal

.PHONY: setup test test-long lit pytest lint demo bench rules bench-rules clean

setup: $(STAMP)

$(STAMP): pyproject.toml
	@PYTHON_BIN=$$(scripts/find-python) && \
	  { [ -x $(PY) ] || $$PYTHON_BIN -m venv $(VENV); }
	$(PY) -m pip install -q --upgrade pip
	$(PY) -m pip install -q -e '.[test]'
	@touch $(STAMP)

test: setup
	$(VENV)/bin/lit -q tests/filecheck
	$(VENV)/bin/pytest $(PYTEST_WORKERS)

# What CI does not run (docs/decisions.md, "The test suite"): thousands of examples per
# property, and every zoo model's gradients against jax.grad.
test-long: setup
	HYPOTHESIS_PROFILE=long $(VENV)/bin/pytest $(PYTEST_WORKERS)

lint: setup
	$(VENV)/bin/ruff check tasoc tests benchmarks
	$(VENV)/bin/ruff format --check tasoc tests benchmarks

demo: setup
	$(TASOC) zoo
	$(TASOC) opt 'zoo:bert?layers=2&hidden=256' -p canonicalize,cse -o demo-bert.mlir
	$(TASOC) opt demo-bert.mlir | head -n 20
	$(TASOC) run demo-bert.mlir --check
	$(TASOC) run zoo:nasrnn --check --bench 10
	$(TASOC) opt 'zoo:nasrnn?hidden=256' -p 'equality-rewrite{timeout=60}' --verify-each \
	  --report demo-rewrite.json -o demo-nasrnn.mlir
	$(TASOC) run demo-nasrnn.mlir --check
	$(TASOC) opt examples/classifier.mlir \
	  -p 'autodiff{loss=softmax-cross-entropy optimizer=adam lr=0.01}' -o demo-step.mlir
	$(TASOC) run demo-step.mlir --steps 30
	$(TASOC) run 'zoo:alexnet?batch=2&image=63&width=0.125&train=sgd' --steps 5
	$(TASOC) opt 'zoo:alexnet?batch=16&image=64' \
	  -p 'autodiff{loss=softmax-cross-entropy optimizer=sgd lr=0.01},soap-shard{mesh=8 search=expert}' \
	  -o demo-sharded.mlir
	$(TASOC) run demo-sharded.mlir --devices 8 --check --audit
	$(TASOC) opt 'zoo:transformer?layers=2&hidden=256&seq=64&batch=4' \
	  -p 'autodiff{loss=mse optimizer=adam lr=0.001},placement{search=offload-all params=host}' \
	  -o demo-placed.mlir
	$(TASOC) run demo-placed.mlir --check --mode runtime
	$(TASOC) opt 'zoo:transformer?layers=2&hidden=64&seq=16&batch=8' \
	  -p 'equality-rewrite{timeout=10},autodiff{loss=mse},soap-shard{mesh=8 machine=cpu-8 search=mcmc budget=200 seed=0},placement{search=belady capacity=1MB}' \
	  -o demo-joint.mlir
	$(TASOC) run demo-joint.mlir --devices 8 --mode runtime --check

bench: setup
	$(PY) benchmarks/ir.py

# Regenerate the shipped rewrite-rule library: every rule up to 3 ops over TASO's
# Table 2.1 operators, proven with z3 (unproven ones are reported and left out), and
# record its SHA-256: only the file with that hash is applied without proving it again.
# The hand-written `layout` library (issue 34) is proven again in place, and recorded.
rules: setup
	$(TASOC) rules generate --max-ops 3 --verify -o tasoc/passes/rewrite/rules/default.rules
	$(TASOC) rules verify tasoc/passes/rewrite/rules/layout.rules -o tasoc/passes/rewrite/rules/layout.rules
	cd tasoc/passes/rewrite/rules && sha256sum default.rules > default.rules.sha256 \
	  && sha256sum layout.rules > layout.rules.sha256

bench-rules: setup
	$(PY) benchmarks/rules.py

clean:
	rm -rf $(VENV) demo-bert.mlir demo-nasrnn.mlir demo-rewrite.json demo-step.mlir demo-sharded.mlir .pytest_cache
