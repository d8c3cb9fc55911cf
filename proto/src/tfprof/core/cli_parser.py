"""The argument parser both command lines use: a mistyped choice gets the nearest one.

argparse answers ``tfprof-collector expor`` with its usage and every subcommand; a user
who typed one letter wrong wants the one they meant. ``GuessingParser`` says it in one
line on stderr and exits with status 2, as argparse does for any usage error, for the
subcommand and for every option with fixed choices (``--view``, ``--format``, ...).
Standard library only: the agent's command line uses it too.
"""

from __future__ import annotations

import argparse
import difflib
from typing import Any


def nearest(word: str, choices: list[str]) -> str | None:
    """The choice ``word`` most likely meant, or None when none is close."""
    close = difflib.get_close_matches(word, choices, n=1, cutoff=0.6)
    if close:
        return close[0]
    # A prefix is a good guess too: "sum" for "summary".
    starting = [c for c in choices if c.startswith(word)] if word else []
    return starting[0] if len(starting) == 1 else None


def unknown_choice(prog: str, action: argparse.Action, value: str) -> str:
    """The one line for ``value``, not among ``action``'s choices."""
    choices = [str(c) for c in action.choices or ()]
    guess = nearest(value, choices)
    hint = f"; did you mean {guess!r}?" if guess else ""
    if isinstance(action, argparse._SubParsersAction):
        top = prog.split()[0]
        return f"{prog}: unknown command {value!r}{hint} (`{top} --help` lists them)"
    flag = max(action.option_strings, key=len) if action.option_strings else action.dest
    return f"{prog}: {flag} {value!r} is not one of {', '.join(choices)}{hint}"


class GuessingParser(argparse.ArgumentParser):
    """``argparse.ArgumentParser`` whose bad choices name the nearest one; subparsers
    made from it are of the same class."""

    def _check_value(self, action: argparse.Action, value: Any) -> None:
        if action.choices is None or value in action.choices:
            return
        self.exit(2, unknown_choice(self.prog, action, str(value)) + "\n")
