"""SIGINT and SIGTERM as :class:`RunInterrupted`: the interrupt handling of every writer.

:func:`interruptible` turns the two signals into an exception; while a block of records is being
written (:func:`_signals_held`) a signal is only recorded and raised once the block is complete
(:func:`_raise_held_signal`); :func:`raise_pending_signal` re-raises a signal whose exception Python
swallowed (inside a weakref or ``__del__`` callback).
"""
from __future__ import annotations

import contextlib
import signal

__all__ = ["RunInterrupted", "interruptible", "raise_pending_signal"]


class RunInterrupted(KeyboardInterrupt):
    """A run stopped by a signal (SIGINT or SIGTERM).

    A ``KeyboardInterrupt``, so every ``except KeyboardInterrupt`` (and the writers'
    ``status = "interrupted"``) handles SIGTERM exactly like Ctrl-C.

    Parameters
    ----------
    signum : int
        The signal number.

    Attributes
    ----------
    signum : int
    exit_code : int
        128 + signum (130 for SIGINT, 143 for SIGTERM), the shell convention.
    """

    def __init__(self, signum: int):
        super().__init__(f"interrupted by {signal.Signals(signum).name}")
        self.signum = int(signum)
        self.exit_code = 128 + int(signum)


@contextlib.contextmanager
def interruptible():
    """Turn SIGTERM and SIGINT into :class:`RunInterrupted` inside the block.

    The previous handlers are restored on exit. Outside the main thread (where Python
    cannot install handlers) the block runs unchanged.

    Yields
    ------
    None
    """
    global _PENDING_SIGNAL, _HELD_SIGNAL

    def handler(signum, frame):
        global _PENDING_SIGNAL, _HELD_SIGNAL
        _PENDING_SIGNAL = signum    # kept: an exception raised inside a weakref or __del__
        if _HOLD_SIGNALS:           # callback is swallowed by Python; writers re-raise it.
            _HELD_SIGNAL = signum   # A block is being written: raised once it is complete.
            return
        raise RunInterrupted(signum)

    try:
        old = {sig: signal.signal(sig, handler) for sig in (signal.SIGTERM, signal.SIGINT)}
    except ValueError:              # not the main thread
        yield
        return
    _PENDING_SIGNAL = _HELD_SIGNAL = None
    try:
        yield
    finally:
        _PENDING_SIGNAL = _HELD_SIGNAL = None
        for sig, h in old.items():
            signal.signal(sig, h)


#: The signal caught by :func:`interruptible` (None if none): when Python swallowed the
#: exception of the handler (it was raised inside a weakref or ``__del__`` callback), the next
#: :meth:`TrajectoryWriter.append` raises it again, so no interrupt is lost.
_PENDING_SIGNAL: int | None = None

#: Nesting depth of :func:`_signals_held`: while positive, the handler of :func:`interruptible`
#: only records the signal (a block of records is written whole or not at all) in
#: ``_HELD_SIGNAL``, which :meth:`TrajectoryWriter.flush` raises once the block is written.
_HOLD_SIGNALS = 0
_HELD_SIGNAL: int | None = None


@contextlib.contextmanager
def _signals_held():
    """Hold SIGINT/SIGTERM caught by :func:`interruptible` in ``_PENDING_SIGNAL`` inside the block."""
    global _HOLD_SIGNALS
    _HOLD_SIGNALS += 1
    try:
        yield
    finally:
        _HOLD_SIGNALS -= 1


def _raise_held_signal() -> None:
    """Raise :class:`RunInterrupted` for a signal held while a block was written (if any)."""
    global _PENDING_SIGNAL, _HELD_SIGNAL
    if _HELD_SIGNAL is not None and not _HOLD_SIGNALS:
        signum, _HELD_SIGNAL, _PENDING_SIGNAL = _HELD_SIGNAL, None, None
        raise RunInterrupted(signum)


def raise_pending_signal() -> None:
    """Raise :class:`RunInterrupted` if :func:`interruptible` caught a signal that was swallowed.

    Raises
    ------
    RunInterrupted
        With the pending signal (SIGINT or SIGTERM).
    """
    global _PENDING_SIGNAL, _HELD_SIGNAL
    if _PENDING_SIGNAL is not None:
        # one signal, raised once: a copy held while a block was written is consumed too
        signum, _PENDING_SIGNAL, _HELD_SIGNAL = _PENDING_SIGNAL, None, None
        raise RunInterrupted(signum)
