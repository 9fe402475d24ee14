"""`tasoc opt`: parse a program, run a pass pipeline, print the IR — xdsl-opt with tasoc's rules.

`TasocOptMain` subclasses xDSL's `xDSLOptMain`, so `-p` pipelines, `--print-op-generic`,
`--split-input-file`, `--verify-diagnostics` and the other xdsl-opt flags behave
exactly as in xdsl-opt (and lit tests written for one read like the other). What it
changes is what a compiler driver owes its users:

- inputs: `.mlir` and `.onnx` files, `-` (stdin) and `zoo:NAME?k=v` models (`sources.py`);
  an ONNX model's weight values are kept beside the module, never put in the text;
- outputs: `-o OUT` is text IR, or an ONNX model when OUT ends in `.onnx`; text IR from
  an ONNX input gets the weights beside it in `OUT`'s stem `.npz` (`onnx_bridge.py`);
- passes: `tasoc.passes.get_all_passes()` (xDSL's chosen few, tasoc's own, installed
  ones) instead of every pass xDSL ships, plus `--load-pass-plugin` files (`plugins.py`);
  each pass is built before any runs, an option error naming pass and option
  (`pass_options.py`);
- weights: a `.mlir` INPUT's weight values come from `--params` or the `.npz` beside
  it (`weights.py`), and go to `-o OUT.onnx` or beside `-o OUT`;
- errors: one line `tasoc: error: ...` with `file:line:col` (`errors.py`), also for
  verifier failures, and bad pipelines named pass by pass;
- pipelines: each pass's contract (`tasoc.passes.kinds`) is checked against what the
  passes before it make of the input, before the first pass runs, so a wrong order
  fails at once, naming the pass that would refuse and why;
- `-o OUT`, the `.npz` beside it and `--report` are one `Outputs` transaction
  (`outputs.py`): checked before any work, committed together or not at all, special
  files (`-`, FIFOs, devices) written through, colliding paths refused;
- `--verify-each` checks numeric equivalence after every pass; `--report` writes a
  JSON `RunReport` (timings, op counts, the passes' own sections); `--seed` is in it;
- `--time-passes` and `--pass-statistics` (`statistics.py`) print on stderr (as
  mlir-opt does), so stdout stays valid IR, and only once the run has succeeded, so a
  failing run still prints its one error line alone;
- each pass with a `summary` (`tasoc.passes.summary`) says what it decided, in a few
  lines on stderr, likewise once the run has succeeded; searches draw a progress bar
  on a terminal; `-q` silences both.
"""

from __future__ import annotations

import argparse
import io
import json
import os
import sys
import time
from collections import Counter
from collections.abc import Sequence
from contextlib import nullcontext, redirect_stdout
from importlib.metadata import version
from typing import IO, TYPE_CHECKING

import numpy as np
from xdsl.dialects.builtin import ModuleOp
from xdsl.passes import ModulePass, PassPipeline
from xdsl.printer import Printer
from xdsl.universe import Universe
from xdsl.utils.exceptions import VerifyException
from xdsl.xdsl_opt_main import xDSLOptMain

from tasoc.driver.errors import (
    DriverError,
    OneLineArgumentParser,
    UsageError,
    non_negative_int,
    note,
    one_line,
)
from tasoc.driver.onnx_bridge import (
    ONNX,
    collect_input_shapes,
    export_model,
    import_model,
    input_shape_arg,
    program_weights,
    require_onnx_for_shapes,
    takes_weights,
    weights_path,
    write_npz,
)
from tasoc.driver.outputs import STDOUT, Outputs, StagedOutput, errors_naming
from tasoc.driver.pass_options import build_pipeline
from tasoc.driver.plots import check_plots_directory, render
from tasoc.driver.plugins import load_pass_plugin
from tasoc.driver.sources import (
    MLIR,
    ZOO,
    SourceMap,
    build_zoo_model,
    input_name,
    open_input,
    parse_mlir,
    register_dialects,
    verify_error,
    verify_module,
)
from tasoc.driver.statistics import format_statistics
from tasoc.driver.weights import WeightsFile, find_weights, load_weights
from tasoc.passes.kinds import PassContract, check_pipeline, kinds_of
from tasoc.passes.progress import quiet
from tasoc.passes.registry import PassRegistryError, contract_of, get_all_passes
from tasoc.passes.report import PassRecord, RunReport, reporting
from tasoc.passes.summary import summary_of

if TYPE_CHECKING:
    import onnx


