"""`cost=xla`: regions and their canonical form, the region cache file, the fallback
where no timing can be taken, measuring charged to the pass's timeout (on a fake
clock), and benchmarks/cost_rank.py's smoke run.

Region times are faked (`fake_timing`) except where the measurement itself is the
subject, so the tests are quick and independent of the machine's load."""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

import pytest
from conftest import load_benchmark
from search_helpers import FakeClock

from tasoc.cost import AnalyticFallback, MeasuredCost, OutOfTime, XlaCost, make_cost_model
from tasoc.cost import measured as measured_module
from tasoc.cost import xla as xla_module
from tasoc.cost.fusion import plan_fusion
from tasoc.cost.xla import kernels, measure_region, region_dag, region_key, regions
from tasoc.ir.dag import Dag, Node, from_module
from tasoc.ir.shapes import DType, TensorSig
from tasoc.models import build_model
from tasoc.passes.report import RunReport, reporting
from tasoc.passes.rewrite import equality_rewrite as rewrite_module
from tasoc.passes.rewrite.equality_rewrite import DEFAULT_RETIME, EqualityRewritePass
from tasoc.passes.search import Clock, Deadline

F32 = DType.F32


def two_layers(rows: int = 8, width: int = 16, second_padding: str = "same") -> Dag:
    """x -> conv+relu -> conv+relu: two regions of the same form when the second conv
    has the first's attributes and shapes."""
    x = Node.arg(0, "x", TensorSig((1, width, rows, rows), F32))
    w1 = Node.arg(1, "w", TensorSig((width, width, 3, 3), F32), is_param=True)
    w2 = Node.arg(2, "v", TensorSig((width, width, 3, 3), F32), is_param=True)
    conv = {"strides": (1, 1), "activation": "none", "groups": 1}
    h = Node("relu", [Node("conv2d", [x.out, w1.out], padding="same", **conv).out])
    y = Node("relu", [Node("conv2d", [h.out, w2.out], padding=second_padding, **conv).out])
    return Dag([x, w1, w2], [y.out])


def test_equal_regions_have_one_key_whatever_their_names_and_places() -> None:
    first, second = regions(two_layers())
    assert len(first.ops) == 2  # conv2d with its relu fused
    assert region_key(first) == region_key(second)


@pytest.mark.parametrize(
    "other",
    [two_layers(rows=10), two_layers(width=8), two_layers(second_padding="valid")],
    ids=["shape", "channels", "attributes"],
)
def test_a_region_of_another_shape_or_attribute_has_another_key(other: Dag) -> None:
    (key,) = {region_key(r) for r in regions(two_layers())}
    assert region_key(regions(other)[1]) != key  # "attributes": padding alone differs


def test_a_region_returns_what_leaves_it_and_reads_each_operand_once() -> None:
    x = Node.arg(0, "x", TensorSig((4, 4), F32))
    m = Node("matmul", [x.out, x.out])
    r = Node("relu", [m.out])
    dag = Dag([x], [r.out, m.out])  # m is returned: relu cannot take its kernel
    (first, second) = kernels(plan_fusion(dag))
    assert first == ([m], [m.out])
    region = region_dag(*first)
    assert len(region.args) == 1 and region_key(region).startswith("(4x4xf32)")
    assert second == ([r], [r.out])


@pytest.fixture
def fake_timing(monkeypatch: pytest.MonkeyPatch) -> list[Dag]:
    """Region times faked as 1 us per op (the dispatch floor 5 us); the regions timed,
    in order."""
    timed: list[Dag] = []

    def fake_region(region: Dag, samples: int = 5) -> float:
        timed.append(region)
        return 1e-6 * len(region.ops)

    monkeypatch.setattr(xla_module, "measure_region", fake_region)
    monkeypatch.setattr(xla_module, "measure_dispatch", lambda samples=5: 5e-6)
    monkeypatch.setattr(measured_module, "time_op", lambda *_, **__: 1e-6)
    return timed


