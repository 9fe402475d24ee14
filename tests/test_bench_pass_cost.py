"""benchmarks/pass_cost.py: one quick row (AlexNet at FlexFlow's shapes on 4 K80s, 3
proposals, the timeout on the CPU clock): the setup, chains and after split the pass's
CPU, and the clock and the chains' timer are taken off again."""

from __future__ import annotations

import pytest
from conftest import load_benchmark

from tasoc.passes import search
from tasoc.passes.soap import mcmc


def test_a_quick_row_splits_the_passs_cpu(capsys: pytest.CaptureFixture[str]) -> None:
    bench = load_benchmark("pass_cost")
    after, halving = search.Deadline.__dict__["after"], mcmc._halving
    (row,) = bench.main(
        ["--models", "alexnet", "--devices", "4", "--timeout", "1e6", "--budget", "3"]
    )
    assert search.Deadline.__dict__["after"] is after and mcmc._halving is halving
    assert (row.model, row.proposals, row.stopped) == ("alexnet", 3, "budget")
    assert row.setup > 0 and row.chains > 0 and row.after > 0 and row.step > 0
    assert row.per_second == pytest.approx(3 / row.chains)
    assert f"| alexnet | {row.ops} | {row.setup:.2f} |" in capsys.readouterr().out
