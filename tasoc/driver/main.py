"""`tasoc`: the command-line driver (`tasoc opt|run|zoo|rules|machine`).

`main` dispatches on the first word and turns every failure into the one-line
contract of `errors.py`. The subcommands are imported on demand: `run` loads JAX
(about a second and a half), which `tasoc opt` and `tasoc zoo` never need. The
commands that read IR run with the cyclic garbage collector tuned for large
programs (`collector_tuned_for_ir`).
"""

from __future__ import annotations

import gc
import os
import sys
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from importlib.metadata import version

from tasoc.driver.errors import OneLineArgumentParser, report_failure
from tasoc.driver.signals import signals_as_exceptions

Command = Callable[[Sequence[str]], int]

IR_COLLECTOR_THRESHOLDS = (100_000, 50, 1_000)
"""Collections of generation 0 after 100,000 net allocations instead of 700, of the
older generations 50 and 1,000 times rarer than each younger one."""


@contextmanager
def collector_tuned_for_ir() -> Iterator[None]:
    """Run the block with the cyclic collector set for parsing and rewriting IR.

    Parsing a 10k-op program allocates millions of objects and keeps ~130,000 of them
    alive in the module; with the default thresholds the collector walks that growing
    heap again and again (8-16% of a parse). Freezing what is alive on entry (the
    imported modules) takes it out of every collection, and higher thresholds make
    collections rarer while still reclaiming cycles (ops and their parents point to
    each other), which a long search needs. Measured on `tasoc opt` of a 10k-op file:
    as fast as with the collector off (docs/benchmarks.md). Both settings are
    undone on exit, so calling `main` in a process (tests) does not leave the objects
    of that process frozen, where cyclic garbage among them would never be freed.
    """
    thresholds = gc.get_threshold()
    gc.freeze()
    gc.set_threshold(*IR_COLLECTOR_THRESHOLDS)
    try:
        yield
    finally:
        gc.set_threshold(*thresholds)
        gc.unfreeze()


def _opt(argv: Sequence[str]) -> int:
    from tasoc.driver.opt import opt_command

    with collector_tuned_for_ir():
        return opt_command(argv)


XLA_LOG_LEVEL = "3"
"""`TF_CPP_MIN_LOG_LEVEL` for the driver's runs: XLA's C++ logging (tsl's, read from
the environment when jaxlib loads) then prints only fatal errors. Its ERROR-level lines
are not tasoc's failures, which reach the user as exceptions and one error line: they
are alarms such as `slow_operation_alarm.cc ... Very slow compile? If you want to file
a bug, run with envvar XLA_FLAGS=...`, printed in the middle of a run's output. tasoc
says itself, on a terminal, that it is compiling (`progress.status`). A user who wants
XLA's logs sets the variable; `main` sets it only when unset, and the library never
does (a program importing tasoc keeps its own logging)."""


def _run(argv: Sequence[str]) -> int:
    from tasoc.driver.run import run_command

    with collector_tuned_for_ir():
        return run_command(argv)


def _rules(argv: Sequence[str]) -> int:
    from tasoc.driver.rules import rules_command

    return rules_command(argv)


def _machine(argv: Sequence[str]) -> int:
    from tasoc.driver.machine import machine_command

    return machine_command(argv)


def zoo_command(argv: Sequence[str]) -> int:
    """`tasoc zoo`: each model with its training loss, one-line summary and options
    (defaults), then how to ask for a training step instead of the forward program."""
    parser = OneLineArgumentParser(
        prog="tasoc zoo",
        description="List the built-in models, usable as INPUT 'zoo:NAME?option=value&...'.",
    )
    parser.parse_args(argv)
    from tasoc.models import TRAINING_LOSSES, TRAINING_OPTIMIZERS, list_models

    models = list_models()
    width = max((len(model.name) for model in models), default=0)
    loss_width = max(len(loss) for loss in TRAINING_LOSSES)
    print(f"{'model':<{width}}  {'training loss':<{loss_width}}  summary")
    for model in models:
        print(f"{model.name:<{width}}  {model.loss:<{loss_width}}  {model.summary}")
        options = ", ".join(f"{key}={_option_text(value)}" for key, value in model.defaults.items())
        print(f"{'':<{width}}  {'':<{loss_width}}  options: {options or '(none)'}")
    print(
        f"\nA training step instead of the forward program: add "
        f"train={'|'.join(TRAINING_OPTIMIZERS)} (the optimizer),\n"
        f"optionally loss={'|'.join(TRAINING_LOSSES)} (default: the training loss above)\n"
        f"and lr=NUMBER, e.g. tasoc run '{TRAINING_EXAMPLE}' --steps 10"
    )
    return 0


TRAINING_EXAMPLE = "zoo:bert?layers=2&hidden=64&heads=4&seq=16&train=adam&lr=0.001"
"""The training spec `tasoc zoo` shows as an example (a test runs it)."""


def _option_text(value: object) -> str:
    """An option's default as it is written in a zoo spec (`true`, not `True`)."""
    return str(value).lower() if isinstance(value, bool) else str(value)


COMMANDS: dict[str, tuple[Command, str]] = {
    "opt": (_opt, "parse a program, run a pass pipeline (-p), print the IR"),
    "run": (_run, "run @main on random inputs with JAX or the numpy reference"),
    "zoo": (zoo_command, "list the built-in models usable as INPUT 'zoo:NAME'"),
    "rules": (_rules, "generate, verify, validate and list rewrite rules"),
    "machine": (_machine, "measure this machine for the simulator (tasoc machine calibrate)"),
}


def _top_level_parser() -> OneLineArgumentParser:
    """Only for `tasoc --help`, `--version` and a wrong command: subcommands parse their own
    arguments (`opt` with xdsl-opt's parser)."""
    parser = OneLineArgumentParser(
        prog="tasoc",
        description="tasoc: a search-based compiler for deep-learning computation graphs.",
        epilog="INPUT is a .mlir file, '-' for stdin, or a model 'zoo:NAME?option=value&...'. "
        "Run 'tasoc COMMAND --help' for a command's options.",
    )
    parser.add_argument("--version", action="version", version=f"tasoc {version('tasoc')}")
    commands = parser.add_subparsers(dest="command", metavar="COMMAND", required=True)
    for name, (_, summary) in COMMANDS.items():
        commands.add_parser(name, help=summary, add_help=False)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Run `tasoc` with `argv` (default: the process's arguments); return the exit status.

    stdout is flushed here, inside the error handling, so that a reader gone before the
    last buffered bytes (`tasoc --help | true`) is seen as one, not as Python's
    "Exception ignored" at exit."""
    args = list(sys.argv[1:] if argv is None else argv)
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", XLA_LOG_LEVEL)  # before any command loads JAX
    try:
        with signals_as_exceptions():
            status = _dispatch(args)
            sys.stdout.flush()
            return status
    except BrokenPipeError:
        # The reader went away (`tasoc opt m.mlir | head`): stop quietly with status 1, as
        # Python's documentation advises (docs/decisions.md), and point stdout at
        # /dev/null so that flushing it at exit cannot fail again.
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 1
    except BaseException as failure:
        return report_failure(failure)


def _dispatch(args: list[str]) -> int:
    """The command `args` name, run; or the top-level parser's help, version or error."""
    try:
        if args and args[0] in COMMANDS:
            command, _ = COMMANDS[args[0]]
            return command(args[1:])
        _top_level_parser().parse_args(args)
        return 0
    except SystemExit as exit_request:  # --help and --version exit through argparse
        code = exit_request.code
        return code if isinstance(code, int) else 0 if code is None else 1


if __name__ == "__main__":
    sys.exit(main())
