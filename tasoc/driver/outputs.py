"""The files a `tasoc` command writes: all of them or none, never a damaged one.

A run may write several files (`-o OUT`, the `.npz` beside it, an ONNX model's
external data, `--report R.json`, a rule file). The contract (docs/driver.md,
*Outputs*) is that a failure anywhere, a signal included, leaves every existing output
byte for byte as it was and no temporary file behind. So one `Outputs` transaction
per run:

- `declare` checks a destination before any work (a directory, a missing parent, an
  unwritable place, two outputs or an output and an input that are the same file) and
  stages it: a private directory `.NAME.XXXXXXXX.tmp` beside the destination, where the
  content is written under its final name;
- `commit` moves every staged file over its destination with `os.replace` (atomic
  within a directory), after keeping a hard link to each file it replaces, so that
  a replace failing halfway (an immutable file) puts back the ones already moved;
- `discard` (on any exception, `KeyboardInterrupt` and signals included) removes the
  stages.

Special files are written *through*, never replaced: `-` is stdout, and a FIFO or a
character device (`/dev/null`, a terminal) is opened for writing at commit, its content
spooled until then in an unnamed temporary file. A symlink is followed: its target is
replaced atomically and the link stays a link.
"""

from __future__ import annotations

import errno
import os
import shutil
import stat
import sys
import tempfile
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from types import TracebackType
from typing import IO, Any

from tasoc.driver.errors import DriverError
from tasoc.driver.signals import held_back

STDOUT = "-"
"""The destination name that means standard output, as for most Unix tools."""


def cannot_write(given: str, err: OSError) -> DriverError:
    """The one-line error for a destination the system refuses."""
    return DriverError(f"cannot write '{given}': {err.strerror or err}")


@contextmanager
def errors_naming(given: str) -> Iterator[None]:
    """Turn an OSError in the block (a full disk: ENOSPC) into the one-line error
    naming the destination `given`."""
    try:
        yield
    except OSError as err:
        raise cannot_write(given, err) from None


Identity = tuple[str, tuple[int, int] | None]


def _identity(path: str) -> Identity:
    """What makes two paths the same file: the real path (symlinks followed), and for an
    existing file its device and inode (hard links, bind mounts)."""
    real = os.path.realpath(path)
    try:
        status = os.stat(real)
    except OSError:
        return real, None
    return real, (status.st_dev, status.st_ino)


def _same_file(first: Identity, second: Identity) -> bool:
    return first[0] == second[0] or (first[1] is not None and first[1] == second[1])


@dataclass(frozen=True)
class Destination:
    """A path a command will write, checked: `given` as the user wrote it (for
    messages), `label` the option that named it, `target` the file the bytes end up in
    (a symlink's target), `special` for a FIFO or character device (written through,
    never replaced)."""

    given: str
    label: str
    target: Path
    special: bool

    @classmethod
    def check(cls, given: str, label: str) -> Destination:
        """Refuse, with one line, what cannot be written: a directory, a missing parent or
        one that is a file, a place without write permission, a socket. A path ending
        in `/` names a directory, even one that does not exist yet (`out.mlir/`)."""
        if given.endswith(("/", os.sep)):
            raise cannot_write(given, _os_error(errno.EISDIR))
        target = Path(os.path.realpath(given))
        try:
            mode: int | None = os.stat(target).st_mode
        except FileNotFoundError:
            mode = None
        except OSError as err:  # a parent that is a file (ENOTDIR), a symlink loop
            raise cannot_write(given, err) from None
        if mode is None or stat.S_ISREG(mode):
            place, access = target.parent, os.W_OK | os.X_OK
            if not place.is_dir():
                raise cannot_write(given, _os_error(errno.ENOENT))
        elif stat.S_ISDIR(mode):
            raise cannot_write(given, _os_error(errno.EISDIR))
        elif stat.S_ISFIFO(mode) or stat.S_ISCHR(mode):
            place, access = target, os.W_OK
        else:
            raise DriverError(
                f"cannot write '{given}': not a regular file, FIFO or character device"
            )
        if not os.access(place, access):
            raise cannot_write(given, _os_error(errno.EACCES))
        return cls(given, label, target, special=mode is not None and not stat.S_ISREG(mode))


def _os_error(code: int) -> OSError:
    return OSError(code, os.strerror(code))


