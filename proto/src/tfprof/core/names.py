"""The naming rule for jobs, hosts and run ids: safe as a path component and a label."""

from __future__ import annotations

import re

from tfprof.core.errors import InputError

SAFE_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,63}")
RULE = "1-64 of letters, digits, '.', '_', '-', starting with a letter or digit"


class InvalidName(InputError):
    """A job, host or run name breaks ``RULE``."""


def is_safe_name(value: str) -> bool:
    # fullmatch: `$` alone would accept a trailing "\n"
    return SAFE_NAME.fullmatch(value) is not None


def check_name(what: str, value: str) -> str:
    """``value`` unchanged if it follows the rule, else ``InvalidName`` naming ``what``."""
    if not is_safe_name(value):
        raise InvalidName(f"invalid {what} {value!r}: {RULE}")
    return value
