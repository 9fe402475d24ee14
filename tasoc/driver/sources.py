"""Reading INPUT: a `.mlir` or `.onnx` file, `-` (stdin) or a zoo model `zoo:NAME?k=v&...`.

`tasoc opt` feeds these through xDSL's frontend table (`mlir`, `onnx`, `zoo`),
`tasoc run` through `load_program`; both import ONNX with `onnx_bridge.import_model`
and parse text with `LocatingParser`, which remembers where each op starts, so that
a verifier failure is reported at its `file:line:col` like a parse error is. xDSL's
parser does not attach source locations to ops, and without them a shape mismatch in a
2,000-line model would name the op but not where it is.
"""

from __future__ import annotations

import os
import re
import sys
from dataclasses import dataclass
from io import BytesIO
from typing import IO, NoReturn

import numpy as np
from xdsl.context import Context
from xdsl.dialects.builtin import ModuleOp
from xdsl.ir import Operation
from xdsl.parser import Parser
from xdsl.universe import Universe
from xdsl.utils.exceptions import VerifyException
from xdsl.utils.lexer import Input, Span

from tasoc.driver.errors import DriverError, one_line
from tasoc.driver.onnx_bridge import ONNX, InputShapes, import_model, require_onnx_for_shapes
from tasoc.ir.graph import Graph
from tasoc.ir.limits import MAX_NESTING, LimitError, check_environment
from tasoc.ir.memory import Memory
from tasoc.ir.parallel import Parallel
from tasoc.ir.program import IRRuleError, verify_ir

STDIN = "-"
ZOO_SCHEME = "zoo:"
MLIR = "mlir"
ZOO = "zoo"
FILE_FRONTENDS = (MLIR, ONNX)
"""File extensions (without the dot) the driver reads."""


def register_dialects(ctx: Context) -> None:
    """Make every dialect xDSL knows parseable, and tasoc's even without the plugin entry.

    Registration is lazy (a factory per dialect), so this costs nothing per dialect
    until the IR uses it; the explicit `graph`, `parallel` and `memory` cover an install
    whose entry points were not refreshed.
    """
    for name, factory in Universe.get_multiverse().all_dialects.items():
        ctx.register_dialect(name, factory)
    for dialect in (Graph, Parallel, Memory):
        if dialect.name not in ctx.registered_dialect_names:
            ctx.register_dialect(dialect.name, lambda d=dialect: d)


def make_context() -> Context:
    ctx = Context()
    register_dialects(ctx)
    return ctx


def input_name(spec: str | None) -> str:
    """How INPUT is named in messages (and in parse-error locations)."""
    return "<stdin>" if spec in (None, STDIN) else spec


def open_input(spec: str | None, frontend: str | None = None) -> tuple[IO[bytes], str]:
    """A byte stream for INPUT and the frontend that reads it.

    A zoo spec becomes a stream holding the spec itself (`NAME?k=v`), so that the zoo
    is one more frontend in xDSL's table. `frontend` overrides the file extension, as
    xdsl-opt's `-f` does. The resource limits' variables are checked here, before
    anything is read.
    """
    try:
        check_environment()
    except LimitError as err:
        raise DriverError(str(err)) from None
    if spec in (None, STDIN):
        return sys.stdin.buffer, frontend or MLIR
    if spec.startswith(ZOO_SCHEME):
        return BytesIO(spec.removeprefix(ZOO_SCHEME).encode()), ZOO
    extension = os.path.splitext(spec)[1].removeprefix(".")
    if frontend is None and extension not in FILE_FRONTENDS:
        problem = f"unknown file extension '.{extension}'" if extension else "no file extension"
        expected = ", ".join(f".{known}" for known in FILE_FRONTENDS)
        raise DriverError(f"{spec}: {problem}; expected {expected}, '-' or {ZOO_SCHEME}NAME")
    try:
        return open(spec, "rb"), frontend or extension
    except OSError as err:
        raise DriverError(f"cannot read '{spec}': {err.strerror or err}") from None


class SourceMap:
    """Where each parsed op starts in its text, to locate verifier failures.

    Spans are kept (cheap) and turned into `file:line:col` only when asked, because
    computing a line number scans the text up to the op.
    """

    def __init__(self) -> None:
        self._starts: dict[Operation, Span] = {}

    def record(self, op: Operation, start: Span) -> None:
        self._starts[op] = start

    def location(self, op: Operation) -> str | None:
        start = self._starts.get(op)
        return None if start is None else str(start.get_location())

    def clear(self) -> None:
        self._starts.clear()


