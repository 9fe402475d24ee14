"""ONNX's own node test cases, run for every operator the importer claims.

The `onnx` package generates one test case per operator behaviour
(`onnx.backend.test.case.node`): a one-node model, or the node's function expansion,
with inputs and the expected outputs. Every case whose nodes all have an importer
handler (`HANDLERS`) is imported, run on the reference interpreter and, where that is
right, on JAX, and compared with ONNX's expected outputs at the tolerances ONNX states
for the case (rtol 1e-3, atol 1e-7), dtype and shape exactly, NaN where ONNX has NaN.

Each case ends one of three ways:

- *passed*: both backends give ONNX's numbers;
- *rejected*: import raised `OnnxImportError` with one line (an op form, element type
  or opset the dialect cannot express) — allowed, counted and printed;
- *failed*: a wrong number, or any other exception (an internal error) — never allowed.

The cases feed axes, shapes, split sizes and pads as int64 graph inputs, where models
hold constants; the importer needs them at import time, so the test makes every int64
input an initializer holding the case's value. `PASSING` records the cases that pass,
so that one that stops passing fails here even when it turns into a clean rejection.
"""

from __future__ import annotations

import dataclasses
import warnings
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass
from enum import Enum
from functools import cache

import numpy as np
import onnx
import pytest
from onnx import numpy_helper
from onnx.backend.test.case import node as node_cases
from onnx.backend.test.case.test_case import TestCase

from tasoc.backends.jax import lower
from tasoc.backends.numpy import run_reference
from tasoc.backends.onnx import OnnxImportError, import_onnx
from tasoc.backends.onnx.handlers import HANDLERS
from tasoc.ir.program import arg_infos, entry_function


class Outcome(Enum):
    PASSED = "passed"
    REJECTED = "rejected"
    FAILED = "failed"


@dataclass(frozen=True)
class Result:
    outcome: Outcome
    detail: str = ""
    """The rejection's message, or what went wrong and where."""


def supported(case: TestCase) -> bool:
    """Whether every node of the case is a default-domain op the importer handles."""
    nodes = case.model.graph.node
    return all(n.op_type in HANDLERS and n.domain in ("", "ai.onnx") for n in nodes)


@cache
def supported_cases() -> tuple[TestCase, ...]:
    with warnings.catch_warnings():  # generating some cases overflows on purpose
        warnings.simplefilter("ignore")
        cases = node_cases.collect_testcases(None)
    return tuple(case for case in cases if supported(case))


def array(value: object) -> np.ndarray:
    return (
        numpy_helper.to_array(value) if isinstance(value, onnx.TensorProto) else np.asarray(value)
    )


def with_constant_configuration(
    case: TestCase, inputs: Sequence[np.ndarray]
) -> tuple[onnx.ModelProto, list[np.ndarray]]:
    """The case's model with its int64 inputs made initializers, and the other inputs."""
    model = onnx.ModelProto()
    model.CopyFrom(case.model)
    kept, activations = [], []
    for info, value in zip(case.model.graph.input, inputs, strict=True):
        if value.dtype == np.int64:
            model.graph.initializer.append(numpy_helper.from_array(value, info.name))
        else:
            kept.append(info)
            activations.append(value)
    del model.graph.input[:]
    model.graph.input.extend(kept)
    return model, activations


def mismatch(
    case: TestCase, results: Sequence[np.ndarray], expected: Sequence[np.ndarray]
) -> str | None:
    """What differs between `results` and ONNX's expected outputs, or None."""
    if len(results) != len(expected):
        return f"{len(results)} outputs, ONNX expects {len(expected)}"
    for index, (got, want) in enumerate(zip(results, expected, strict=True)):
        if got.dtype != want.dtype or got.shape != want.shape:
            got_type, want_type = f"{got.dtype}{list(got.shape)}", f"{want.dtype}{list(want.shape)}"
            return f"output #{index} is {got_type}, not {want_type}"
        try:
            np.testing.assert_allclose(got, want, rtol=case.rtol, atol=case.atol)
        except AssertionError as err:
            return f"output #{index}: " + " ".join(str(err).split()[:40])
    return None


