"""Which rules of a library match the suite's models: the rules that can fire at all.

    .venv/bin/python benchmarks/rule_coverage.py [--rules LIB[,LIB...]] [--models a,onnx:b] \
        [--baseline default] [--small] [--keep FILE]

For each model of `benchmarks/rewrite.py --suite` (the zoo's eight and the eleven
exported ONNX models, at their `--small` sizes with `--small`), the rules of each
library (a shipped name, `default+layout`, or a rule file, read as it is: matching does not
need a proof, so a file is not proven here) are matched against the model's graph in
both directions (`match.directed`), and the table gives each library's matches,
distinct rules and most matched rules per model. With `--baseline`, a rule counts as
*new* when neither of its directions is, up to renaming, a direction of a baseline
rule (`rule_digest` of
`match._canonical`), and the new rules that match are listed; `--keep FILE` writes them
as a rule file, ready for `tasoc rules verify` (what item 3 of issue 34 needed: of the
4-operator library, only the rules that can fire on the suite are worth proving).

A match here is one in the input graph: a rule that fires only after others have
rewritten the graph is not counted. `--predict T` asks the search instead: for each
model and each library (shipped names only: a pass proves a file on load), the pass
runs as `equality-rewrite{rules=LIB timeout=T retime=0}` (the e-graph search, the
analytic CPU model, no re-timing) and the table gives its predicted speedup (simulated)
and the rules on the way to its result.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
from collections import Counter
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from rewrite import (
    MODELS,
    ONNX_MODELS,
    ONNX_SCHEME,
    PASS,
    SHRUNK,
    SMALL_ONNX,
    load_original,
    onnx_spec,
    optimize,
    top_rules,
)

from tasoc.ir.dag import from_module
from tasoc.ir.rule_text import format_rules
from tasoc.ir.rules import Rule, rule_digest
from tasoc.models.registry import get_model
from tasoc.passes.rewrite.library import load_library, read_rules
from tasoc.passes.rewrite.match import _canonical, directed, find_matches


def library_rules(name: str) -> list[Rule]:
    """A shipped library's applicable rules, or every rule of a file (unproven)."""
    if "/" in name or name.endswith(".rules"):
        return read_rules(name)
    return list(load_library(name).rules)


def digests(rules: list[Rule]) -> set[str]:
    """The canonical digests of every direction of `rules`."""
    return {rule_digest(_canonical(rule)) for rule in directed(rules)}


def is_new(rule: Rule, known: set[str]) -> bool:
    return not any(rule_digest(_canonical(d)) in known for d in directed([rule]))


def suite_specs(names: list[str] | None, small: bool, shrink: bool = False) -> list[str]:
    """Model specs: zoo names (their small variants with `small`) and `onnx:NAME` (at
    `rewrite.SHRUNK` sizes with `shrink`)."""
    chosen = names or [*MODELS, *(ONNX_SCHEME + name for name in ONNX_MODELS)]
    specs = []
    for name in chosen:
        if name.startswith(ONNX_SCHEME):
            exported = name.removeprefix(ONNX_SCHEME)
            sizes = SMALL_ONNX if small else SHRUNK if shrink else {}
            specs.append(onnx_spec(exported, sizes.get(exported, {})))
        else:
            model = get_model(name)
            specs.append(model.spec(dict(model.small)) if small else model.spec())
    return specs


MATCHER_FAILURES: Counter[str] = Counter()
"""Rules whose matching raised (by name, with the models it raised on): unproven rules
of a generated file can trip the matcher (a KeyError on an input bound only through a
shape term); they are reported, not counted."""


def match_counts(spec: str, rules: list[Rule], folder: Path) -> Counter[str]:
    """Matches per rule name (both directions together) in `spec`'s input graph."""
    _, module = load_original(spec, folder)
    graph = from_module(module)
    counts: Counter[str] = Counter()
    for rule in directed(rules):
        name = rule.name.removesuffix(".rev")
        try:
            counts[name] += sum(1 for _ in find_matches(graph, [rule]))
        except KeyError:
            MATCHER_FAILURES[name] += 1
    return +counts  # only the rules that matched


def predict(specs: list[str], libraries: list[str], timeout: float) -> None:
    """The `--predict` table (module docstring)."""
    titles = [f"{name}: predicted | {name}: rules applied" for name in libraries]
    print("| model | " + " | ".join(titles) + " |")
    print("| --- |" + " ---: | --- |" * len(libraries))
    for spec in specs:
        cells = []
        for name in libraries:
            pipeline = f'{PASS}{{rules="{name}" timeout={timeout:g} retime=0}}'
            _, _, section = optimize(spec, pipeline)
            speedup = section.get("predicted_speedup")
            cells.append("—" if speedup is None else f"{speedup:.3f}")
            cells.append(top_rules(section.get("rules_applied")))
        print(f"| `{spec}` | " + " | ".join(cells) + " |", flush=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rules", default="default", help="comma-separated libraries or files")
    parser.add_argument("--models", help="comma-separated (default: the suite)")
    parser.add_argument("--baseline", help="a library whose rules are not new")
    parser.add_argument("--small", action="store_true", help="the models' small variants")
    parser.add_argument("--shrink", action="store_true", help="ONNX models at SHRUNK sizes")
    parser.add_argument("--keep", type=Path, help="write the new rules that match to FILE")
    parser.add_argument("--predict", type=float, help="run the search for T seconds instead")
    args = parser.parse_args()
    if args.predict is not None:
        specs = suite_specs(
            args.models.split(",") if args.models else None, args.small, args.shrink
        )
        predict(specs, args.rules.split(","), args.predict)
        return
    libraries = {name: library_rules(name) for name in args.rules.split(",")}
    known = digests(library_rules(args.baseline)) if args.baseline else set()
    specs = suite_specs(args.models.split(",") if args.models else None, args.small)
    titles = [f"{name}: matches / rules | {name}: most matched" for name in libraries]
    print("| model | " + " | ".join(titles) + " |")
    print("| --- |" + " ---: | --- |" * len(libraries))
    new: dict[str, Counter[str]] = {}
    with tempfile.TemporaryDirectory() as folder:
        for spec in specs:
            cells = []
            for name, rules in libraries.items():
                counts = match_counts(spec, rules, Path(folder))
                cells.append(f"{sum(counts.values())} / {len(counts)}")
                cells.append(top_rules(dict(counts)))
                if known:
                    by_name = {rule.name: rule for rule in rules}
                    fresh = {r: n for r, n in counts.items() if is_new(by_name[r], known)}
                    if fresh:
                        new.setdefault(name, Counter()).update({r: 1 for r in fresh})
                        cells[-2] += f" ({len(fresh)} new: {sum(fresh.values())} matches)"
            print(f"| `{spec}` | " + " | ".join(cells) + " |", flush=True)
    if MATCHER_FAILURES:
        print(f"\nthe matcher raised on {len(MATCHER_FAILURES)} rules: {dict(MATCHER_FAILURES)}")
    for name, models in new.items():
        print(f"\n{name}: {len(models)} new rules match (models they match in):")
        for rule, count in models.most_common():
            print(f"  {rule}: {count}")
        if args.keep:
            by_name = {rule.name: rule for rule in libraries[name]}
            args.keep.write_text(format_rules([by_name[rule] for rule in sorted(models)]))
            print(f"written to {args.keep}")


if __name__ == "__main__":
    main()