class LocatingParser(Parser):
    """xDSL's MLIR parser, recording in a SourceMap where each op starts.

    `line_offset` shifts reported lines for a chunk of a `--split-input-file` input,
    as xDSL does for its parse errors.
    """

    def __init__(
        self, ctx: Context, text: str, name: str, sources: SourceMap, line_offset: int = 0
    ) -> None:
        super().__init__(ctx, text, name)
        self._sources = sources
        self._line_offset = line_offset

    def parse_operation(self) -> Operation:
        start = Span(self.pos, self.pos, self.lexer.input, self._line_offset)
        op = super().parse_operation()
        self._sources.record(op, start)
        return op


_UNNESTED_TEXT = re.compile(r'"(?:[^"\\\n\v\f]++|\\(?:["nt\\]|[0-9A-Fa-f]{2}))*+"|//[^\n]*|->|"')
"""String literals, comments and the `->` of function types: text whose brackets
(`"a(("`, `// :)`) and `>` do not open or close a level. A string is what xDSL's lexer
accepts (one line, escapes `\\n \\t \\\\ \\" \\XX`), matched possessively; a `"` that
starts no such string matches alone: xDSL's own pattern, with a nested quantifier,
backtracks exponentially in the length of the line after it (hours for 40
characters), so `check_lexable` refuses it first."""

_BRACKET_STEPS = np.zeros(128, np.int8)
_BRACKET_STEPS[[ord(c) for c in "{([<"]] = 1
_BRACKET_STEPS[[ord(c) for c in "})]>"]] = -1


_SCAN_SLICE = 2**22
"""Characters `check_lexable` looks at together (about 64 MiB of arrays)."""

_INTEGER_TYPE = re.compile(r"(?<![\w$.-])[su]?i(\d+)(?![\w$.-])")
"""An integer type (`i64`, `si8`, `ui6464`) outside strings and comments."""

MAX_INTEGER_BITS = 64
"""The widest integer type a program may name: the widest tasoc computes with. xDSL
makes a struct format for a dense array of any width (NotImplementedError past 64
bits) and the value range of any width (2^64 bits: a MemoryError)."""


def check_lexable(text: str, name: str, line_offset: int = 0) -> None:
    """DriverError, with its location, at the first place of `text` where xDSL's
    lexer or parser would take time or memory out of proportion to the text, or
    recurse until Python stops it: a string literal that does not close on its line
    (`_UNNESTED_TEXT`), an integer type wider than `MAX_INTEGER_BITS`, a bracket nested
    deeper than MAX_NESTING.

    xDSL's parser, verifier and printer recurse once per level of modules, regions,
    arrays, dictionaries and types, so 1,000 nested `[` end in a RecursionError. A
    scan of the brackets is deterministic (a RecursionError comes sooner or later
    depending on how deep the caller's stack already is) and costs one vectorized
    pass over the text (in slices, so its arrays stay small beside a large file), next
    to which the parse itself is slow.
    """

    def fail(offset: int, message: str) -> NoReturn:
        where = Span(offset, offset, Input(text, name), line_offset).get_location()
        raise DriverError(f"{where}: {message}")

    def blank(found: re.Match[str]) -> str:
        if found[0] == '"':
            fail(found.start(), "unterminated or malformed string literal")
        return " " * len(found[0])

    blanked = _UNNESTED_TEXT.sub(blank, text)
    for found in _INTEGER_TYPE.finditer(blanked):
        if int(found[1]) > MAX_INTEGER_BITS:
            fail(
                found.start(), f"integer types wider than {MAX_INTEGER_BITS} bits are not supported"
            )
    depth_before = 0
    for offset in range(0, len(blanked), _SCAN_SLICE):
        codes = np.frombuffer(blanked[offset : offset + _SCAN_SLICE].encode("utf-32-le"), np.uint32)
        depth = depth_before + np.cumsum(_BRACKET_STEPS[np.minimum(codes, 127)], dtype=np.int64)
        too_deep = np.flatnonzero(depth > MAX_NESTING)
        if too_deep.size:
            fail(offset + int(too_deep[0]), f"nesting deeper than {MAX_NESTING} levels")
        depth_before = int(depth[-1])