def test_the_cost_is_the_regions_plus_one_dispatch_and_repeats_cost_nothing(
    tmp_path: Path, fake_timing: list[Dag]
) -> None:
    model = XlaCost(tmp_path)
    assert model.cost(two_layers()) == pytest.approx(5e-6 + 2 * 2e-6)
    assert (model.measured, len(fake_timing)) == (2, 1)  # the dispatch, one region form
    model.cost(two_layers())
    assert model.measured == 2
    assert model.cost(two_layers(rows=10)) > 0 and model.measured == 3


def test_the_cache_file_round_trips(tmp_path: Path, fake_timing: list[Dag]) -> None:
    first = XlaCost(tmp_path)
    cost = first.cost(two_layers())
    data = json.loads(first.path.read_text())
    assert first.path.name == f"regions-{first.device_name}.json"
    assert data["device"] == first.device_name and len(data["seconds"]) == 2
    again = XlaCost(tmp_path)
    assert again.cost(two_layers()) == cost
    assert again.measured == 0


@pytest.mark.parametrize(
    ("content", "reason"),
    [
        ("{not json", "corrupt"),
        ('{"seconds": [1, 2]}', "corrupt"),
        ("other device", "written for device 'gpu-h9000'"),
    ],
)
def test_an_unusable_cache_file_is_ignored_with_one_warning_and_rebuilt(
    tmp_path: Path, fake_timing: list[Dag], capsys: pytest.CaptureFixture[str],
    content: str, reason: str,
) -> None:  # fmt: skip
    path = XlaCost(tmp_path).path
    if content == "other device":
        good = json.loads(_written(tmp_path).read_text())
        content = json.dumps({**good, "device": "gpu-h9000", "seconds": {"x": 1.0}})
    path.write_text(content)
    capsys.readouterr()
    model = XlaCost(tmp_path)
    model.cost(two_layers())
    model.cost(two_layers(rows=10))
    err = capsys.readouterr().err.splitlines()
    assert len(err) == 1 and err[0].startswith("tasoc: warning: cost=xla: ignoring "), err
    assert reason in err[0] and "rebuilding" in err[0]
    rebuilt = json.loads(path.read_text())
    assert rebuilt["device"] == model.device_name and len(rebuilt["seconds"]) == 3
    assert "x" not in rebuilt["seconds"]


def _written(directory: Path) -> Path:
    """A valid cache file in `directory` (a fresh model's, after one graph)."""
    model = XlaCost(directory)
    model.cost(two_layers(width=4))
    return model.path


def test_a_region_is_measured_with_jax(tmp_path: Path) -> None:
    (region, _) = regions(two_layers(rows=4, width=4))
    assert measure_region(region, samples=1) >= 0.0


