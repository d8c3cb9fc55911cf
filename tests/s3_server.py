"""A real S3 server on 127.0.0.1 for the lake's object-store tests: moto's server (a
Flask app speaking the S3 REST API) in a thread of the test process, on a free port.

Clients reach it the way a user points tfprof at any S3-compatible store: the AWS
SDK's environment (``AWS_ENDPOINT_URL``, ``AWS_ACCESS_KEY_ID``, ``AWS_SECRET_ACCESS_KEY``,
``AWS_REGION``), which pyarrow's S3FileSystem reads. Tests skip, saying why, without
moto (the ``test`` extra installs it).
"""

from __future__ import annotations

import logging
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass

import pytest


@dataclass(frozen=True)
class S3Server:
    endpoint: str  # http://127.0.0.1:PORT

    @property
    def env(self) -> dict[str, str]:
        """What a process needs in its environment to use this server."""
        return {
            "AWS_ENDPOINT_URL": self.endpoint,
            "AWS_ACCESS_KEY_ID": "tfprof-test",
            "AWS_SECRET_ACCESS_KEY": "tfprof-test",
            "AWS_REGION": "us-east-1",
            "AWS_EC2_METADATA_DISABLED": "true",  # never wait for an instance profile
        }

    def create_bucket(self, name: str) -> None:
        from pyarrow import fs

        s3 = fs.S3FileSystem(
            access_key="tfprof-test",
            secret_key="tfprof-test",
            region="us-east-1",
            endpoint_override=self.endpoint,
            allow_bucket_creation=True,
        )
        s3.create_dir(name)


@contextmanager
def s3_server() -> Iterator[S3Server]:
    server_module = pytest.importorskip(
        "moto.server", reason="moto[server] is not installed (pip install -e '.[test]')"
    )
    logging.getLogger("werkzeug").setLevel(logging.ERROR)  # one line per request otherwise
    server = server_module.ThreadedMotoServer(ip_address="127.0.0.1", port=0, verbose=False)
    server.start()
    try:
        host, port = server.get_host_and_port()
        yield S3Server(f"http://{host}:{port}")
    finally:
        server.stop()
