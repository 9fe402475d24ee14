"""lit configuration for tasoc's FileCheck tests (`.venv/bin/lit -q tests/filecheck`).

Tests are `.mlir` files whose `// RUN:` lines call `%tasoc` (the `tasoc` console script
of the environment running lit) and pipe into `filecheck`, the Python port of LLVM's
FileCheck, installed beside it. Both come from the interpreter's own `bin/`, so the
tests exercise the installed entry point, not whatever `tasoc` is first on PATH.
"""

import os
import sys
from pathlib import Path

import lit.formats

config = globals()["config"]  # injected by lit; named here so linters know it

BIN = Path(sys.executable).parent

config.name = "tasoc"
config.test_format = lit.formats.ShTest(execute_external=False)
config.suffixes = [".mlir"]
config.test_source_root = os.path.dirname(__file__)
config.excludes = ["lit.cfg.py"]
config.substitutions.append(("%tasoc", str(BIN / "tasoc")))
config.environment["PATH"] = os.pathsep.join([str(BIN), os.environ.get("PATH", "")])
# A worktree run with `PYTHONPATH=$PWD` tests its own sources; lit passes no variable
# through unless told.
if "PYTHONPATH" in os.environ:
    config.environment["PYTHONPATH"] = os.environ["PYTHONPATH"]
