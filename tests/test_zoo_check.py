"""Every zoo model's small variant runs through `tasoc run --check`: JAX vs the reference.

This is the end-to-end promise of the zoo: what `tasoc zoo` lists builds, lowers to
JAX and agrees with the numpy reference interpreter within the stated tolerances.
"""

from __future__ import annotations

import pytest

from tasoc.driver.main import main
from tasoc.models import list_models


@pytest.mark.parametrize("model", list_models(), ids=lambda m: m.name)
def test_small_variant_runs_with_check(model, capsys: pytest.CaptureFixture[str]) -> None:
    spec = "zoo:" + model.spec(model.small)
    assert main(["run", spec, "--check"]) == 0
    out = capsys.readouterr().out
    assert "check: equivalent to the numpy reference" in out
