"""Signals that end a run (SIGINT, SIGTERM, SIGHUP) as exceptions, held back where a
step must not be cut in half.

By default SIGTERM and SIGHUP kill the process on the spot, leaving a run's staged
outputs behind. Raised as exceptions in the main thread instead (`Terminated`, and for
SIGINT `Interrupted`, a `KeyboardInterrupt` as Python raises), they unwind the run:
`finally` blocks and `Outputs` remove every stage, and `main` prints one line.

Some steps must finish once begun: creating a stage and remembering it, moving the
outputs into place. `held_back()` delays the exception until the step is done. Blocking
the signal with `pthread_sigmask` would not do: it blocks only the calling thread, and
a process with other threads (JAX's, onnxruntime's) takes the signal on one of those,
after which Python runs the handler in the main thread anyway. So the handler itself
looks whether a step is under way, and if so records the signal for the step's end.
"""

from __future__ import annotations

import os
import signal
import sys
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from types import FrameType

from tasoc.driver.errors import Terminated

RUN_ENDING_SIGNALS = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)

_holding = 0
"""How many `held_back` blocks are open (they nest)."""
_pending: int | None = None
"""The first signal that arrived while held back, raised when the last block ends."""


class Interrupted(KeyboardInterrupt):
    """SIGINT, raised by our handler: a `KeyboardInterrupt` to every `except` on the way,
    but not of that exact type. CPython notes an exception of exactly that type leaving
    code it runs through `PyRun_*` (C extensions run Python that way) and, at exit,
    kills the process with SIGINT instead of returning the status `main` chose: a run
    interrupted at the wrong moment printed its one line, then died by the signal
    (exit -2, not 130). The subclass keeps the status ours."""


def _exception(signum: int) -> BaseException:
    return Interrupted() if signum == signal.SIGINT else Terminated(signum)


def _handler(signum: int, frame: FrameType | None) -> None:
    global _pending
    if _holding:
        _pending = _pending or signum
        return
    raise _exception(signum)


@contextmanager
def signals_as_exceptions() -> Iterator[None]:
    """Within the block, SIGINT, SIGTERM and SIGHUP raise in the main thread (module
    docstring). A signal the caller ignores (`nohup`, a background job's SIGINT) stays
    ignored, and so does one with a handler of its own caller's; the previous handlers
    come back on exit (tests call `main` in-process). Off the main thread, where Python
    cannot install handlers, nothing changes."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    ours = {signal.SIG_DFL, signal.default_int_handler}
    previous = {number: signal.getsignal(number) for number in RUN_ENDING_SIGNALS}
    for number, handler in previous.items():
        if handler in ours:
            signal.signal(number, _handler)
    unraisable = sys.unraisablehook
    sys.unraisablehook = _raised_again(unraisable)
    try:
        yield
    finally:
        sys.unraisablehook = unraisable
        for number, handler in previous.items():
            if handler in ours:
                signal.signal(number, handler)


def _raised_again(
    hook: Callable[[sys.UnraisableHookArgs], object],
) -> Callable[[sys.UnraisableHookArgs], object]:
    """An unraisable-exception hook that sends our signal again. Python runs a signal's
    handler wherever the main thread is, a weakref or `__del__` callback included
    (the light graph's interning drops dead nodes in one), and an exception raised
    there is printed and dropped: the run went on and ended with status 0. Raised
    again a moment later, the handler runs where the main thread then is, once the
    callback has returned; every other unraisable exception goes to `hook`."""

    def raised_again(args: sys.UnraisableHookArgs) -> object:
        error = args.exc_value
        if isinstance(error, Interrupted):
            signum = signal.SIGINT
        elif isinstance(error, Terminated):
            signum = error.signum
        else:
            return hook(args)
        # from another thread, a moment later: sent from here, the handler would run
        # inside this hook, where its exception is dropped too
        threading.Timer(0.01, os.kill, (os.getpid(), signum)).start()
        return None

    return raised_again


@contextmanager
def held_back() -> Iterator[None]:
    """Run the block to its end even if a run-ending signal arrives meanwhile; the
    signal is raised when the (outermost) block ends."""
    global _holding, _pending
    _holding += 1
    try:
        yield
    finally:
        _holding -= 1
        if not _holding and _pending is not None:
            signum, _pending = _pending, None
            raise _exception(signum)
