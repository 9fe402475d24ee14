"""Shared by the tests: hypothesis profiles, and the driver tests' fixtures (run `tasoc`
in-process and read its output)."""

from __future__ import annotations

import importlib.util
import os
import sys
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from types import ModuleType

import jax
import pytest
from hypothesis import HealthCheck, settings

from tasoc.driver.main import main

TEST_DEVICES = 8
"""CPU devices JAX makes in the test process (before any test touches JAX: they are
fixed once its backends start), so sharded programs run in-process on meshes up to 8."""

jax.config.update("jax_num_cpu_devices", TEST_DEVICES)

TEST_XLA_FLAGS = "--xla_backend_optimization_level=0"
"""XLA's code generation unoptimized in the tests (this process and the `tasoc` runs it
starts): they check what programs compute and what tasoc decides, not how fast XLA's
code runs, and compiling is most of their time: at O0 nasnet's gradient check took
15 s, not 24 s. Set before JAX starts XLA, which reads `XLA_FLAGS` once."""

os.environ["XLA_FLAGS"] = f"{os.environ.get('XLA_FLAGS', '')} {TEST_XLA_FLAGS}".strip()


@dataclass
class Result:
    """Exit status and captured output of one in-process `tasoc` run."""

    code: int
    out: str
    err: str

    def __repr__(self) -> str:
        return f"Result({self.code}, out={self.out[-300:]!r}, err={self.err!r})"


@pytest.fixture(autouse=True, scope="session")
def private_cache(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    """The run's own cache folder (`TASOC_CACHE_DIR`: proofs of user rule files,
    measured op timings), for in-process runs and the processes tests start alike, so
    the suite neither reads nor fills the user's `~/.cache/tasoc`."""
    folder = tmp_path_factory.mktemp("tasoc-cache")
    previous = os.environ.get("TASOC_CACHE_DIR")
    os.environ["TASOC_CACHE_DIR"] = str(folder)
    yield folder
    if previous is None:
        del os.environ["TASOC_CACHE_DIR"]
    else:
        os.environ["TASOC_CACHE_DIR"] = previous


@pytest.fixture
def tasoc(capsys: pytest.CaptureFixture[str]) -> Callable[..., Result]:
    """Run `tasoc ARGS...` in this process; return its exit status and output."""

    def run(*args: str | Path) -> Result:
        code = main([str(arg) for arg in args])
        captured = capsys.readouterr()
        return Result(code, captured.out, captured.err)

    return run


def assert_one_line_error(result: Result, *fragments: str) -> str:
    """Exit status 1, exactly one stderr line `tasoc: error: ...` holding `fragments`."""
    assert result.code == 1, result
    assert "Traceback" not in result.err + result.out
    lines = result.err.splitlines()
    assert len(lines) == 1, lines
    assert lines[0].startswith("tasoc: error: "), lines
    for fragment in fragments:
        assert fragment in lines[0], (fragment, lines[0])
    return lines[0]


# Hypothesis profiles. Property tests draw few examples by default, so the suite stays
# fast, and many under `long`:
#
#     HYPOTHESIS_PROFILE=long .venv/bin/pytest tests/test_fuzz_cli.py tests/test_equality_rewrite.py
#
# `ci` (chosen when `CI` is set, e.g. `CI=true`, as CI services do) draws the same
# examples on every run (`derandomize`), so a red CI run is a reproducible one; `dev`,
# the default, draws new ones each time and remembers failures in `.hypothesis/`. No
# profile has a deadline: the cores of a busy machine make per-example times noise.
_SLOW_IS_FINE = dict(deadline=None, suppress_health_check=[HealthCheck.too_slow])
settings.register_profile("dev", **_SLOW_IS_FINE)
settings.register_profile("ci", derandomize=True, database=None, print_blob=True, **_SLOW_IS_FINE)
settings.register_profile("long", max_examples=2000, **_SLOW_IS_FINE)
ON_CI = os.environ.get("CI", "").lower() not in ("", "0", "false", "no")
PROFILE = os.environ.get("HYPOTHESIS_PROFILE") or ("ci" if ON_CI else "dev")
settings.load_profile(PROFILE)


def examples(count: int) -> int:
    """How many examples a property test that would draw `count` draws: `count`, or the
    `long` profile's thousands. Expensive tests say their count with this instead of
    `max_examples=count`, which no profile could raise."""
    return max(count, settings.default.max_examples) if PROFILE == "long" else count


BENCHMARKS = Path(__file__).resolve().parent.parent / "benchmarks"


def load_benchmark(name: str) -> ModuleType:
    """The benchmark script `benchmarks/NAME.py` imported as a module (`bench_NAME`),
    so a smoke test can call its functions."""
    spec = importlib.util.spec_from_file_location(f"bench_{name}", BENCHMARKS / f"{name}.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses resolve annotations through it
    spec.loader.exec_module(module)
    return module
