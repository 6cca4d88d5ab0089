"""What a ``rieszflow`` command prints: console levels, the run's log file, warnings, closed pipes.

:class:`Console` is installed by :func:`rieszflow.studies.cli.main` around one command. It replaces
``sys.stdout`` and ``sys.stderr`` by :class:`Tee` streams that pass everything to the console and
send each complete line, with a timestamp and a level, to the command's log file
(:meth:`Console.log_to`; ``<out>.log`` beside a file, ``<dir>/rieszflow.log`` in a sweep directory). Nothing a study
prints needs to change: ``print``, ``tqdm`` bars (their final state is logged once), the CLI's error
line and, at ``--log-level debug``, the traceback all reach the file.

Python warnings are formatted as one line ``rieszflow COMMAND: warning: MESSAGE`` (no source line;
``warnings.formatwarning``), printed unless the level is ``error``, and always logged.

A console that goes away (``rieszflow status FILE | head``) is not an error: the first
``BrokenPipeError`` points the stream at ``/dev/null`` (so the interpreter's last flush is quiet
too) and the command goes on, its log file complete; the exit code is the command's own.
"""
from __future__ import annotations

import datetime as _dt
import os
import re
import sys
import threading
import warnings
from pathlib import Path
from typing import Callable

__all__ = ["Console", "Tee"]

#: ANSI escape sequences (tqdm moves the cursor between bars), removed from logged lines.
_ANSI = re.compile(r"\x1b\[[0-9;?]*[A-Za-z]")
#: Lines kept in memory while the log file cannot be opened yet (its directory does not exist).
_MAX_PENDING = 10_000


def _stamp() -> str:
    return _dt.datetime.now(_dt.timezone.utc).strftime("%Y-%m-%dT%H:%M:%S.%fZ")[:-4] + "Z"


class _LogFile:
    """The log file of one command: lines appended with a UTC timestamp and a level, written and
    flushed line by line once ``ready()`` holds (before that, kept in memory)."""

    def __init__(self, path: Path, ready: Callable[[], bool]):
        self.path, self.ready = Path(path), ready
        self.pending: list[str] = []
        self.dropped = 0
        self.file = None
        self.failed = False
        # stdout and stderr (and threads: Dask's, progress bars') write here: one writer at a time
        self._lock = threading.RLock()

    def write(self, level: str, line: str) -> None:
        with self._lock:
            self._write(level, line)

    def _write(self, level: str, line: str) -> None:
        text = f"{_stamp()} {level:<7} {line}\n"
        if self.file is None and not self.failed:
            try:
                if self.ready():
                    self.file = open(self.path, "a", encoding="utf-8")
                    if self.dropped:
                        self.file.write(f"{_stamp()} WARNING ({self.dropped} earlier lines were not "
                                        f"kept: the log file could not be opened yet)\n")
                    self.file.writelines(self.pending)
                    self.pending = []
            except OSError:
                self.failed = True         # an unwritable log never fails the run; see close()
        if self.file is not None:
            try:
                self.file.write(text)
                self.file.flush()
            except OSError:
                self.failed, self.file = True, None
        elif not self.failed:
            self.pending.append(text)
            if len(self.pending) > _MAX_PENDING:
                del self.pending[0]
                self.dropped += 1

    def close(self) -> None:
        with self._lock:
            self._close()

    def _close(self) -> None:
        if self.file is None and not self.failed and self.pending:
            try:                             # the directory may exist by now (a sweep made it)
                if self.ready():
                    self.file = open(self.path, "a", encoding="utf-8")
                    self.file.writelines(self.pending)
            except OSError:
                pass
        if self.file is not None:
            self.file.close()
            self.file = None