def op_counts(module: ModuleOp) -> dict[str, int]:
    """How many ops of each name the module holds (the module itself excluded)."""
    return dict(Counter(op.name for op in module.walk() if op is not module))


class _TextBuffer(io.StringIO):
    """The text IR of a run, kept until the outputs are committed: xDSL closes the
    stream it printed to, and closing a StringIO would drop its text."""

    def close(self) -> None:
        """Keep the text (see the class docstring)."""


class TasocOptMain(xDSLOptMain):
    """xdsl-opt configured as `tasoc opt`; see the module docstring for the differences."""

    version_format = f"tasoc {version('tasoc')} (xDSL {{xdsl_version}})"

    def __init__(self, args: Sequence[str]) -> None:
        self.sources = SourceMap()
        self._line_offset = 0
        self._program_output: StagedOutput | None = None
        """`-o OUT`: text IR, or an ONNX model when `_writes_onnx`."""
        self._weights_output: StagedOutput | None = None
        self._report_output: StagedOutput | None = None
        self._text = _TextBuffer()
        self._input_format = MLIR
        self._weights: dict[str, np.ndarray] | None = None
        """The weight values of the input, by `@main` argument name: an ONNX input's
        initializers, or the `.npz` of a text input (`_weights_file`)."""
        self._weights_file: WeightsFile | None = None
        self._notes: list[str] = []
        self._pass_times: list[str] = []
        """`--time-passes` lines, printed once the run has succeeded."""
        self._summaries: list[str] = []
        """The passes' summary lines, printed once the run has succeeded (not with -q)."""
        self._pass_started = 0.0
        self._ops_before: dict[str, int] = {}
        self._module_before_pass: ModuleOp | None = None
        self._contracts: list[PassContract | None] = []
        """The contract of each pass of the pipeline (None: a pass that declares none)."""
        self._position = 0
        """The index in the pipeline of the next pass to run (its length after the last)."""
        super().__init__(description="Optimize a tasoc program with a pass pipeline.", args=args)
        if self.args.output_file == STDOUT:
            self.args.output_file = None
        self.report = RunReport(
            input=input_name(self.args.input_file), pipeline=self.args.passes, seed=self.args.seed
        )
        self.input_shapes = collect_input_shapes(self.args.input_shape)
        if self.args.split_input_file and self.args.params is not None:
            raise UsageError("--params gives the weights of one program, not of split input")
        if self._writes_onnx() and self.args.split_input_file:
            raise UsageError(
                "--split-input-file makes several modules, and an .onnx output holds one; "
                "write text IR instead"
            )
        if not self.args.split_input_file:
            found = find_weights(self.args.input_file, self.args.params)
            # The file beside INPUT is read only where its values go somewhere (-o);
            # printing to stdout needs none, and a large model's .npz takes seconds.
            if found is not None and (found.beside is None or self.args.output_file):
                self._weights_file = found
        if self._writes_onnx() and (self.args.verify_diagnostics or self.args.parsing_diagnostics):
            raise UsageError(
                "--verify-diagnostics and --parsing-diagnostics write diagnostics as text, "
                "which an .onnx output cannot hold; write text IR instead"
            )
        weights_input = self._weights_file.path if self._weights_file is not None else None
        self.outputs = Outputs(
            path for path in (self.args.input_file, weights_input) if path is not None
        )
        """Every file the run writes, committed together when it succeeds (`run`)."""

    # ----------------------------------------------------------------- registration
    def register_all_arguments(self, arg_parser: argparse.ArgumentParser) -> None:
        # xDSLOptMain builds a plain ArgumentParser; make it ours so that usage errors
        # follow the one-line contract, and name it as users invoke it.
        arg_parser.__class__ = OneLineArgumentParser
        arg_parser.prog = "tasoc opt"
        arg_parser.epilog = (
            "input_file is a .mlir or .onnx file, '-' or absent for stdin, or a built-in "
            "model 'zoo:NAME?option=value&...' (see 'tasoc zoo'). -o OUT.onnx writes an "
            "ONNX model, any other OUT text IR (beside it OUT's stem .npz with the weights "
            "of an ONNX input). Errors are one line 'tasoc: error: ...' with exit status 1."
        )
        super().register_all_arguments(arg_parser)
        arg_parser.add_argument(
            "--seed",
            type=non_negative_int,
            default=0,
            help="seed for passes that search or sample, and for --verify-each inputs",
        )
        arg_parser.add_argument(
            "--report", metavar="R.json", help="write a JSON run report (timings, op counts)"
        )
        arg_parser.add_argument(
            "--plots",
            metavar="DIR",
            help="draw the pictures the passes ask for (a sharding's simulated timeline, "
            "its sharding map) as DIR/NAME.png",
        )
        arg_parser.add_argument(
            "--verify-each",
            action="store_true",
            help="after every pass, check the program still computes the same results",
        )
        arg_parser.add_argument(
            "--input-shape",
            action="append",
            type=input_shape_arg,
            metavar="NAME=DIMS",
            help="static shape of an .onnx input with dynamic dims, e.g. input=1x3x224x224 "
            "(repeatable)",
        )
        arg_parser.add_argument(
            "--params",
            metavar="P.npz",
            help="weight values of a text INPUT by argument name (default: INPUT's stem "
            ".npz when it exists), used for -o OUT.onnx and written beside -o OUT",
        )
        arg_parser.add_argument(
            "--pass-statistics",
            action="store_true",
            help="after the run, print what each pass did on stderr",
        )
        arg_parser.add_argument(
            "-q",
            "--quiet",
            action="store_true",
            help="print no pass summaries and no progress bars on stderr (errors, notes, "
            "--time-passes and --pass-statistics are still printed)",
        )
        arg_parser.add_argument(
            "--load-pass-plugin",
            action="append",
            default=[],
            metavar="PLUGIN",
            help="a .py file or an importable module whose ModulePass classes join the "
            "passes of -p (repeatable)",
        )

    def register_all_dialects(self) -> None:
        register_dialects(self.ctx)

    def register_all_targets(self) -> None:
        """Text IR only: xDSL's other targets (LLVM, assembly, ...) have nothing to say
        about `graph` programs."""
        self.available_targets[MLIR] = Universe.get_multiverse().all_targets[MLIR]

    def register_all_passes(self) -> None:
        try:
            passes = get_all_passes()
        except PassRegistryError as err:
            raise DriverError(str(err)) from None
        for name, factory in passes.items():
            self.register_pass(name, factory)

    def _load_plugins(self) -> None:
        """`--load-pass-plugin`: runs after the arguments are parsed (xDSL registers
        passes before), and before the pipeline is built from the passes it adds."""
        for plugin in self.args.load_pass_plugin:
            for name, pass_class in load_pass_plugin(plugin, self.available_passes).items():
                self.register_pass(name, lambda pass_class=pass_class: pass_class)

    def register_all_frontends(self) -> None:
        self.available_frontends[MLIR] = self._parse_mlir
        self.available_frontends[ONNX] = self._import_onnx
        self.available_frontends[ZOO] = lambda stream: build_zoo_model(stream.read().decode())

    def setup_pipeline(self) -> None:
        """Build the pipeline pass by pass, before any runs, so an error names the pass
        (and the option) at fault."""
        self._load_plugins()
        passes = build_pipeline(self.args.passes, self.available_passes)
        try:
            self._contracts = [contract_of(built) for built in passes]
        except PassRegistryError as err:
            raise DriverError(str(err)) from None
        self.pipeline = PassPipeline(tuple(passes), self._between_passes)

    # ------------------------------------------------------------------- input/output
    def get_input_stream(self) -> tuple[IO[bytes], str]:
        stream, self._input_format = open_input(self.args.input_file, self.args.frontend)
        try:
            require_onnx_for_shapes(self._input_format, self.input_shapes)
            if self._input_format == ONNX and self.args.split_input_file:
                raise UsageError("--split-input-file splits text IR, not an .onnx input")
            if self._input_format == ONNX and self.args.params is not None:
                raise UsageError("--params gives weights, and an .onnx INPUT carries its own")
        except UsageError:
            if stream is not sys.stdin.buffer:
                stream.close()
            raise
        return stream, self._input_format

    def get_input_name(self) -> str:
        return input_name(self.args.input_file)

    def parse_chunk(
        self, chunk: IO[bytes], file_extension: str, start_offset: int = 0
    ) -> ModuleOp | None:
        # The frontend table's signature carries only the stream; the chunk's line offset
        # (for `--split-input-file` locations) reaches `_parse_mlir` through here.
        self._line_offset = start_offset
        self.sources.clear()
        module = super().parse_chunk(chunk, file_extension, start_offset)
        if module is not None and self._weights_file is not None:
            self._weights = load_weights(module, self._weights_file)
        return module

    def _parse_mlir(self, stream: IO[bytes]) -> ModuleOp:
        return parse_mlir(
            self.ctx,
            stream.read(),
            self.get_input_name(),
            self.sources,
            self._line_offset,
            implicit_module=not self.args.no_implicit_module,
        )

    def _import_onnx(self, stream: IO[bytes]) -> ModuleOp:
        # A file is imported by path, so that external data beside it is found.
        source = stream.read() if stream is sys.stdin.buffer else self.args.input_file
        module, self._weights = import_model(source, self.get_input_name(), self.input_shapes)
        return module

    def _writes_onnx(self) -> bool:
        path = self.args.output_file
        return path is not None and os.path.splitext(path)[1] == f".{ONNX}"

    def prepare_output(self) -> IO[str]:
        """The stream xDSL prints text IR to: stdout, or a buffer written to `-o OUT` on
        commit. Every output is declared here, before any work, so that a bad or
        colliding path fails first; -o may be INPUT (replaced once the run succeeded,
        as mlir-opt allows), the report may not."""
        path = self.args.output_file
        self._program_output = self.outputs.declare(path, "-o", may_replace_input=True)
        takes_values = self._input_format == ONNX or self._weights_file is not None
        if path is not None and not self._writes_onnx() and takes_values:
            self._weights_output = self.outputs.declare(
                weights_path(path), "the weights beside -o", may_replace_input=True
            )
        self._report_output = self.outputs.declare(self.args.report, "--report")
        check_plots_directory(self.args.plots)
        return sys.stdout if self._program_output is None else self._text

    def output_resulting_program(self, prog: ModuleOp) -> str:
        """Text IR for xDSL to print, after staging what goes beside or instead of it:
        the `.npz` of the input's weights, or the ONNX model for `-o OUT.onnx`."""
        if self._weights_output is not None and self._weights is not None:
            with self._weights_output.open(binary=True) as stream:
                write_npz(stream, program_weights(prog, self._weights))
        if not self._writes_onnx():
            return super().output_resulting_program(prog)
        assert self._program_output is not None
        self._stage_onnx(self._program_output, export_model(prog, self._weights, self.args.seed))
        if self._weights is None and takes_weights(prog):
            self._notes.append(
                f"{self.args.output_file} has random weights (--seed {self.args.seed}): "
                f"{self.get_input_name()} carries no weight values"
            )
        return ""

    @staticmethod
    def _stage_onnx(output: StagedOutput, model: onnx.ModelProto) -> None:
        """The model, and its external data file when it needs one (over 2 GiB), staged
        for `-o OUT.onnx`; a FIFO or device takes a model that fits in one file."""
        from tasoc.backends.onnx import OnnxExportError
        from tasoc.backends.onnx.files import fits_in_protobuf, write_onnx_files

        try:
            if output.destination.special and fits_in_protobuf(model):
                with output.open(binary=True) as stream:
                    stream.write(model.SerializeToString())
                return
            with output.directory() as directory:
                write_onnx_files(model, directory, output.name)
        except OnnxExportError as err:
            raise DriverError(f"cannot export to ONNX: {err}") from None

    def run(self) -> None:
        """Run as xdsl-opt does, then commit `-o` (with its `.npz`) and the report
        together; on any failure (an interrupt included) none of them is written.

        With `--verify-diagnostics` or `--parsing-diagnostics`, `-o OUT` gets what
        stdout would have: each chunk's IR or the diagnostic xDSL prints in its place
        (a failing chunk is the run's result then, and exit status 0)."""
        with self.outputs:
            diagnostics = self.args.verify_diagnostics or self.args.parsing_diagnostics
            to_file = diagnostics and self.args.output_file is not None
            to_text = redirect_stdout(self._text) if to_file else nullcontext()
            with reporting(self.report), quiet(self.args.quiet), to_text:
                super().run()
            if self._program_output is not None and not self._writes_onnx():
                with self._program_output.open() as stream:
                    stream.write(self._text.getvalue())
            if self._report_output is not None:
                with self._report_output.open() as stream:
                    json.dump(self.report.to_json(), stream, indent=2, sort_keys=True)
                    stream.write("\n")
            if self.args.plots is not None:
                self._stage_plots(self.args.plots)
        for message in self._notes:
            note(message)
        for line in self._pass_times:
            print(line, file=sys.stderr)
        if self.args.pass_statistics and self.report.passes:
            print(format_statistics(self.report), file=sys.stderr)
        for line in self._summaries:
            print(line, file=sys.stderr)

    def _stage_plots(self, directory: str) -> None:
        """Draw every figure the passes asked for into `directory` (made if missing),
        staged with the run's other outputs; a note when no pass asked for one."""
        if not self.report.figures:
            self._notes.append(f"--plots {directory}: no pass of this pipeline draws a picture")
            return
        with errors_naming(directory):
            os.makedirs(directory, exist_ok=True)
        for name, figure in sorted(self.report.figures.items()):
            staged = self.outputs.declare(os.path.join(directory, f"{name}.png"), "--plots")
            assert staged is not None
            with staged.open(binary=True) as stream:
                render(figure, stream)

    # ------------------------------------------------------------------ between passes
    def _between_passes(
        self, previous: ModulePass | None, module: ModuleOp, upcoming: ModulePass | None
    ) -> None:
        """Verify, measure and check around each pass (xDSL calls this before the first
        pass, between passes and after the last)."""
        if previous is None:
            self._verify(module, None)
            self._ops_before = op_counts(module)
            self._position = 0
            self._check_pipeline(module)
        else:
            self._after_pass(previous, module, print_ir=upcoming is not None)
            self._position += 1
            if self._contracts[self._position - 1] is None:
                self._check_pipeline(module)
        if upcoming is not None:
            if self.args.verify_each:
                self._module_before_pass = module.clone()
            self.report.begin_pass(upcoming.name)
            self._pass_started = time.perf_counter()

    def _check_pipeline(self, module: ModuleOp) -> None:
        """DriverError naming the first pass, from the one about to run on, whose
        contract refuses what the passes before it make of `module`. Called before the
        first pass, and again after each pass without a contract, which alone can make
        a program other than its predecessors' contracts predict."""
        contracts = self._contracts[self._position :]
        if not contracts or contracts[0] is None:
            return
        names = (built.name for built in self.pipeline.passes[self._position :])
        passes = zip(names, contracts, strict=True)
        refusal = check_pipeline(passes, kinds_of(module), self._position + 1)
        if refusal is not None:
            raise DriverError(str(refusal))

    def _after_pass(self, previous: ModulePass, module: ModuleOp, print_ir: bool) -> None:
        seconds = time.perf_counter() - self._pass_started
        if self.args.time_passes:
            self._pass_times.append(f"Pass {previous.name} took {seconds} seconds")
        self._verify(module, previous)
        ops_after = op_counts(module)
        record = PassRecord(
            previous.name, str(previous.spec()), seconds, self._ops_before, ops_after
        )
        self.report.end_pass(record)
        summary = None if self.args.quiet else summary_of(previous, record.section)
        if summary is not None:
            self._summaries.extend(summary.lines(previous.name))
        self._ops_before = ops_after
        self._check_equivalent(previous, module)
        if print_ir and self.args.print_between_passes:
            print(f"IR after {previous.name}:")
            Printer(stream=sys.stdout).print_op(module)
            print("\n\n\n")

    def _verify(self, module: ModuleOp, previous: ModulePass | None) -> None:
        if self.args.disable_verify:
            return
        try:
            verify_module(module)
        except VerifyException as err:
            if self.args.verify_diagnostics:
                raise  # xdsl-opt prints it and exits 0: lit tests check verifier messages
            when = f"IR after pass '{previous.name}' does not verify: " if previous else ""
            raise verify_error(module, err, self.sources, when) from None

    def _check_equivalent(self, previous: ModulePass, module: ModuleOp) -> None:
        """`--verify-each`: run the program before and after `previous` on the same
        random inputs and fail if any output differs beyond tolerance."""
        if not self.args.verify_each or self._module_before_pass is None:
            return
        # Imported here: the numeric check loads the backends, which plain `opt` never needs.
        from tasoc.verify.equivalence import equivalent

        # A pass that changes @main's signature (autodiff) says which two programs
        # must agree instead.
        pair = getattr(previous, "verification_pair", None)
        before, after = self._module_before_pass, module
        try:
            if pair is not None:
                before, after = pair(before, after)
            result = equivalent(before, after, seed=self.args.seed)
        except ValueError as err:  # not a tasoc program, or the pass changed @main's arguments
            raise DriverError(
                f"--verify-each cannot compare the program before and after pass "
                f"'{previous.name}': {err}"
            ) from None
        if not result.ok:
            raise DriverError(
                f"pass '{previous.name}' changed the program's results: "
                f"{one_line(result.summary())}"
            )


def opt_command(argv: Sequence[str]) -> int:
    """`tasoc opt ARGS...`; returns the exit status (errors propagate to `main`)."""
    TasocOptMain(argv).run()
    return 0