def run_case(case: TestCase) -> Result:
    inputs, outputs = case.data_sets[0]
    expected = [array(value) for value in outputs]
    model, activations = with_constant_configuration(case, [array(value) for value in inputs])
    try:
        module, params = import_onnx(model)
    except OnnxImportError as err:
        return Result(Outcome.REJECTED, str(err))
    except Exception as err:  # any other exception is what this test looks for
        return Result(Outcome.FAILED, f"import: {type(err).__name__}: {err}")
    remaining = iter(activations)
    infos = arg_infos(entry_function(module))
    args = [params[info.name] if info.is_param else next(remaining) for info in infos]
    backends = {"reference": run_reference, "jax": lambda m, a: lower(m)(*a)}
    for backend, run in backends.items():
        try:
            results = [np.asarray(r) for r in run(module, args)]
        except Exception as err:
            return Result(Outcome.FAILED, f"{backend}: {type(err).__name__}: {err}")
        wrong = mismatch(case, results, expected)
        if wrong is not None:
            return Result(Outcome.FAILED, f"{backend}: {wrong}")
    return Result(Outcome.PASSED)


@pytest.fixture(scope="module")
def results() -> dict[str, Result]:
    """Every supported case's result, with a summary printed (`pytest -s` shows it)."""
    results = {case.name: run_case(case) for case in supported_cases()}
    counts = Counter(result.outcome for result in results.values())
    ops = {case.model.graph.node[0].op_type for case in supported_cases()}
    print(
        f"\nONNX node cases of {len(ops)} supported ops: {len(results)} cases, "
        + ", ".join(f"{counts[outcome]} {outcome.value}" for outcome in Outcome)
    )
    for name, result in sorted(results.items()):
        if result.outcome is not Outcome.PASSED:
            print(f"  {result.outcome.value} {name}: {result.detail}")
    return results


def test_no_case_gives_a_wrong_number_or_an_internal_error(results: dict[str, Result]) -> None:
    failed = {n: r.detail for n, r in results.items() if r.outcome is Outcome.FAILED}
    assert not failed, "\n".join(f"{name}: {detail}" for name, detail in failed.items())


def test_rejections_are_one_line_import_errors(results: dict[str, Result]) -> None:
    for name, result in results.items():
        if result.outcome is Outcome.REJECTED:
            assert result.detail and "\n" not in result.detail, (name, result.detail)


def test_the_cases_that_passed_still_pass(results: dict[str, Result]) -> None:
    passed = {name for name, result in results.items() if result.outcome is Outcome.PASSED}
    lost = {name: results[name].detail if name in results else "gone" for name in PASSING - passed}
    assert not lost, lost


def test_a_wrong_number_is_a_failure_naming_the_backend() -> None:
    """The check itself: ONNX's Relu case with one expected value changed fails."""
    case = next(case for case in supported_cases() if case.name == "test_relu")
    inputs, (expected,) = case.data_sets[0]
    wrong = array(expected).copy()
    wrong.flat[0] += 1
    result = run_case(dataclasses.replace(case, data_sets=[(inputs, [wrong])]))
    assert result.outcome is Outcome.FAILED
    assert result.detail.startswith("reference: output #0: ")


def test_every_handled_op_has_cases_and_some_pass(results: dict[str, Result]) -> None:
    """The node cases cover each handler; an op with no passing case is named here."""
    covered = {case.model.graph.node[0].op_type for case in supported_cases()}
    assert covered == set(HANDLERS)
    passing_ops = {
        case.model.graph.node[0].op_type
        for case in supported_cases()
        if results[case.name].outcome is Outcome.PASSED
    }
    assert set(HANDLERS) - passing_ops == OPS_WITHOUT_A_PASSING_CASE


