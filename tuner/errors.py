"""Errors that reach the user as one line and exit code 2."""


class UserError(Exception):
    """Bad input: the message says what to fix. Printed without a traceback."""

    exit_code = 2