def check_destination(given: str | None, label: str) -> str | None:
    """For a command with one output written at its end (`write_output`): check it now,
    before the work, so a bad path fails first; None for stdout (None or `-`)."""
    if given is None or given == STDOUT:
        return None
    Destination.check(given, label)
    return given


class StagedOutput:
    """A declared destination and the content staged for it.

    Write the content with `open` (one stream) or into `directory` (several files under
    their final names, e.g. an ONNX model and its external data); a declared output the
    run never writes is left as it was.
    """

    def __init__(self, destination: Destination) -> None:
        self.destination = destination
        self.written = False
        self._spool: IO[Any] | None = None
        self._stage: Path | None = None
        if not destination.special:
            target = destination.target
            with errors_naming(destination.given):
                self._stage = Path(
                    tempfile.mkdtemp(prefix=f".{target.name}.", suffix=".tmp", dir=target.parent)
                )

    @property
    def name(self) -> str:
        """The destination's file name, under which the content is staged."""
        return self.destination.target.name

    @contextmanager
    def open(self, binary: bool = False) -> Iterator[IO[Any]]:
        """The stream to write the content to (text in UTF-8, or bytes); an OSError
        while writing (ENOSPC) is one line naming the destination."""
        self.written = True
        mode = "w+b" if binary else "w+"
        encoding = None if binary else "utf-8"
        with errors_naming(self.destination.given):
            if self._stage is None:
                # Unnamed (O_TMPFILE, or unlinked at once): nothing to clean up, ever.
                # It lives until commit copies it through, so no `with` here.
                self._spool = tempfile.TemporaryFile(mode, encoding=encoding)  # noqa: SIM115
                yield self._spool
                self._spool.flush()
            else:
                with open(self._stage / self.name, mode, encoding=encoding) as stream:
                    yield stream

    @contextmanager
    def directory(self) -> Iterator[Path]:
        """A private directory to write the content into, as files under their final
        names (the destination's own name and siblings beside it); they all move beside
        the destination on commit. Not for special files, which take one stream."""
        if self._stage is None:
            raise DriverError(
                f"cannot write '{self.destination.given}': a FIFO or device takes one "
                "stream, and this output is several files; write to a regular file"
            )
        self.written = True
        with errors_naming(self.destination.given):
            yield self._stage

    def moves(self) -> list[tuple[Path, Path]]:
        """(staged file, destination) for each file of a written regular output."""
        if self._stage is None or not self.written:
            return []
        parent = self.destination.target.parent
        return [(staged, parent / staged.name) for staged in sorted(self._stage.iterdir())]

    def shown(self, target: Path) -> str:
        """How errors name `target`, one of `moves()`' destinations: as the user wrote
        it, or by its path for a sibling (an ONNX model's `.data` file)."""
        return self.destination.given if target.name == self.name else str(target)

    def write_through(self) -> None:
        """Copy the spooled content into the special file (commit of a FIFO or device)."""
        if self._spool is None:
            return
        self._spool.seek(0)
        binary = "b" in self._spool.mode
        with (
            errors_naming(self.destination.given),
            open(
                self.destination.target,
                "wb" if binary else "w",
                encoding=None if binary else "utf-8",
            ) as device,
        ):
            shutil.copyfileobj(self._spool, device)

    def discard(self) -> None:
        if self._stage is not None:
            shutil.rmtree(self._stage, ignore_errors=True)
        if self._spool is not None:
            self._spool.close()


