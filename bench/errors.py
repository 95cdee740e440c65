"""Errors a user can cause; the CLI prints them as one line and exits 2. Interrupts too."""

import threading


class UserError(Exception):
    """Bad input (unknown name, bad option, unusable folder); the message names the fix."""


class Interrupted(Exception):
    """Ctrl-C (or SIGTERM) stopped a command after cleaning up; the message says what was kept.

    Why not KeyboardInterrupt: typer turns that into a silent exit 130, so the one line
    saying where the finished cases are would never print.
    """


#: Set by bench's SIGINT/SIGTERM handler. Python drops a KeyboardInterrupt raised while a
#: fork handler runs (``Exception ignored in _releaseLock``: every subprocess start), so
#: the runner also checks this flag between steps and a Ctrl-C is never lost.
INTERRUPT = threading.Event()


def on_interrupt_signal(signum: int, frame: object) -> None:
    """Signal handler: remember the interrupt, then raise KeyboardInterrupt where the code is."""
    INTERRUPT.set()
    raise KeyboardInterrupt


def raise_if_interrupted() -> None:
    """A checkpoint: raise KeyboardInterrupt if a Ctrl-C arrived and was swallowed."""
    if INTERRUPT.is_set():
        raise KeyboardInterrupt


def quiet_swallowed_interrupts(unraisable: object) -> None:
    """``sys.unraisablehook``: a Ctrl-C Python had to drop is handled through INTERRUPT, so
    print no traceback for it; anything else goes to the default hook."""
    import sys

    if isinstance(getattr(unraisable, "exc_value", None), KeyboardInterrupt):
        return
    sys.__unraisablehook__(unraisable)  # type: ignore[arg-type]
