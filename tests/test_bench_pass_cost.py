"""benchmarks/pass_cost.py: one quick row (AlexNet at FlexFlow's shapes on 4 K80s, 3
proposals, the timeout on the two-core clock): the setup, chains and after split the
pass's CPU, the ILP's thread is timed, and the clock and the timers are taken off
again."""

from __future__ import annotations

import pytest
from conftest import load_benchmark

from tasoc.passes import search
from tasoc.passes.soap import auto, mcmc


def test_a_quick_row_splits_the_passs_cpu(capsys: pytest.CaptureFixture[str]) -> None:
    bench = load_benchmark("pass_cost")
    hooks = (search.Deadline.__dict__["after"], mcmc._halving, auto.solve_ilp, auto._joined)
    options = "--models alexnet --devices 4 --timeout 1e6 --budget 3 --clock main"
    (row,) = bench.main(options.split())
    assert (search.Deadline.__dict__["after"], mcmc._halving, auto.solve_ilp, auto._joined) == hooks
    # the main thread's setup, with the ILP's CPU it waited for, is part of every thread's
    assert 0 < row.setup_main <= row.setup + 1e-3 and row.ilp > 0 and 0 <= row.waited <= row.ilp
    assert (row.model, row.proposals, row.stopped) == ("alexnet", 3, "budget")
    assert row.setup > 0 and row.chains > 0 and row.after > 0 and row.step > 0
    assert row.per_second == pytest.approx(3 / row.chains)
    assert f"| alexnet | {row.ops} | {row.setup:.2f} |" in capsys.readouterr().out
