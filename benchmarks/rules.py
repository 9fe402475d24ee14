"""Generate, prune and verify rewrite rules at growing graph sizes; validate the axioms.

    .venv/bin/python benchmarks/rules.py [--max-ops 2,3,4] [--timeout 10] [--jobs 2] \
        [--bound 3] [--markdown]

For each size N this runs `generate(N)` over TASO's Table 2.1 operator set, then proves
every generated rule with `prove_rules` (axioms from `tasoc/verify/axioms.rules`), and
prints the count after every stage (thesis Table 2.3) with the time of each, and the
proof outcome. It then validates every axiom by symbolic execution up to `--bound` and
checks each for redundancy. Each size runs in a fresh child process, so its time does
not include the previous size's warm caches, and a size past `--budget` seconds is
stopped and reported rather than ending the benchmark.

TASO's numbers to compare with (Jia's thesis §2.9, TASO repository): 743 rules from
4-operator graphs, ~5 minutes to generate and ~10 minutes to verify in C++ on a large
machine; its shipped rule file has 133 rules, 15 of which its own verifier cannot
prove in 10 s. Results are recorded in docs/rules.md; this script only measures.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import signal
import subprocess
import sys
import time
from dataclasses import asdict, dataclass, field
from importlib.metadata import version


@dataclass
class SizeResult:
    """One size's measurements (a child prints it as JSON on its last line)."""

    max_ops: int
    outcome: str = "ran"
    """`ran`, or why the size did not finish."""
    stages: list[tuple[str, int, float]] = field(default_factory=list)
    generate_s: float = 0.0
    verify_s: float = 0.0
    rules: int = 0
    proven: int = 0
    not_proven: list[str] = field(default_factory=list)
    preconditioned: int = 0
    multi_output: int = 0


def measure(max_ops: int, timeout: float, jobs: int | None) -> SizeResult:
    """Generate and prove the rules of size `max_ops`, in this process."""
    from tasoc.passes.rewrite.generator import generate
    from tasoc.verify.axioms import load_axioms
    from tasoc.verify.prover import prove_rules

    start = time.perf_counter()
    rules, report = generate(max_ops)
    generated = time.perf_counter() - start
    start = time.perf_counter()
    checked = prove_rules(rules, load_axioms(), timeout, jobs=jobs)
    verified = time.perf_counter() - start
    proven = [rule for rule in checked if rule.is_proven]
    return SizeResult(
        max_ops=max_ops,
        stages=[(stage.name, stage.count, stage.seconds) for stage in report.stages],
        generate_s=generated,
        verify_s=verified,
        rules=len(rules),
        proven=len(proven),
        not_proven=[
            f"{rule.name}: {rule.proof.status.value} ({rule.proof.detail})"
            for rule in checked
            if not rule.is_proven
        ],
        preconditioned=sum(bool(rule.preconditions) for rule in proven),
        multi_output=sum(len(rule.src.outputs) > 1 for rule in proven),
    )


def run_size(max_ops: int, timeout: float, jobs: int | None, budget: float) -> SizeResult:
    """`measure` in a child interpreter, stopped after `budget` seconds."""
    command = [sys.executable, __file__, "--child", str(max_ops), "--timeout", str(timeout)]
    if jobs:
        command += ["--jobs", str(jobs)]
    # A session of its own, so that stopping it also stops the prover's worker processes.
    child = subprocess.Popen(
        command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, start_new_session=True
    )
    try:
        stdout, stderr = child.communicate(timeout=budget)
    except subprocess.TimeoutExpired:
        os.killpg(child.pid, signal.SIGKILL)
        child.communicate()
        return SizeResult(max_ops, outcome=f"stopped after {budget:g} s")
    if child.returncode != 0:
        lines = stderr.strip().splitlines()
        return SizeResult(max_ops, outcome=f"failed: {lines[-1] if lines else child.returncode}")
    return SizeResult(**json.loads(stdout.strip().splitlines()[-1]))


def axiom_checks(bound: int, timeout: float, jobs: int | None) -> list[str]:
    from tasoc.verify.axioms import load_axioms
    from tasoc.verify.prover import redundant_axioms
    from tasoc.verify.validate import validate_rules

    axioms = load_axioms()
    start = time.perf_counter()
    results = validate_rules(axioms, bound=bound, jobs=jobs)
    validated = time.perf_counter() - start
    start = time.perf_counter()
    redundant = [name for name, implied in redundant_axioms(axioms, timeout, jobs) if implied]
    checked = time.perf_counter() - start
    lines = [
        f"axioms: {len(axioms)}; validated at bound {bound}: "
        f"{sum(r.ok for r in results)} hold, {sum(not r.ok for r in results)} do not "
        f"({sum(r.checked for r in results)} instances, {validated:.1f} s)",
        f"redundancy: {len(redundant)} implied by the others ({checked:.1f} s)"
        + (f": {', '.join(redundant)}" if redundant else ""),
    ]
    lines += [r.summary() for r in results if not r.ok]
    return lines


def table(results: list[SizeResult]) -> list[str]:
    lines = [
        "| max ops | enumerated | candidates | float re-test | renaming | common subgraph "
        "| stated | final | generate s | proven | not proven | verify s | total s |",
        "|" + " ---: |" * 13,
    ]
    for result in results:
        if result.outcome != "ran":
            lines.append(f"| {result.max_ops} | {result.outcome} |" + " |" * 11)
            continue
        counts = " | ".join(str(count) for _, count, _ in result.stages)
        lines.append(
            f"| {result.max_ops} | {counts} | {result.generate_s:.1f} | {result.proven} "
            f"| {result.rules - result.proven} | {result.verify_s:.1f} "
            f"| {result.generate_s + result.verify_s:.1f} |"
        )
    return lines


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--max-ops", default="2,3,4", help="sizes, comma-separated")
    parser.add_argument("--timeout", type=float, default=10.0, help="z3 seconds per rule")
    parser.add_argument("--jobs", type=int, default=None)
    parser.add_argument("--bound", type=int, default=3, help="axiom validation bound")
    parser.add_argument("--budget", type=float, default=1800.0, help="seconds per size")
    parser.add_argument("--child", type=int, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child is not None:
        print(json.dumps(asdict(measure(args.child, args.timeout, args.jobs))))
        return
    print(
        f"{time.strftime('%Y-%m-%d')}, {platform.machine()}, {len(os.sched_getaffinity(0))} CPUs, "
        f"Python {platform.python_version()}, z3 {version('z3-solver')}, xdsl {version('xdsl')}"
    )
    results = []
    for size in (int(text) for text in args.max_ops.split(",")):
        print(f"max-ops {size} ...", file=sys.stderr, flush=True)
        results.append(run_size(size, args.timeout, args.jobs, args.budget))
    print("\n".join(table(results)))
    for result in results:
        print(
            f"max-ops {result.max_ops}: {result.preconditioned} proven rules with shape "
            f"preconditions, {result.multi_output} multi-output"
        )
        for line in result.not_proven:
            print(f"  not proven: {line}")
    print("\n".join(axiom_checks(args.bound, args.timeout, args.jobs)))


if __name__ == "__main__":
    main()