class Outputs:
    """The outputs of one run, committed together or not at all (module docstring).

    Use as a context manager around the whole run: it commits when the block ends
    normally and discards on any exception. `inputs` are the files the run reads; an
    output may replace one only where `declare` allows it.
    """

    def __init__(self, inputs: Iterable[str] = ()) -> None:
        self._inputs = [(given, _identity(given)) for given in inputs if os.path.isfile(given)]
        self._staged: list[StagedOutput] = []

    def declare(
        self, given: str | None, label: str, may_replace_input: bool = False
    ) -> StagedOutput | None:
        """Check and stage the destination `given` (None or `-`: stdout, returned as
        None); `label` names it in errors (`-o`, `--report`). Fails with one line on a
        directory, a missing parent, an unwritable place, and a path that is another
        output's (or an input's, unless `may_replace_input`)."""
        if given is None or given == STDOUT:
            return None
        destination = Destination.check(given, label)
        identity = _identity(given)
        if not (destination.special and stat.S_ISCHR(os.stat(destination.target).st_mode)):
            # Two outputs to /dev/null are fine; any other shared destination loses one.
            for other in self._staged:
                if _same_file(identity, _identity(other.destination.given)):
                    raise DriverError(
                        f"{label} '{given}' and {other.destination.label} "
                        f"'{other.destination.given}' are the same file; give them "
                        "different paths"
                    )
        if not may_replace_input:
            for input_given, input_identity in self._inputs:
                if _same_file(identity, input_identity):
                    raise DriverError(
                        f"{label} '{given}' would overwrite the input '{input_given}'; "
                        "give it another path"
                    )
        with held_back():
            staged = StagedOutput(destination)
            self._staged.append(staged)
        return staged

    def __enter__(self) -> Outputs:
        return self

    def __exit__(
        self,
        kind: type[BaseException] | None,
        error: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        if kind is None:
            self.commit()
        else:
            self.discard()

    def commit(self) -> None:
        """Move every written output into place, or (on any failure) none of them.

        Regular files are replaced with signals held back; special files are written
        through afterwards with signals allowed (a FIFO waits for its reader, and the
        user must be able to stop that). A failure there, or a signal that was held
        back during the moves, puts the replaced files back."""
        replaced: list[tuple[Path, Path | None]] = []
        try:
            with held_back():
                replaced = self._replace_regular_files()
            for staged in self._staged:
                staged.write_through()
        except BaseException:
            with held_back():
                _put_back(replaced)
            raise
        finally:
            self.discard()

    def _replace_regular_files(self) -> list[tuple[Path, Path | None]]:
        """Replace each destination by its staged file; the (destination, kept previous
        file or None) pairs, for `_put_back`. A failure puts back what was replaced."""
        moves = [(staged, move) for staged in self._staged for move in staged.moves()]
        targets: dict[Path, StagedOutput] = {}
        for staged, (_, target) in moves:  # external data beside -o may meet another output
            if target in targets and targets[target] is not staged:
                first, second = targets[target].destination, staged.destination
                raise DriverError(
                    f"{first.label} '{first.given}' and {second.label} '{second.given}' "
                    f"both write '{target}'; give them different paths"
                )
            targets[target] = staged
        backups: list[Path | None] = []
        for staged, (source, target) in moves:
            with errors_naming(staged.shown(target)):
                backups.append(_keep_aside(source, target))
        replaced: list[tuple[Path, Path | None]] = []
        try:
            for (staged, (source, target)), backup in zip(moves, backups, strict=True):
                with errors_naming(staged.shown(target)):
                    os.replace(source, target)
                replaced.append((target, backup))
        except BaseException:
            _put_back(replaced)
            raise
        return replaced

    def discard(self) -> None:
        """Remove every stage (and spool), all of them even if a signal arrives;
        existing destinations are not touched."""
        with held_back():
            for staged in self._staged:
                staged.discard()


def _put_back(replaced: list[tuple[Path, Path | None]]) -> None:
    """Undo replacements: each destination gets its previous file back (or goes, if it
    was new)."""
    for target, backup in reversed(replaced):
        if backup is None:
            target.unlink(missing_ok=True)
        else:
            os.replace(backup, target)


def _keep_aside(source: Path, target: Path) -> Path | None:
    """Before `source` replaces `target`: give `source` the mode of the file it replaces
    (a new file keeps the umask's default) and keep that file under a second name in
    `source`'s stage, so that a later failure can put it back; None for a new file.

    A hard link costs nothing; where the file system refuses one (no hard links, an
    immutable file), a copy is kept instead."""
    try:
        mode = os.stat(target).st_mode
    except FileNotFoundError:
        return None
    os.chmod(source, stat.S_IMODE(mode))
    backup = source.with_name(f"{source.name}.previous")
    try:
        os.link(target, backup)
    except OSError:
        shutil.copy2(target, backup)
    return backup


def write_output(given: str | None, label: str, text: str) -> None:
    """Write `text` to one destination (None or `-`: stdout) under the same contract,
    for commands with a single output (which may be their input: a rule file proven
    in place)."""
    with Outputs() as outputs:
        staged = outputs.declare(given, label)
        if staged is None:
            sys.stdout.write(text)
            return
        with staged.open() as stream:
            stream.write(text)
