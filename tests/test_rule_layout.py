"""The hand-written `layout` library (issue 34): each rule proven by z3 and true on small
tensors at every permutation, shipped with its recorded SHA-256, combined with the
generated library as `default+layout`, and firing on a transformer's attention."""

from __future__ import annotations

import itertools
import json
from pathlib import Path

import numpy as np
import pytest
from conftest import assert_one_line_error
from rewrite_helpers import assert_equal

from tasoc.backends.numpy import run_reference
from tasoc.ir import dag
from tasoc.ir.rules import Proof, Rule, RuleError
from tasoc.models.registry import build_model
from tasoc.passes.rewrite.apply import apply
from tasoc.passes.rewrite.equality_rewrite import EqualityRewritePass
from tasoc.passes.rewrite.library import (
    is_shipped,
    library_path,
    library_paths,
    load_library,
    read_rules,
)
from tasoc.passes.rewrite.match import directed, find_matches
from tasoc.verify.axioms import load_axioms
from tasoc.verify.instances import Instance, instances
from tasoc.verify.prover import prove_rules

LAYOUT = read_rules(library_path("layout"))


def test_the_layout_library_is_shipped_proven_and_recorded() -> None:
    path = library_path("layout")
    assert len(LAYOUT) == 12
    assert all(rule.is_proven and rule.proof_is_current for rule in LAYOUT)
    assert is_shipped(path, path.read_bytes()), "layout.rules changed without `make rules`"
    library = load_library("layout")
    assert library.trust == "shipped" and len(library.rules) == len(LAYOUT)
    assert {rule.inputs[0].rank for rule in LAYOUT} == {3, 4}  # the generator's are rank 2


def test_z3_proves_every_layout_rule_again() -> None:
    """What the file claims is what z3 finds now, from the axioms alone."""
    claims = [rule.with_proof(Proof.UNCHECKED) for rule in LAYOUT]
    proven = prove_rules(claims, load_axioms(), timeout_s=10, jobs=2)
    assert [rule.proof.status for rule in proven] == [Proof.PROVEN] * len(LAYOUT)


def distinct_instances(rule: Rule) -> list[Instance]:
    """One instance per parameter binding (every permutation), with dims up to 3: the
    one whose input dims differ the most, so a wrong permutation changes a shape."""
    chosen = []
    for _, group in itertools.groupby(instances(rule, bound=3), key=lambda i: i.params):
        chosen.append(max(group, key=lambda i: len({d for _, s in i.shapes for d in s})))
    return chosen


@pytest.mark.parametrize("rule", LAYOUT, ids=lambda rule: rule.name)
def test_each_layout_rule_holds_numerically_at_every_permutation(rule: Rule) -> None:
    found = distinct_instances(rule)
    assert len(found) >= 1
    if "perm" in str(rule):
        assert len(found) == len(list(itertools.permutations(range(rule.inputs[0].rank))))
    rng = np.random.default_rng(0)
    for instance in found:
        src, tgt = rule.instantiate(dict(instance.shapes), dict(instance.params))
        args = [rng.uniform(-1, 1, node.sigs[0].shape).astype(np.float32) for node in src.args]
        left = run_reference(dag.to_module(src), args)
        right = run_reference(dag.to_module(tgt), args)
        for a, b in zip(left, right, strict=True):
            np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-6)


def test_shipped_libraries_combine_with_plus() -> None:
    combined = load_library("default+layout")
    default = load_library("default")
    assert len(combined.rules) == len(default.rules) + len(LAYOUT)
    assert combined.trust == "shipped"
    assert combined.report()["rules"] == "default+layout"
    assert [p.name for p in library_paths("default+layout")] == ["default.rules", "layout.rules"]
    # A path is never split: a file may have '+' in its name.
    assert library_paths("my+rules.rules") == [Path("my+rules.rules")]
    with pytest.raises(RuleError, match="unknown rule library 'nosuch'"):
        load_library("default+nosuch")


def test_a_pass_with_an_unknown_library_in_a_combination_fails_when_built() -> None:
    with pytest.raises(ValueError, match=r"^rules: unknown rule library 'nosuch' \(shipped: "):
        EqualityRewritePass(rules="default+nosuch")


def test_attention_scaling_moves_off_the_scores_and_stays_equal() -> None:
    """On a small BERT, `bmm-scale-*-r4` match each layer's scaled scores, and applying
    either keeps the program's results (the reference interpreter)."""
    bert = dag.from_module(build_model("bert?layers=1&hidden=32&heads=2&seq=8"))
    found = [m for m in find_matches(bert, directed(LAYOUT)) if "bmm-scale" in m.rule.name]
    assert {m.rule.name.removesuffix(".rev") for m in found} == {
        "bmm-scale-left-r4",
        "bmm-scale-right-r4",
    }
    for match in found:
        rewritten = apply(bert, match)
        assert rewritten is not None
        assert_equal(bert, rewritten)


def test_the_command_line_takes_a_combination(tasoc, tmp_path: Path) -> None:
    report = tmp_path / "r.json"
    pipeline = 'equality-rewrite{rules="default+layout" retime=0 timeout=5}'
    done = tasoc("opt", "zoo:bert?layers=1&hidden=32&heads=2&seq=8", "-p", pipeline)
    assert done.code == 0, done
    done = tasoc("opt", "zoo:nasrnn?hidden=8&length=2", "-p", pipeline, "--report", report)
    assert done.code == 0, done
    section = json.loads(report.read_text())["passes"][0]["section"]
    assert section["rules"] == "default+layout" and section["rules_trust"] == "shipped"
    assert section["rules_loaded"] == len(load_library("default").rules) + len(LAYOUT)
    listed = tasoc("rules", "list", "default+layout")
    assert listed.code == 0 and "default+layout: 381 proven rules applied" in listed.out
    bad = 'equality-rewrite{rules="default+nosuch"}'
    assert_one_line_error(
        tasoc("opt", "zoo:nasrnn?hidden=8&length=2", "-p", bad),
        "pass 'equality-rewrite'",
        "unknown rule library 'nosuch'",
    )
