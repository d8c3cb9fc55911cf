"""A self-signed certificate and key for TLS tests."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest


def make_cert(directory: Path) -> tuple[Path, Path]:
    """A self-signed certificate for localhost/127.0.0.1, made with the openssl CLI."""
    openssl = shutil.which("openssl")
    if openssl is None:
        pytest.skip("openssl CLI not found: cannot make a test certificate")
    cert, key = directory / "cert.pem", directory / "key.pem"
    subprocess.run(
        [openssl, "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "1",
         "-subj", "/CN=localhost", "-addext", "subjectAltName=DNS:localhost,IP:127.0.0.1",
         "-keyout", str(key), "-out", str(cert)],
        check=True, capture_output=True, timeout=60,
    )  # fmt: skip
    return cert, key