PASSING = frozenset(
    (
        "test_add",
        "test_add_bcast",
        "test_averagepool_2d_default",
        "test_averagepool_2d_pads",
        "test_averagepool_2d_pads_count_include_pad",
        "test_averagepool_2d_precomputed_pads",
        "test_averagepool_2d_precomputed_pads_count_include_pad",
        "test_averagepool_2d_precomputed_same_upper",
        "test_averagepool_2d_precomputed_strides",
        "test_averagepool_2d_same_lower",
        "test_averagepool_2d_same_upper",
        "test_averagepool_2d_strides",
        "test_basic_conv_with_padding",
        "test_basic_conv_without_padding",
        "test_batchnorm_epsilon",
        "test_batchnorm_example",
        "test_clip_default_inbounds_expanded",
        "test_concat_1d_axis_0",
        "test_concat_1d_axis_negative_1",
        "test_concat_2d_axis_0",
        "test_concat_2d_axis_1",
        "test_concat_2d_axis_negative_1",
        "test_concat_2d_axis_negative_2",
        "test_concat_3d_axis_0",
        "test_concat_3d_axis_1",
        "test_concat_3d_axis_2",
        "test_concat_3d_axis_negative_1",
        "test_concat_3d_axis_negative_2",
        "test_concat_3d_axis_negative_3",
        "test_constant",
        "test_constantofshape_float_ones",
        "test_constantofshape_int_shape_zero",
        "test_constantofshape_int_zeros",
        "test_conv_with_autopad_same",
        "test_conv_with_strides_and_asymmetric_padding",
        "test_conv_with_strides_no_padding",
        "test_conv_with_strides_padding",
        "test_depthtospace_crd_mode_example_expanded",
        "test_depthtospace_example_expanded",
        "test_dropout_default",
        "test_dropout_default_old",
        "test_dropout_default_ratio",
        "test_dropout_random_old",
        "test_eyelike_populate_off_main_diagonal",
        "test_eyelike_without_dtype",
        "test_flatten_axis0",
        "test_flatten_axis1",
        "test_flatten_axis2",
        "test_flatten_axis3",
        "test_flatten_default_axis",
        "test_flatten_negative_axis1",
        "test_flatten_negative_axis2",
        "test_flatten_negative_axis3",
        "test_flatten_negative_axis4",
        "test_gelu_default_1",
        "test_gelu_default_2",
        "test_gelu_tanh_1",
        "test_gelu_tanh_2",
        "test_gemm_all_attributes",
        "test_gemm_alpha",
        "test_gemm_beta",
        "test_gemm_default_matrix_bias",
        "test_gemm_default_no_bias",
        "test_gemm_default_scalar_bias",
        "test_gemm_default_single_elem_vector_bias",
        "test_gemm_default_vector_bias",
        "test_gemm_default_zero_bias",
        "test_gemm_transposeA",
        "test_gemm_transposeB",
        "test_globalaveragepool",
        "test_globalaveragepool_precomputed",
        "test_globalmaxpool",
        "test_globalmaxpool_precomputed",
        "test_identity",
        "test_matmul_1d_1d",
        "test_matmul_1d_3d",
        "test_matmul_2d",
        "test_matmul_3d",
        "test_matmul_4d",
        "test_matmul_4d_1d",
        "test_matmul_bcast",
        "test_maxpool_2d_default",
        "test_maxpool_2d_pads",
        "test_maxpool_2d_precomputed_pads",
        "test_maxpool_2d_precomputed_same_upper",
        "test_maxpool_2d_precomputed_strides",
        "test_maxpool_2d_same_lower",
        "test_maxpool_2d_same_upper",
        "test_maxpool_2d_strides",
        "test_mul",
        "test_mul_bcast",
        "test_mul_example",
        "test_reduce_max_default_axes_keepdim_example",
        "test_reduce_max_default_axes_keepdims_random",
        "test_reduce_max_do_not_keepdims_example",
        "test_reduce_max_do_not_keepdims_random",
        "test_reduce_max_empty_set",
        "test_reduce_max_keepdims_example",
        "test_reduce_max_keepdims_random",
        "test_reduce_max_negative_axes_keepdims_example",
        "test_reduce_max_negative_axes_keepdims_random",
        "test_reduce_mean_default_axes_keepdims_example",
        "test_reduce_mean_default_axes_keepdims_random",
        "test_reduce_mean_do_not_keepdims_example",
        "test_reduce_mean_do_not_keepdims_random",
        "test_reduce_mean_keepdims_example",
        "test_reduce_mean_keepdims_random",
        "test_reduce_mean_negative_axes_keepdims_example",
        "test_reduce_mean_negative_axes_keepdims_random",
        "test_reduce_sum_default_axes_keepdims_example",
        "test_reduce_sum_default_axes_keepdims_random",
        "test_reduce_sum_do_not_keepdims_example",
        "test_reduce_sum_do_not_keepdims_random",
        "test_reduce_sum_empty_axes_input_noop",
        "test_reduce_sum_empty_axes_input_noop_example",
        "test_reduce_sum_empty_set",
        "test_reduce_sum_empty_set_non_reduced_axis_zero",
        "test_reduce_sum_keepdims_example",
        "test_reduce_sum_keepdims_random",
        "test_reduce_sum_negative_axes_keepdims_example",
        "test_reduce_sum_negative_axes_keepdims_random",
        "test_reduce_sum_square_default_axes_keepdims_example_expanded",
        "test_reduce_sum_square_default_axes_keepdims_random_expanded",
        "test_reduce_sum_square_do_not_keepdims_example_expanded",
        "test_reduce_sum_square_do_not_keepdims_random_expanded",
        "test_reduce_sum_square_empty_set_expanded",
        "test_reduce_sum_square_keepdims_example_expanded",
        "test_reduce_sum_square_keepdims_random_expanded",
        "test_reduce_sum_square_negative_axes_keepdims_example_expanded",
        "test_reduce_sum_square_negative_axes_keepdims_random_expanded",
        "test_relu",
        "test_reshape_allowzero_reordered",
        "test_reshape_extended_dims",
        "test_reshape_negative_dim",
        "test_reshape_negative_extended_dims",
        "test_reshape_one_dim",
        "test_reshape_reduced_dims",
        "test_reshape_reordered_all_dims",
        "test_reshape_reordered_last_dims",
        "test_reshape_zero_and_negative_dim",
        "test_reshape_zero_dim",
        "test_rotary_embedding_3d_input_expanded",
        "test_rotary_embedding_expanded",
        "test_rotary_embedding_no_position_ids_expanded",
        "test_rotary_embedding_no_position_ids_rotary_dim_expanded",
        "test_rotary_embedding_with_rotary_dim_expanded",
        "test_shape",
        "test_shape_clip_end",
        "test_shape_clip_start",
        "test_shape_end_1",
        "test_shape_end_negative_1",
        "test_shape_example",
        "test_shape_start_1",
        "test_shape_start_1_end_2",
        "test_shape_start_1_end_negative_1",
        "test_shape_start_greater_than_end",
        "test_shape_start_negative_1",
        "test_sigmoid",
        "test_sigmoid_example",
        "test_slice",
        "test_slice_default_axes",
        "test_slice_default_steps",
        "test_slice_end_out_of_bounds",
        "test_slice_neg",
        "test_slice_negative_axes",
        "test_slice_start_out_of_bounds",
        "test_softmax_axis_0",
        "test_softmax_axis_1",
        "test_softmax_axis_2",
        "test_softmax_default_axis",
        "test_softmax_example",
        "test_softmax_large_number",
        "test_softmax_negative_axis",
        "test_spacetodepth_crd_mode_example_expanded",
        "test_spacetodepth_dcr_mode_example_expanded",
        "test_spacetodepth_example_expanded",
        "test_spacetodepth_expanded",
        "test_split_1d_uneven_split_opset18",
        "test_split_2d_uneven_split_opset18",
        "test_split_equal_parts_1d_opset13",
        "test_split_equal_parts_1d_opset18",
        "test_split_equal_parts_2d",
        "test_split_equal_parts_2d_opset13",
        "test_split_equal_parts_default_axis_opset13",
        "test_split_equal_parts_default_axis_opset18",
        "test_split_variable_parts_1d_opset13",
        "test_split_variable_parts_1d_opset18",
        "test_split_variable_parts_2d_opset13",
        "test_split_variable_parts_2d_opset18",
        "test_split_variable_parts_default_axis_opset13",
        "test_split_variable_parts_default_axis_opset18",
        "test_split_zero_size_splits_opset13",
        "test_split_zero_size_splits_opset18",
        "test_squeeze",
        "test_squeeze_negative_axes",
        "test_sub",
        "test_sub_bcast",
        "test_sub_example",
        "test_tanh",
        "test_tanh_example",
        "test_transpose_all_permutations_0",
        "test_transpose_all_permutations_1",
        "test_transpose_all_permutations_2",
        "test_transpose_all_permutations_3",
        "test_transpose_all_permutations_4",
        "test_transpose_all_permutations_5",
        "test_transpose_default",
        "test_unsqueeze_axis_0",
        "test_unsqueeze_axis_1",
        "test_unsqueeze_axis_2",
        "test_unsqueeze_negative_axes",
        "test_unsqueeze_three_axes",
        "test_unsqueeze_two_axes",
        "test_unsqueeze_unsorted_axes",
    )
)
"""The cases that passed when this test was written (onnx 1.23)."""

OPS_WITHOUT_A_PASSING_CASE = frozenset({"Cast", "Div", "Gather", "LayerNormalization", "Pad"})
"""Every case of these is rejected (onnx 1.23): casts between types and opset 28;
division by a run-time tensor; gathers other than 2-D row lookups; LayerNormalization
cases all read the Mean/InvStdDev outputs; Pad other than graph.enlarge's or with a
run-time fill value."""
