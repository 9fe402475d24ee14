"""Every pipeline the documentation shows parses: each `tasoc opt ... -p '...'` of
README.md and docs/*.md (shell continuations joined) is built pass by pass with its
options, through the driver's own `build_pipeline`, without running anything. A
failure names the file, the line and the driver's error, so a doc example that a
user would copy and see refused is caught here, not by them.

The passes are tasoc's table (`get_all_passes`) and the tutorial plugin's
(`examples/my_passes.py`), which docs/custom-pass.md shows loaded or installed. A
pipeline holding `...` is a sketch of the syntax (`soap-shard{...}`), not a command.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

import pytest

from tasoc.driver.errors import DriverError
from tasoc.driver.pass_options import build_pipeline
from tasoc.driver.plugins import load_pass_plugin
from tasoc.passes.registry import get_all_passes

ROOT = Path(__file__).resolve().parent.parent
DOCUMENTS = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
TUTORIAL_PLUGIN = ROOT / "examples" / "my_passes.py"

_PIPELINE = re.compile(
    r"""(?:^|\s)(?:-p|--passes)(?:\s+|=)(?:'(?P<single>[^']*)'|"(?P<double>[^"]*)"|(?P<bare>[^\s`|]+))"""
)
"""`-p` and its pipeline: quoted either way, or a bare word (up to the end of a
markdown code span or table cell)."""


@dataclass(frozen=True)
class DocPipeline:
    path: Path
    line: int
    text: str

    def __str__(self) -> str:
        return f"{self.path.relative_to(ROOT)}:{self.line}: {self.text}"


def logical_lines(text: str) -> list[tuple[int, str]]:
    """(first line's number, the line with its `\\` continuations joined), as a shell
    reads a command written over several lines."""
    lines = text.splitlines()
    joined: list[tuple[int, str]] = []
    index = 0
    while index < len(lines):
        number, line = index + 1, lines[index]
        while line.endswith("\\") and index + 1 < len(lines):
            index += 1
            line = line[:-1] + " " + lines[index]
        joined.append((number, line))
        index += 1
    return joined


def doc_pipelines(path: Path) -> list[DocPipeline]:
    """The pipelines of the `tasoc opt` commands in `path`."""
    found = []
    for number, line in logical_lines(path.read_text(encoding="utf-8")):
        if "tasoc opt" not in line:
            continue
        for match in _PIPELINE.finditer(line):
            text = match["single"] or match["double"] or match["bare"]
            if "..." not in text:
                found.append(DocPipeline(path, number, text))
    return found


ALL = [pipeline for path in DOCUMENTS for pipeline in doc_pipelines(path)]


def test_the_documentation_shows_pipelines() -> None:
    assert len(ALL) > 30, "the extraction found too few pipelines: has its pattern broken?"
    assert any("\n" not in p.text and p.line for p in ALL if p.path.name == "README.md")


def test_continued_commands_are_joined() -> None:
    text = "tasoc opt m.mlir \\\n    -p 'cse,dce' \\\n    -o out.mlir\nnext"
    assert logical_lines(text) == [
        (1, "tasoc opt m.mlir      -p 'cse,dce'      -o out.mlir"),
        (4, "next"),
    ]


def test_every_documented_pipeline_builds() -> None:
    passes = dict(get_all_passes())
    for name, pass_class in load_pass_plugin(str(TUTORIAL_PLUGIN), passes).items():
        passes[name] = lambda pass_class=pass_class: pass_class
    failures = []
    for pipeline in ALL:
        try:
            build_pipeline(pipeline.text, passes)
        except DriverError as err:
            failures.append(f"{pipeline}: {err}")
    assert not failures, "documented pipelines that tasoc refuses:\n" + "\n".join(failures)


@pytest.mark.parametrize(
    "text",
    [
        "autodiff{lr=1e-3}",
        "placement{capacity=1.5GB min-bytes=1e6}",
        "equality-rewrite{budget=1e3}",
    ],
)
def test_numbers_as_people_write_them_build(text: str) -> None:
    assert len(build_pipeline(text, get_all_passes())) == 1