def parse_mlir(
    ctx: Context,
    data: bytes,
    name: str,
    sources: SourceMap,
    line_offset: int = 0,
    implicit_module: bool = True,
) -> ModuleOp:
    """Parse MLIR text; ParseError (carrying its location) propagates to the driver.

    What xDSL would choke on is checked first (`check_lexable`); what recurses without brackets (a
    long chain of unary minuses in an affine map) is caught as a RecursionError.
    """
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as err:
        raise DriverError(f"{name}: not UTF-8 text (byte {err.start})") from None
    check_lexable(text, name, line_offset)
    parser = LocatingParser(ctx, text, name, sources, line_offset)
    try:
        return parser.parse_module(implicit_module)
    except RecursionError:
        raise DriverError(f"{name}: nested too deeply to parse") from None


def build_zoo_model(spec: str) -> ModuleOp:
    """Build `zoo:NAME?k=v` (given without the scheme): the forward program, or with
    `train=` the training step the `autodiff` pass makes of it (applied here, since
    models do not depend on passes). ZooError and AutodiffFailed become DriverErrors."""
    # Imported here: building the zoo registry is only worth it when a zoo input is asked for.
    from tasoc.models import ZooError, parse_request

    try:
        request = parse_request(spec)
        module = request.build_forward()
    except ZooError as err:
        raise DriverError(str(err)) from None
    if request.training is not None:
        from tasoc.passes.autodiff import AutodiffFailed, AutodiffPass

        try:
            AutodiffPass(**request.training.pass_options()).apply(make_context(), module)
        except AutodiffFailed as err:
            raise DriverError(f"{ZOO_SCHEME}{spec}: {one_line(str(err))}") from None
    return module


def verify_module(module: ModuleOp) -> None:
    """xDSL's verifier, then the rules it does not check (`verify_ir`: dominance and
    resource limits); raises VerifyException."""
    module.verify()
    verify_ir(module)


def verify_error(
    module: ModuleOp, err: VerifyException, sources: SourceMap, when: str = ""
) -> DriverError:
    """A one-line DriverError for a failed `verify_module`, at the failing op's location.

    `module.verify()` does not say which op failed, so the ops are verified one at a
    time (only on this error path) to find the first that fails and has a location.
    """
    message = one_line(str(err).splitlines()[0]) if str(err) else "verification failed"
    if isinstance(err, IRRuleError):
        location = sources.location(err.op)
        return DriverError(f"{location}: {when}{message}" if location else f"{when}{message}")
    for op in module.walk():
        try:
            op.verify(verify_nested_ops=False)
        except VerifyException:
            location = sources.location(op)
            if location is not None:
                return DriverError(f"{location}: {when}{message}")
    return DriverError(f"{when}{message}")


@dataclass(frozen=True)
class Program:
    """A loaded INPUT: the verified module and, for an ONNX input, the weight values it
    carried by `@main` argument name (None when INPUT holds no values: text IR, zoo)."""

    module: ModuleOp
    weights: dict[str, np.ndarray] | None


def load_program(spec: str, input_shapes: InputShapes | None = None) -> Program:
    """Read, import or parse, and verify INPUT as one program (what `tasoc run` does)."""
    shapes = input_shapes or {}
    stream, frontend = open_input(spec)
    from_file = stream is not sys.stdin.buffer
    # An ONNX file is imported by path, so that external data beside it is found.
    data = b"" if frontend == ONNX and from_file else stream.read()
    if from_file:
        stream.close()
    require_onnx_for_shapes(frontend, shapes)
    if frontend == ONNX:
        return Program(*import_model(spec if from_file else data, input_name(spec), shapes))
    if frontend == ZOO:
        return Program(build_zoo_model(data.decode()), None)
    sources = SourceMap()
    module = parse_mlir(make_context(), data, input_name(spec), sources)
    try:
        verify_module(module)
    except VerifyException as err:
        raise verify_error(module, err, sources) from None
    return Program(module, None)


def load_module(spec: str) -> ModuleOp:
    """Read, parse and verify INPUT as one module (its weight values, if any, dropped)."""
    return load_program(spec).module
