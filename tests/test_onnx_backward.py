"""ONNX export of the backward ops: the ones with an ONNX operator run in onnxruntime
like the reference; the others are refused in one line naming the op."""

from __future__ import annotations

import numpy as np
import onnx
import pytest
from conftest import examples
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from onnx_builders import EXPORTED, REFUSED

from tasoc.backends.arguments import random_inputs
from tasoc.backends.numpy import run_reference
from tasoc.backends.onnx import OnnxExportError, export_onnx
from tasoc.backends.onnx.runtime import inference_session
from tasoc.ir.builder import GraphBuilder
from tasoc.ir.program import arg_infos, entry_function
from tasoc.verify.equivalence import compare
from tasoc.verify.strategies import graphs


@pytest.mark.parametrize("op", EXPORTED)
@settings(max_examples=examples(25), deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(data=st.data())
def test_exported_backward_ops_run_like_the_reference(op: str, data: st.DataObject) -> None:
    module = data.draw(graphs(max_ops=1, ops=[op]), label="module")
    args = random_inputs(module)
    infos = arg_infos(entry_function(module))
    params = {i.name: a for i, a in zip(infos, args, strict=True) if i.is_param}
    model = export_onnx(module, params)
    onnx.checker.check_model(model, full_check=True)
    feeds = {i.name: a for i, a in zip(infos, args, strict=True) if not i.is_param}
    session = inference_session(model)
    report = compare(run_reference(module, args), session.run(None, feeds))
    assert report.ok, f"{report.summary()}\n{module}"


@pytest.mark.parametrize("op", REFUSED)
@settings(max_examples=examples(3), deadline=None)
@given(data=st.data())
def test_backward_ops_without_an_onnx_operator_are_refused(op: str, data: st.DataObject) -> None:
    module = data.draw(graphs(max_ops=1, ops=[op]), label="module")
    with pytest.raises(OnnxExportError) as caught:
        export_onnx(module)
    message = str(caught.value)
    assert message.startswith(f"cannot export graph.{op} to ONNX: ONNX has no operator for ")
    assert "\n" not in message


def test_conv_input_gradient_reaches_rows_no_window_read() -> None:
    """A stride-2 valid convolution of 6 rows reads rows 0..4 only: ConvTranspose's output
    padding must still give 6 rows, the last one zero."""
    g = GraphBuilder()
    dy, w = g.input("dy", (1, 2, 2, 3)), g.input("w", (2, 1, 3, 2))
    module = g.build(g.conv2d_grad_input(dy, w, (1, 1, 6, 6), strides=(2, 2), padding="valid"))
    args = random_inputs(module)
    session = inference_session(export_onnx(module))
    (dx,) = session.run(None, {"dy": args[0], "w": args[1]})
    assert dx.shape == (1, 1, 6, 6) and not dx[0, 0, 5].any()
    np.testing.assert_allclose(dx, run_reference(module, args)[0], rtol=1e-5, atol=1e-6)
