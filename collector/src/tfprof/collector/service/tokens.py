"""What a bearer token allows: the fleet token, or one scoped to a job or to a node.

- The **fleet token** (``--auth-token-file``) allows every call: streams of any job and
  host, ``StartCapture``, ``ListCaptures``. Operators and trusted relays hold it.
- A **job token** (``tfprof-collector token --job NAME``) allows ``Clock`` and streams
  whose hello names job NAME: a job's token cannot write another job's streams.
- A **node token** (``tfprof-collector token --node HOST``) allows ``Clock`` and streams
  whose hello names host HOST: a node's daemon cannot speak for another host.

Scoped tokens need no table on the collector: a token is ``tfprof1:KIND:NAME:MAC``
with MAC = HMAC-SHA256(key, ``KIND:NAME``) under the key of ``--token-key-file``, so
any collector holding the key verifies it, and the key's owner mints them. No token
lets anyone resume another caller's stream: that takes the stream's own secret.
"""

from __future__ import annotations

import hashlib
import hmac
from dataclasses import dataclass

PREFIX = "tfprof1"
KINDS = ("job", "node")


@dataclass(frozen=True)
class Scope:
    """Who a call speaks for: ``admin`` (the fleet token), ``open`` (no authentication
    configured), or ``job``/``node`` with the name the token is bound to."""

    kind: str
    name: str = ""

    @property
    def unrestricted(self) -> bool:
        return self.kind in ("admin", "open")

    def allows_stream(self, job: str, host: str) -> str | None:
        """None when a stream of ``job`` on ``host`` may be written; else why not."""
        if self.kind == "job" and job != self.name:
            return f"this token is for job {self.name}, not {job}"
        if self.kind == "node" and host != self.name:
            return f"this token is for host {self.name}, not {host}"
        return None

    def __str__(self) -> str:
        return self.kind if not self.name else f"{self.kind} {self.name}"


def _mac(key: bytes, kind: str, name: str) -> str:
    return hmac.new(key, f"{kind}:{name}".encode(), hashlib.sha256).hexdigest()


def mint(key: bytes, kind: str, name: str) -> str:
    """A token for job or node ``name``."""
    if kind not in KINDS:
        raise ValueError(f"a token is for a job or a node, not {kind!r}")
    if not name or ":" in name or not name.isprintable() or " " in name:
        raise ValueError(f"{kind} name {name!r} cannot be put in a token")
    return f"{PREFIX}:{kind}:{name}:{_mac(key, kind, name)}"


def verify(key: bytes, token: str) -> Scope | None:
    """The scope ``token`` carries when ``key`` made it; else None."""
    parts = token.split(":")
    if len(parts) != 4 or parts[0] != PREFIX or parts[1] not in KINDS:
        return None
    _, kind, name, mac = parts
    if not hmac.compare_digest(mac.encode(), _mac(key, kind, name).encode()):
        return None
    return Scope(kind, name)