class Tee:
    """A text stream that writes to a console stream and sends complete lines to a log.

    Parameters
    ----------
    stream : text stream
        The console (``sys.stdout`` or ``sys.stderr`` as they were).
    console : Console
        Receives each complete line (:meth:`Console.log_line`).
    level : str
        The level of this stream's lines (``"INFO"`` for stdout, ``"WARNING"`` for stderr; lines
        that read as the CLI's error lines are logged as ``"ERROR"``).

    Notes
    -----
    A carriage return starts the line again (a progress bar redrawn in place), so a bar is logged
    once, in the state it had when its line ended. Attributes other than the writing methods
    (``fileno``, ``isatty``, ``encoding``) are the console stream's.
    """

    def __init__(self, stream, console: "Console", level: str):
        self._stream, self._console, self._level = stream, console, level
        self._line = ""
        self._bar = False                 # the last write redrew a line in place (a progress bar)
        self._lock = threading.RLock()
        self.broken = False

    def __getattr__(self, name):
        return getattr(self._stream, name)

    def write(self, text: str) -> int:
        """Write ``text`` to the console and log its complete lines.

        Parameters
        ----------
        text : str

        Returns
        -------
        int
            ``len(text)``.
        """
        with self._lock:
            self._to_console(text)
            self._collect(text)
        return len(text)

    def write_at(self, text: str, level: str) -> None:
        """Print ``text`` and log its lines at ``level`` (say a traceback at ``"DEBUG"``).

        Parameters
        ----------
        text : str
        level : str
        """
        with self._lock:
            self._to_console(text)
        for line in text.splitlines():
            if line.strip():
                self._console.log_line(level, line.rstrip())

    def flush(self) -> None:
        """Flush the console stream (a closed pipe is handled as in :meth:`write`)."""
        with self._lock:
            if not self.broken:
                try:
                    self._stream.flush()
                except BrokenPipeError:
                    self._break()

    def _to_console(self, text: str) -> None:
        if self.broken:
            return
        try:
            self._stream.write(text)
        except BrokenPipeError:
            self._break()

    def _break(self) -> None:
        """The reader of this stream has gone: write nothing more to it, and point its file
        descriptor at /dev/null so the interpreter's final flush does not fail either."""
        self.broken = True
        try:
            fd = self._stream.fileno()
            devnull = os.open(os.devnull, os.O_WRONLY)
            os.dup2(devnull, fd)
            os.close(devnull)
        except (AttributeError, OSError, ValueError):
            pass

    def _collect(self, text: str) -> None:
        if self._bar and self._line and not text.startswith(("\r", "\n")):
            self.close_line()             # another writer after a bar's redraw: the bar's line ends
        self._bar = text.startswith("\r")
        self._line += text
        if "\n" not in self._line:
            if "\r" in self._line:               # a bar redrawn in place: keep its last state
                self._line = self._line.rsplit("\r", 1)[1]
            return
        *lines, self._line = self._line.split("\n")
        for line in lines:
            line = _ANSI.sub("", line.rsplit("\r", 1)[-1]).rstrip()
            if line:
                self._console.log_line(self._level_of(line), line)

    def _level_of(self, line: str) -> str:
        if self._level == "INFO":
            return "INFO"
        if ": error:" in line or ": run failed:" in line:
            return "ERROR"
        if ": warning:" in line or "Warning:" in line or ": interrupted" in line:
            return "WARNING"
        return "INFO"                            # progress bars and other stderr output

    def close_line(self) -> None:
        """Log a last line that has no newline yet (a progress bar left open)."""
        with self._lock:
            line = _ANSI.sub("", self._line.rsplit("\r", 1)[-1]).rstrip()
            self._line = ""
            if line:
                self._console.log_line(self._level_of(line), line)


class Console:
    """The console and log file of one ``rieszflow`` command (a context manager).

    Parameters
    ----------
    prog : str
        The program name of the warning lines (``"rieszflow"``; ``command`` is added).

    Attributes
    ----------
    command : str or None
        The subcommand, once known (``rieszflow run: warning: ...``).
    show_warnings : bool
        Whether warnings are printed on the console (False at ``--log-level error``); they are
        always logged.
    log_path : pathlib.Path or None
        The log file, once :meth:`log_to` has named it.
    """

    def __init__(self, prog: str = "rieszflow"):
        self.prog, self.command, self.show_warnings = prog, None, True
        self.log_path = None
        self._log = None
        self._saved = None

    def __enter__(self):
        self._saved = (sys.stdout, sys.stderr, warnings.formatwarning)
        self.stdout = Tee(sys.stdout, self, "INFO")
        self.stderr = Tee(sys.stderr, self, "WARNING")
        sys.stdout, sys.stderr = self.stdout, self.stderr
        warnings.formatwarning = self._format_warning
        return self

    def __exit__(self, *exc):
        for tee in (self.stdout, self.stderr):
            tee.close_line()
        sys.stdout, sys.stderr, warnings.formatwarning = self._saved
        if self._log is not None:
            self._log.close()
            self._log = None       # a Tee kept by someone (a logging handler) no longer logs
        return False

    @property
    def pipe_broken(self) -> bool:
        """Whether the console's stdout reader went away (``| head``)."""
        return self.stdout.broken

    def log_to(self, path, ready: Callable[[], bool] | None = None, header: str | None = None) -> None:
        """Append every line from now on to the log file ``path``.

        Parameters
        ----------
        path : path-like
            The log file.
        ready : callable, optional
            Whether the file may be created now (default: its directory exists); until then the
            lines are kept in memory (at most 10,000, the oldest dropped and counted).
        header : str, optional
            A first line (the command line).
        """
        path = Path(path)
        self.log_path = path
        self._log = _LogFile(path, ready or path.parent.is_dir)
        if header:
            self._log.write("INFO", header)

    def log_line(self, level: str, line: str) -> None:
        """Append one line to the log file (nothing before :meth:`log_to`).

        Parameters
        ----------
        level : str
            ``"DEBUG"``, ``"INFO"``, ``"WARNING"`` or ``"ERROR"``.
        line : str
        """
        if self._log is not None:
            self._log.write(level, line)

    def _format_warning(self, message, category, filename, lineno, line=None) -> str:
        """``warnings.formatwarning``: one line naming the command, no source line.

        Python writes the returned text to ``sys.stderr`` (the :class:`Tee`: printed and logged).
        At ``--log-level error`` the line is logged here and nothing is printed. Warnings recorded
        by ``warnings.catch_warnings(record=True)`` (``pytest.warns``) are not formatted, so they
        are recorded as before.
        """
        who = f"{self.prog} {self.command}" if self.command else self.prog
        text = f"{who}: warning: {message}"
        if self.show_warnings:
            return text + "\n"
        self.log_line("WARNING", text)
        return ""
