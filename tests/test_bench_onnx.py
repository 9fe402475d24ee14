"""benchmarks/onnx_import.py: one quick run as users start it."""

from __future__ import annotations

import subprocess
import sys

from conftest import BENCHMARKS


def test_quick_run_times_and_profiles_the_imports() -> None:
    command = [
        sys.executable,
        str(BENCHMARKS / "onnx_import.py"),
        "--quick",
        "--profile",
        "--top",
        "3",
    ]
    command += ["--models", "bert,shufflenet_v2"]
    done = subprocess.run(command, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    lines = done.stdout.splitlines()
    assert "onnx " in lines[0] and lines[1].startswith("# load average (1, 5, 15 min) before: ")
    rows = [line.split(" | ") for line in lines if line.startswith(("| bert", "| shufflenet"))]
    assert [row[0] for row in rows] == ["| bert (4 layers)", "| shufflenet_v2 (3 units per stage)"]
    for row in rows:
        assert int(row[1].replace(",", "")) >= 300 and row[-1] == "met |", row
    assert done.stdout.count("tasoc functions with their callees:") == 2
    assert "importer.py" in done.stdout


def test_unknown_models_are_a_usage_error() -> None:
    command = [sys.executable, str(BENCHMARKS / "onnx_import.py"), "--models", "bert,nosuch"]
    done = subprocess.run(command, capture_output=True, text=True, timeout=60)
    assert done.returncode == 2 and "unknown models nosuch" in done.stderr
