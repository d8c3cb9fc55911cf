"""``tfprof-collector token``: mint a bearer token for one job or one node.

The token is verified by any collector started with the same ``--token-key-file``; it
allows streams of that job (or from that host) and clock probes, nothing else
(service/tokens.py). Print it once and hand it to the job's or node's agent as
``TFPROF_AUTH_TOKEN``; anyone holding it can write that job's (or host's) streams.
"""

from __future__ import annotations

import argparse


def register(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    p = sub.add_parser(
        "token",
        help="mint a token that lets one job or one node stream, and nothing else",
        description="Print a bearer token for one job (--job) or one node (--node), made "
        "with the key the collector reads from --token-key-file. The job's or node's agent "
        "sends it as TFPROF_AUTH_TOKEN; the collector lets it write streams of that job, or "
        "from that host, only.",
    )
    p.add_argument("--key-file", metavar="FILE", required=True,
                   help="the collector's --token-key-file")  # fmt: skip
    which = p.add_mutually_exclusive_group(required=True)
    which.add_argument("--job", metavar="NAME", help="the job the token may stream for")
    which.add_argument("--node", metavar="HOST", help="the host the token may stream from")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from tfprof.collector.config import read_token_key
    from tfprof.collector.errors import InvalidArgument
    from tfprof.collector.service.tokens import mint

    key = read_token_key(args.key_file)
    kind, name = ("job", args.job) if args.job else ("node", args.node)
    try:
        print(mint(key, kind, name))
    except ValueError as exc:
        raise InvalidArgument(str(exc)) from None
    return 0
