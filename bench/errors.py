"""Errors a user can cause; the CLI prints them as one line and exits 2."""


class UserError(Exception):
    """Bad input (unknown name, bad option, unusable folder); the message names the fix."""
