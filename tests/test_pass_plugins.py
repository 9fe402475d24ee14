"""Users' own passes: `--load-pass-plugin`, the `tasoc.passes` entry points, the xDSL
universe, and the custom-pass tutorial's example (examples/my_passes.py)."""

from __future__ import annotations

import os
import subprocess
import sys
from dataclasses import dataclass
from importlib.metadata import EntryPoint
from pathlib import Path
from typing import ClassVar

import pytest
from conftest import assert_one_line_error
from xdsl.context import Context
from xdsl.dialects.builtin import ModuleOp
from xdsl.passes import ModulePass

from tasoc.driver.sources import load_module
from tasoc.ir.builder import GraphBuilder
from tasoc.ir.dag import from_module
from tasoc.passes import registry
from tasoc.passes.registry import PassRegistryError, get_all_passes
from tasoc.universe import TASOC_UNIVERSE

REPO = Path(__file__).resolve().parents[1]
EXAMPLES = REPO / "examples"
EXAMPLE_PLUGIN = EXAMPLES / "my_passes.py"
XDSL_OPT = Path(sys.executable).parent / "xdsl-opt"

NOOP_PLUGIN = """\
from dataclasses import dataclass
from typing import ClassVar

from xdsl.passes import ModulePass


@dataclass(frozen=True)
class NoopPass(ModulePass):
    name: ClassVar[str] = "test-noop"

    level: int = 1

    def __post_init__(self) -> None:
        if self.level < 1:
            raise ValueError(f"level must be at least 1, got {self.level}")

    def apply(self, ctx, op) -> None:
        pass
"""


@dataclass(frozen=True)
class EntryPointPass(ModulePass):
    """Test-only: what an installed package's `tasoc.passes` entry point names."""

    name: ClassVar[str] = "test-entry-point"

    def apply(self, ctx: Context, op: ModuleOp) -> None:
        pass


def transposes_program(path: Path) -> Path:
    """relu(transpose(transpose(x))) with perms that cancel, written as text IR."""
    g = GraphBuilder()
    x = g.input("x", (2, 3))
    path.write_text(str(g.build(g.relu(g.transpose(g.transpose(x, (1, 0)), (1, 0))))))
    return path


# ------------------------------------------------------------------ the registry


def test_every_pass_is_registered_and_lazy() -> None:
    passes = get_all_passes()
    assert {"canonicalize", "cse", "dce", "equality-rewrite"} <= passes.keys()
    assert all(issubclass(factory(), ModulePass) for factory in passes.values())
    assert passes["cse"]().name == "cse"


def test_the_xdsl_universe_offers_tasocs_own_passes() -> None:
    assert TASOC_UNIVERSE.all_passes == registry.TASOC_PASSES
    assert "graph" in TASOC_UNIVERSE.all_dialects


@pytest.mark.skipif(not XDSL_OPT.exists(), reason="xdsl-opt not installed")
def test_xdsl_opt_runs_equality_rewrite(tmp_path: Path) -> None:
    source = transposes_program(tmp_path / "t.mlir")
    result = subprocess.run(
        [XDSL_OPT, "-p", "equality-rewrite{retime=0}", source],
        capture_output=True,
        text=True,
        check=False,
    )
    assert result.returncode == 0, result.stderr
    assert "graph.relu" in result.stdout


def _entry_points(*points: EntryPoint):
    return lambda group: [point for point in points if point.group == group]


