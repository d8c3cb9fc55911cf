"""Secrets out of a process's command line before it is stored anywhere.

A hello carries the traced process's argv, which the relay spools and the collector
stores and shows (``jobs``, exports, the lake's ``streams`` table). Command lines carry
secrets (``--api-key=...``, ``password=...``, ``https://user:pass@host``), so the relay
redacts argv before the hello leaves it (spool and wire), and the collector again for
clients that did not.

An option name matches when it contains one of the patterns (case-insensitive
substrings; ``DEFAULT_PATTERNS`` plus ``--redact`` / ``TFPROF_REDACT``):

- ``--name=value`` and ``name=value`` keep the name: ``--api-key=***``;
- ``--name value`` (the option, then its value as the next word): the value becomes ``***``;
- URL credentials anywhere: ``scheme://user:***@host``.

A name such as ``--author`` matches ``auth`` and is redacted too: a false positive costs
a value in a listing, a false negative a credential. Standard library only.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Sequence

DEFAULT_PATTERNS = ("key", "token", "secret", "password", "passwd", "auth")
MASK = "***"
_URL_CREDENTIALS = re.compile(r"(?P<head>[A-Za-z][A-Za-z0-9+.-]*://[^/@:\s]*:)[^/@\s]*@")
_ASSIGNMENT = re.compile(r"^(?P<name>-{0,2}[A-Za-z_][A-Za-z0-9_.-]*)=(?P<value>.*)$", re.S)
_OPTION = re.compile(r"^-{1,2}[A-Za-z_][A-Za-z0-9_.-]*$")


def patterns_from(values: Iterable[str]) -> tuple[str, ...]:
    """The defaults plus ``values`` (each may be comma-separated), lowercased, once each."""
    extra = [p.strip().lower() for v in values for p in v.split(",") if p.strip()]
    return tuple(dict.fromkeys([*DEFAULT_PATTERNS, *extra]))


def _secret_name(name: str, patterns: Sequence[str]) -> bool:
    low = name.lower()
    return any(p in low for p in patterns)


def redact_argv(argv: Sequence[str], patterns: Sequence[str] = DEFAULT_PATTERNS) -> list[str]:
    """``argv`` with the values of secret-looking options and URL passwords masked."""
    out: list[str] = []
    mask_next = False
    for word in argv:
        if mask_next:
            mask_next = False
            if not word.startswith("-"):
                out.append(MASK)
                continue
        word = _URL_CREDENTIALS.sub(lambda m: m.group("head") + MASK + "@", word)
        assigned = _ASSIGNMENT.match(word)
        if assigned is not None:
            if _secret_name(assigned.group("name"), patterns):
                word = f"{assigned.group('name')}={MASK}"
        elif _OPTION.match(word) and _secret_name(word.lstrip("-"), patterns):
            mask_next = True
        out.append(word)
    return out
