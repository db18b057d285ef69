"""The one base class for failures a user can cause and fix.

Bad flag values, missing or corrupt files and mismatched models raise a subclass of
`UserError` whose message is one line naming the file or flag and the fix. The command line
prints it as `tpu-tiles <cmd>: error: <message>` and exits with status 2; any other
exception is a bug of ours and keeps its traceback. This module imports nothing heavy, so
TensorFlow-free modules (`kaggle`) can use it.
"""

from __future__ import annotations


class UserError(Exception):
    """Something the user can fix; the message says what and how, in one line."""


class FlagError(UserError, ValueError):
    """A command-line flag (or its `TrainArgs` field) has a value we cannot use."""
