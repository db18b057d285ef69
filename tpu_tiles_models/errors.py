"""The one base class for failures a user can cause and fix: a subclass of `UserError` whose
message is one line naming the file or flag and the fix (the command line prints it and exits
2). Standard library only, so every module can use it.
"""

from __future__ import annotations


class UserError(Exception):
    """Something the user can fix; the message says what and how, in one line."""


class FlagError(UserError, ValueError):
    """A command-line flag (or its `TrainArgs` field) has a value we cannot use."""


def one_line(e: BaseException, limit: int = 400) -> str:
    """`e` as one line of at most `limit` characters; a `UserError`'s message as it is, any
    other exception's prefixed with its type (it is a bug, or a failure from a library)."""
    text = " ".join(str(e).split())
    if not isinstance(e, UserError):
        text = f"{type(e).__name__}: {text}" if text else type(e).__name__
    return text if len(text) <= limit else text[: limit - 3] + "..."
