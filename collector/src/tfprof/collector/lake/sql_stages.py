"""A ``WITH a AS (...), b AS (...) SELECT ...`` statement as its stages, for engines that
inline every common table expression where it is used.

Spark's analyser copies a CTE into each of its uses: the distributed views' statements
(``dist_sql``, ``collective_sql``: some forty CTEs, several used two or three times)
grow into plans its driver cannot hold (STEPS ran a 3 GiB driver out of heap before
running anything). Run stage by stage, each stage materialised (Spark: ``CACHE TABLE
name AS body``), every plan stays one CTE deep; the SQL text is the same.
"""

from __future__ import annotations

import re

_NAME = re.compile(r"\s*([A-Za-z_][A-Za-z0-9_]*)\s+AS\s*\(", re.IGNORECASE)


def _skip(text: str, i: int) -> int:
    """Past whitespace and ``--`` comments from ``i``."""
    while i < len(text):
        if text[i].isspace():
            i += 1
        elif text.startswith("--", i):
            end = text.find("\n", i)
            i = len(text) if end < 0 else end + 1
        else:
            break
    return i


def _close(text: str, i: int) -> int:
    """Index just past the parenthesis that closes the one before ``i``."""
    depth = 1
    while i < len(text):
        c = text[i]
        if c == "'":
            i = text.index("'", i + 1) + 1  # SQL doubles quotes inside: two literals read alike
            continue
        if text.startswith("--", i):
            i = _skip(text, i)
            continue
        if c == "(":
            depth += 1
        elif c == ")":
            depth -= 1
            if depth == 0:
                return i + 1
        i += 1
    raise ValueError("unbalanced parentheses")


def stages(statement: str) -> tuple[list[tuple[str, str]], str]:
    """The CTEs of ``statement`` in order as (name, body), and its final SELECT."""
    i = _skip(statement, 0)
    if not statement[i:].upper().startswith("WITH"):
        return [], statement
    i += 4
    out: list[tuple[str, str]] = []
    while True:
        i = _skip(statement, i)
        found = _NAME.match(statement, i)
        if found is None:
            return out, statement[i:]
        start = found.end()
        end = _close(statement, start)
        out.append((found.group(1), statement[start : end - 1].strip()))
        i = _skip(statement, end)
        if i < len(statement) and statement[i] == ",":
            i += 1
