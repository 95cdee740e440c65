"""Errors a user can cause; the CLI prints them as one line and exits 2."""


class UserError(Exception):
    """Bad input (unknown name, bad option, unusable folder); the message names the fix."""


class Interrupted(Exception):
    """Ctrl-C (or SIGTERM) stopped a command after cleaning up; the message says what was kept.

    Why not KeyboardInterrupt: typer turns that into a silent exit 130, so the one line
    saying where the finished cases are would never print.
    """