def test_without_a_device_to_time_on_the_pass_falls_back_to_analytic_and_says_so(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    def no_device() -> tuple[str, object]:
        raise RuntimeError("Unable to initialize backend 'cpu': no device\nmore")

    monkeypatch.setattr(xla_module, "current_device", no_device)
    model = make_cost_model("xla")
    assert isinstance(model, AnalyticFallback)
    assert model.reason == "timing unavailable: Unable to initialize backend 'cpu': no device"
    assert math.isfinite(model.cost(two_layers()))
    module = build_model("zoo:nasrnn?hidden=32&length=2")
    rewrite = EqualityRewritePass(search="backtrack", budget=2, timeout=60.0, cost="xla")
    report = RunReport()
    with reporting(report):
        rewrite.apply(None, module)  # type: ignore[arg-type]
    section = report.sections[rewrite.name]
    lines = [line for line in rewrite.summary(section).lines(rewrite.name) if "cost=xla" in line]
    assert lines == [
        "  cost=xla: timing unavailable: Unable to initialize backend 'cpu': no device; "
        "priced with the analytic CPU model"
    ]
    assert "retimed" not in section


def test_the_pass_searches_with_cost_xla(tmp_path: Path, fake_timing: list[Dag]) -> None:
    module = build_model("zoo:nasrnn?hidden=32&length=2")
    graph = from_module(module)
    rewrite = EqualityRewritePass(search="backtrack", budget=3, timeout=60.0, cost="xla", retime=0)
    report = RunReport()
    with reporting(report), pytest.MonkeyPatch.context() as patch:
        patch.setenv("TASOC_CACHE_DIR", str(tmp_path))
        rewrite.apply(None, module)  # type: ignore[arg-type]
    section = report.sections[rewrite.name]
    assert section["cost_model"].startswith("fused regions measured on ")
    assert "cost_fallback" not in section
    assert fake_timing and from_module(module).num_ops <= graph.num_ops


def test_cost_rank_prints_kendall_tau(
    tmp_path: Path, fake_timing: list[Dag], capsys: pytest.CaptureFixture[str]
) -> None:
    bench = load_benchmark("cost_rank")
    args = ["--models", "nasrnn,squeezenet", "--small", "--per-model", "2", "--repeats", "2"]
    args += ["--search-seconds", "0.2", "--cache-dir", str(tmp_path)]
    assert bench.main(args) == 0
    out = capsys.readouterr().out.splitlines()
    assert (
        out[0]
        == "| model | candidates | measured range (ms) | tau analytic | tau measured | tau xla |"
    )
    rows = {line.split(" | ")[0]: line.split(" | ") for line in out if line.startswith("| ")}
    assert set(rows) >= {"| `nasrnn`", "| `squeezenet`", "| all candidates"}
    pooled = rows["| all candidates"]
    assert pooled[1] == "4"
    assert all(-1 <= float(tau.strip(" |")) <= 1 for tau in pooled[3:])
    assert "Against each candidate's fastest round instead of its median:" in out


def test_cost_rank_refuses_an_unknown_model(capsys: pytest.CaptureFixture[str]) -> None:
    bench = load_benchmark("cost_rank")
    assert bench.main(["--models", "nosuch"]) == 1
    assert capsys.readouterr().err == "cost_rank.py: error: unknown model 'nosuch'\n"


def test_cost_xla_prices_this_machine_so_candidates_are_retimed_by_default(
    tmp_path: Path, fake_timing: list[Dag]
) -> None:
    model = XlaCost(tmp_path)
    assert EqualityRewritePass(cost="xla")._retime_count(model) == DEFAULT_RETIME
    assert EqualityRewritePass(cost="xla", retime=1)._retime_count(model) == 1


def test_the_summary_says_when_re_timing_measured_nothing_in_time() -> None:
    section = {"rules_applied": {}, "ops_before": 9, "ops_after": 9, "retimed": [],
               "retime_seconds": 0.4, "stopped": "timeout", "search_seconds": 30.0}  # fmt: skip
    assert EqualityRewritePass().summary(section).details == (
        "re-timing measured no candidate against the input in the 0.4 s left: kept the input",
        "stopped: timeout in 30 s",
    )


# --------------------------------------------------------------- measuring is charged


@pytest.fixture
def slow_timing(monkeypatch: pytest.MonkeyPatch) -> FakeClock:
    """Region and op measurements that each take one second of a fake clock (the
    dispatch floor none), so a test decides when a budget runs out, whatever the
    machine's load."""
    clock = FakeClock()

    def one_second(*_: object, **__: object) -> float:
        clock.now += 1.0
        return 1e-6

    monkeypatch.setattr(xla_module, "measure_region", one_second)
    monkeypatch.setattr(xla_module, "measure_dispatch", lambda samples=5: 5e-6)
    monkeypatch.setattr(measured_module, "time_op", one_second)
    return clock


def test_a_measurement_past_the_budget_is_refused_and_the_ones_before_are_kept(
    tmp_path: Path, slow_timing: FakeClock
) -> None:
    model = XlaCost(tmp_path)
    model.budget = Deadline.after(0.5, slow_timing)
    with pytest.raises(OutOfTime):
        model.cost(two_layers(second_padding="valid"))  # the first region ends past it
    assert model.measured == 2 and slow_timing.now == 1.0  # the dispatch and one region
    assert len(json.loads(model.path.read_text())["seconds"]) == 2  # saved all the same
    model.budget = Deadline.after(0.5, slow_timing)
    with pytest.raises(OutOfTime):  # the second ends past the budget: measured, not used
        model.cost(two_layers(second_padding="valid"))
    assert model.measured == 3 and slow_timing.now == 2.0
    model.budget = None
    assert model.cost(two_layers(second_padding="valid")) > 0 and model.measured == 3


def test_measured_ops_are_charged_to_the_budget_too(tmp_path: Path, slow_timing: FakeClock) -> None:
    model = MeasuredCost(tmp_path)
    model.budget = Deadline.after(1.5, slow_timing)
    with pytest.raises(OutOfTime):
        model.cost(two_layers())  # the floor, conv2d, relu: time for two
    assert slow_timing.now == 2.0


def rewrite_under_fake_clock(
    monkeypatch: pytest.MonkeyPatch, clock: FakeClock, timeout: float, **options: Any
) -> dict[str, Any]:
    """The report section of equality-rewrite{cost=xla} run on a small nasrnn, every
    deadline of the pass on `clock`."""

    class FakeDeadline(Deadline):
        @classmethod
        def after(cls, seconds: float, clock_: Clock = clock) -> Deadline:
            return Deadline.after(seconds, clock)

    monkeypatch.setattr(rewrite_module, "Deadline", FakeDeadline)
    monkeypatch.setenv("TASOC_CACHE_DIR", str(options.pop("cache_dir")))
    module = build_model("zoo:nasrnn?hidden=32&length=2")
    rewrite = EqualityRewritePass(cost="xla", retime=0, timeout=timeout, **options)
    report = RunReport()
    with reporting(report):
        rewrite.apply(None, module)  # type: ignore[arg-type]
    return report.sections[rewrite.name]


SEARCHES = [{"search": "backtrack", "budget": 50}, {"search": "egraph", "node_limit": 400}]


@pytest.mark.parametrize("options", SEARCHES, ids=["backtrack", "egraph"])
def test_the_search_stops_when_measuring_runs_past_its_timeout_and_says_so(
    tmp_path: Path,
    slow_timing: FakeClock,
    monkeypatch: pytest.MonkeyPatch,
    options: dict[str, Any],
) -> None:
    graph = from_module(build_model("zoo:nasrnn?hidden=32&length=2"))
    forms = len({region_key(region) for region in regions(graph)})
    # time to price the input (one second a region form) and half a candidate's region
    timeout = forms + 0.5
    section = rewrite_under_fake_clock(
        monkeypatch, slow_timing, timeout, cache_dir=tmp_path, **options
    )
    assert section["stopped"] == "timeout while measuring"
    assert section["cost_before"] > 0  # the input was priced in time
    assert slow_timing.now == forms + 1  # stopped by the candidate's first new region
    summary = EqualityRewritePass().summary(section)
    assert any(line.startswith("stopped: timeout while measuring") for line in summary.details)


@pytest.mark.parametrize("split_size", [None, 20], ids=["whole", "in pieces"])
def test_a_search_that_cannot_price_its_input_in_time_returns_it_unchanged(
    tmp_path: Path,
    slow_timing: FakeClock,
    monkeypatch: pytest.MonkeyPatch,
    split_size: int | None,
) -> None:
    section = rewrite_under_fake_clock(
        monkeypatch, slow_timing, 2.5, cache_dir=tmp_path, search="backtrack", split_size=split_size
    )
    assert section["stopped"] == "timeout while measuring"
    assert math.isnan(section["cost_before"]) and section["ops_after"] == section["ops_before"]
    assert slow_timing.now == 3.0
    assert EqualityRewritePass().summary(section).headline.startswith("the graph is unchanged")


def test_with_time_to_measure_the_search_stops_for_its_own_reasons(
    tmp_path: Path, slow_timing: FakeClock, monkeypatch: pytest.MonkeyPatch
) -> None:
    section = rewrite_under_fake_clock(
        monkeypatch, slow_timing, 1e6, cache_dir=tmp_path, search="backtrack", budget=3
    )
    assert section["stopped"] == "budget"
