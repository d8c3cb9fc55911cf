"""A stream's secret, as the data dir keeps it: its SHA-256, never the secret itself.

The relay makes 32 random bytes per stream (``Hello.stream_secret``) and sends them in
every hello of the stream; the first hello binds the stream id to them, and a later hello
resumes the stream only with the same bytes. The digest lives beside the stream's log
(``secret.sha256``, as readable as the log: knowing it does not give the secret), and the
stored ``hello.pb`` has the field cleared. A stream stored by an older release has no
digest: the first secret it is resumed with binds it.
"""

from __future__ import annotations

import hashlib
import hmac
from pathlib import Path

from tfprof.proto import collector_pb2 as pb

FILE = "secret.sha256"


def digest_of(hello: pb.Hello) -> str:
    return hashlib.sha256(hello.stream_secret).hexdigest()


def stored_digest(directory: Path) -> str | None:
    """The digest a stream directory holds; None when it holds none (a new stream, or
    one of an older release)."""
    try:
        digest = (directory / FILE).read_text().strip()
    except FileNotFoundError:
        return None
    return digest or None  # empty: torn by a crash, as if never written


def same(a: str, b: str) -> bool:
    return hmac.compare_digest(a.encode(), b.encode())


def without_secret(hello: pb.Hello) -> pb.Hello:
    """The hello as it is stored and shown: no secret."""
    if not hello.stream_secret:
        return hello
    kept = pb.Hello()
    kept.CopyFrom(hello)
    kept.ClearField("stream_secret")
    return kept
