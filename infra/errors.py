"""Errors infra raises; the CLI turns each into one line and exit code 2."""


class InfraError(Exception):
    """A server could not be installed, started or reached; the message names the fix."""