def test_installed_passes_come_from_entry_points(
    tasoc, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    point = EntryPoint("test-entry-point", f"{__name__}:EntryPointPass", registry.ENTRY_POINT_GROUP)
    monkeypatch.setattr(registry, "entry_points", _entry_points(point))
    assert get_all_passes()["test-entry-point"]() is EntryPointPass
    source = transposes_program(tmp_path / "t.mlir")
    assert tasoc("opt", source, "-p", "test-entry-point").code == 0


def test_an_entry_point_may_not_take_a_built_in_name(
    tasoc, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    point = EntryPoint("cse", f"{__name__}:EntryPointPass", registry.ENTRY_POINT_GROUP)
    monkeypatch.setattr(registry, "entry_points", _entry_points(point))
    with pytest.raises(PassRegistryError, match="'cse'"):
        get_all_passes()
    source = transposes_program(tmp_path / "t.mlir")
    assert_one_line_error(tasoc("opt", source), "installed pass 'cse'", "built-in pass")


@pytest.mark.parametrize(
    ("value", "fragment"),
    [
        ("tasoc.ir.graph:Graph", "is not a ModulePass subclass"),
        ("no_such_module_anywhere:Pass", "cannot be loaded: ModuleNotFoundError"),
        ("xdsl.transforms.dead_code_elimination:DeadCodeElimination", "the two must be equal"),
    ],
)
def test_a_bad_entry_point_is_one_line_when_used(
    tasoc, monkeypatch: pytest.MonkeyPatch, tmp_path: Path, value: str, fragment: str
) -> None:
    point = EntryPoint("test-bad", value, registry.ENTRY_POINT_GROUP)
    monkeypatch.setattr(registry, "entry_points", _entry_points(point))
    source = transposes_program(tmp_path / "t.mlir")
    assert tasoc("opt", source, "-p", "cse").code == 0  # unused: never loaded
    assert_one_line_error(tasoc("opt", source, "-p", "test-bad"), "'test-bad'", fragment)


# ------------------------------------------------------------- --load-pass-plugin


def test_a_plugin_file_adds_its_passes(tasoc, tmp_path: Path) -> None:
    plugin = tmp_path / "noop_plugin.py"
    plugin.write_text(NOOP_PLUGIN)
    source = transposes_program(tmp_path / "t.mlir")
    result = tasoc("opt", source, "--load-pass-plugin", plugin, "-p", "test-noop{level=2}")
    assert result.code == 0, result
    unknown = tasoc("opt", source, "--load-pass-plugin", plugin, "-p", "nosuch")
    assert_one_line_error(unknown, "unknown pass 'nosuch'", "test-noop", "equality-rewrite")


def test_a_plugin_module_is_imported_by_name(
    tasoc, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    (tmp_path / "noop_module_plugin.py").write_text(NOOP_PLUGIN)
    monkeypatch.syspath_prepend(str(tmp_path))
    source = transposes_program(tmp_path / "t.mlir")
    result = tasoc("opt", source, "--load-pass-plugin", "noop_module_plugin", "-p", "test-noop")
    assert result.code == 0, result


@pytest.mark.parametrize(
    ("pipeline", "fragments"),
    [
        ("test-noop{level=0}", ["pass 'test-noop'", "level must be at least 1"]),
        (
            "test-noop{level=abc}",
            ["pass 'test-noop'", "option 'level' expects a whole number", "'abc'"],
        ),
        ("test-noop{depth=1}", ["pass 'test-noop' has no option 'depth'", "level"]),
    ],
)
def test_plugin_pass_options_are_checked(
    tasoc, tmp_path: Path, pipeline: str, fragments: list[str]
) -> None:
    plugin = tmp_path / "noop_plugin.py"
    plugin.write_text(NOOP_PLUGIN)
    source = transposes_program(tmp_path / "t.mlir")
    result = tasoc("opt", source, "--load-pass-plugin", plugin, "-p", pipeline)
    assert_one_line_error(result, *fragments)


PLUGIN_FAILURES = [
    ("missing file", None, ["cannot load pass plugin", "missing.py", "no such file"]),
    ("import error", "import no_such_module_anywhere\n", ["ModuleNotFoundError", "no_such"]),
    ("raising code", "raise RuntimeError('broken on purpose')\n", ["RuntimeError: broken on"]),
    ("syntax error", "def broken(:\n", ["SyntaxError"]),
    ("no pass", "from xdsl.passes import ModulePass\nX = 1\n", ["defines no pass"]),
    ("name clash", NOOP_PLUGIN.replace('"test-noop"', '"cse"'), ["pass 'cse'", "already"]),
]


@pytest.mark.parametrize(
    ("text", "fragments"),
    [case[1:] for case in PLUGIN_FAILURES],
    ids=[case[0] for case in PLUGIN_FAILURES],
)
def test_plugin_failures_are_one_line(
    tasoc, tmp_path: Path, text: str | None, fragments: list[str]
) -> None:
    plugin = tmp_path / ("missing.py" if text is None else "bad_plugin.py")
    if text is not None:
        plugin.write_text(text)
    source = transposes_program(tmp_path / "t.mlir")
    result = tasoc("opt", source, "--load-pass-plugin", plugin, "-p", "cse")
    line = assert_one_line_error(result, *fragments)
    assert str(plugin) in line


def test_a_missing_plugin_module_is_one_line(tasoc, tmp_path: Path) -> None:
    source = transposes_program(tmp_path / "t.mlir")
    result = tasoc("opt", source, "--load-pass-plugin", "no_such_plugin_module")
    assert_one_line_error(result, "pass plugin 'no_such_plugin_module': no such module")


# ------------------------------------------------------- the tutorial's example


def test_the_example_plugin_folds_transposes(tasoc, tmp_path: Path) -> None:
    source = transposes_program(tmp_path / "t.mlir")
    out = tmp_path / "out.mlir"
    args = ["--load-pass-plugin", EXAMPLE_PLUGIN, "-p", "fold-transposes"]
    result = tasoc("opt", source, *args, "--verify-each", "-o", out)
    assert result.code == 0, result
    graph = from_module(load_module(str(out)))
    assert [node.op for node in graph.ops] == ["relu"]
    assert graph.ops[0].inputs[0].node.is_arg
    bad = tasoc("opt", source, "--load-pass-plugin", EXAMPLE_PLUGIN, "-p",
                "fold-transposes{max-folds=0}")  # fmt: skip
    assert_one_line_error(bad, "pass 'fold-transposes'", "max-folds")


def test_the_examples_property_tests_pass() -> None:
    result = subprocess.run(
        [
            sys.executable,
            "-m",
            "pytest",
            "-o",
            "addopts=",
            "-q",
            "-p",
            "no:cacheprovider",
            EXAMPLES,
        ],
        capture_output=True,
        text=True,
        cwd=REPO,
        env={**os.environ, "PYTHONDONTWRITEBYTECODE": "1"},
        check=False,
    )
    assert result.returncode == 0, result.stdout[-2000:] + result.stderr[-2000:]
    assert "2 passed" in result.stdout, result.stdout
