"""The driver's error contract: one line `tasoc: error: ...`, exit status 1, no traceback.

Users of a command-line compiler read the first line of its output and maybe paste it
into a search box; a Python traceback or xDSL's multi-line source excerpt buries that
line. So every failure a user can cause (a bad file, bad IR, a bad pipeline, a bad
option) is condensed here into one line that names the problem and, where the IR has
one, its `file:line:col`. Anything else is a bug in tasoc and is reported as an
`internal error` in the same one-line form, unless `TASOC_DEBUG=1` asks for the
traceback.
"""

from __future__ import annotations

import argparse
import os
import re
import signal
import sys
from collections.abc import Callable
from typing import NoReturn

from xdsl.utils.exceptions import ArgSpecParseError, DiagnosticException, ParseError

from tasoc.ir.program import ProgramError

PREFIX = "tasoc: error: "
NOTE_PREFIX = "tasoc: note: "
DEBUG_ENV = "TASOC_DEBUG"
"""Set to `1` to get the Python traceback of an internal error instead of one line."""


class DriverError(Exception):
    """A failure the user can fix; its message is printed as is after `tasoc: error: `."""


class UsageError(DriverError):
    """The command line itself is wrong (unknown option, missing argument)."""


class Terminated(BaseException):
    """A termination signal (SIGTERM, SIGHUP) raised as an exception in the main thread,
    as Python does with SIGINT (KeyboardInterrupt), so that cleanup runs on the way out:
    staged outputs are discarded (`outputs.py`), nothing is left half-written. Not an
    `Exception`, so that no `except Exception` on the way can swallow it."""

    def __init__(self, signum: int) -> None:
        super().__init__(signal.Signals(signum).name)
        self.signum = signum


class OneLineArgumentParser(argparse.ArgumentParser):
    """An argparse parser whose usage errors follow the driver's one-line contract.

    argparse would print the usage block and exit 2; raising lets `main` print the
    same single line as for every other error, and return 1.
    """

    def error(self, message: str) -> NoReturn:
        _, _, command = self.prog.partition(" ")
        where = f"{command}: " if command else ""
        raise UsageError(f"{where}{message} (see '{self.prog} --help')")


def _int_at_least(text: str, lowest: int) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected an integer >= {lowest}, got '{text}'") from None
    if value < lowest:
        raise argparse.ArgumentTypeError(f"expected an integer >= {lowest}, got {value}")
    return value


def non_negative_int(text: str) -> int:
    """argparse type for counts and seeds (numpy rejects negative seeds deep inside)."""
    return _int_at_least(text, 0)


def positive_int(text: str) -> int:
    """argparse type for `--steps`: a run of no steps shows nothing."""
    return _int_at_least(text, 1)


def one_line(text: str) -> str:
    """Collapse all whitespace, newlines included, so a message fits on one line."""
    return " ".join(text.split())


def parse_error_message(err: ParseError) -> str:
    """`file:line:col: message` from xDSL's ParseError, without the source excerpt."""
    return f"{err.span.get_location()}: {one_line(err.msg)}"


_PIPELINE_LOCATION = re.compile(r"^pass-pipeline:\d+:(\d+)$")


def pipeline_syntax_message(
    err: ArgSpecParseError, original_column: Callable[[int], int] = lambda column: column
) -> str:
    """The column and message of a pipeline syntax error, from xDSL's multi-line text;
    `original_column` maps the column in the text xDSL parsed to the one the user wrote
    (the driver quotes some numbers first, `tasoc.driver.pass_options`).

    ArgSpecParseError keeps only its formatted text (`pass-pipeline:1:COL`, the
    pipeline, a caret line and the message), so that text is what we condense.
    """
    lines = [line.strip() for line in str(err).splitlines() if line.strip()]
    column = next((match[1] for line in lines if (match := _PIPELINE_LOCATION.match(line))), None)
    where = f"at column {original_column(int(column))}: " if column else ""
    return f"{where}{lines[-1]}" if lines else "syntax error"


def describe(exc: BaseException) -> str | None:
    """The one-line message for a failure the user caused, or None for an internal error."""
    if isinstance(exc, DriverError | ProgramError):
        # ProgramError: a module that is not a tasoc program, or one a pass or backend
        # cannot take exactly (a dag refusing a foreign op, a backend an encoding).
        return one_line(str(exc))
    if isinstance(exc, ParseError):
        return parse_error_message(exc)
    if isinstance(exc, ArgSpecParseError):
        return f"invalid pass or target specification: {pipeline_syntax_message(exc)}"
    if isinstance(exc, DiagnosticException):
        # Verifier and pass failures; their `__notes__` (a dump of the module) are dropped.
        return one_line(str(exc).splitlines()[0]) if str(exc) else type(exc).__name__
    return None


def note(message: str) -> None:
    """Tell the user something worth knowing about a run that succeeded, on one stderr
    line (stdout may be the IR)."""
    print(f"{NOTE_PREFIX}{one_line(message)}", file=sys.stderr)


def report_failure(exc: BaseException) -> int:
    """Print the one-line message for `exc` on stderr and return the exit status.

    Internal errors are re-raised when `TASOC_DEBUG=1`, so a developer sees where.
    """
    if isinstance(exc, KeyboardInterrupt):
        print(f"{PREFIX}interrupted", file=sys.stderr)
        return 128 + signal.SIGINT
    if isinstance(exc, Terminated):
        # The shell's convention for a process a signal ended: 128 + its number.
        print(f"{PREFIX}terminated by {signal.Signals(exc.signum).name}", file=sys.stderr)
        return 128 + exc.signum
    message = describe(exc)
    if message is None:
        if os.environ.get(DEBUG_ENV) == "1":
            raise exc
        detail = one_line(str(exc))
        message = f"internal error: {type(exc).__name__}" + (f": {detail}" if detail else "")
    print(f"{PREFIX}{message}", file=sys.stderr)
    return 1
