"""What ``serve`` checks before it exposes anything: who can reach the port, who can read
the data dir.

- A listen address other hosts can reach (``0.0.0.0``, ``::``, a routable address or a
  name that resolves to one) needs authentication: a token (``--auth-token-file``,
  ``--token-key-file``) or client certificates (``--tls-client-ca``). Without, ``serve``
  refuses to start unless ``--insecure`` says so, and then says it once per start.
- The data dir holds every job's records and command lines: its folder is made
  ``0750`` (group ``--data-group`` when given, with the set-group-id bit so everything
  made under it inherits the group), and the process's umask ``027`` keeps every file
  made under it from other users.
"""

from __future__ import annotations

import grp
import ipaddress
import logging
import os
import socket
from pathlib import Path

from tfprof.collector.config import CollectorConfig, ConfigError
from tfprof.collector.store.files import DIR_MODE

log = logging.getLogger("tfprof.collector.serve")

UMASK = 0o027


def listen_hosts(listen: str) -> list[str]:
    """The addresses ``listen`` (HOST:PORT) binds: a wildcard, or what HOST resolves to."""
    host = listen.rpartition(":")[0].strip("[]")
    if host in ("", "*"):
        return ["0.0.0.0"]
    try:
        infos = socket.getaddrinfo(host, None, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE)
    except (OSError, UnicodeError):
        return [host]  # gRPC's own bind will say it cannot listen there
    return sorted({str(info[4][0]) for info in infos})


def reachable_from_others(listen: str) -> bool:
    """Whether another host may reach ``listen`` (anything but loopback addresses)."""
    for address in listen_hosts(listen):
        try:
            ip = ipaddress.ip_address(address.split("%", 1)[0])
        except ValueError:
            return True
        if not ip.is_loopback:
            return True
    return False


def authenticated(config: CollectorConfig) -> bool:
    return bool(config.auth_token_file or config.token_key_file or config.tls_client_ca)


def check_listener(config: CollectorConfig) -> None:
    """Refuse an open non-loopback listener (``ConfigError``: exit 2, one line); warn once
    for one the operator declared ``--insecure``."""
    if authenticated(config) or not reachable_from_others(config.listen):
        return
    if not config.insecure:
        raise ConfigError(
            f"--listen {config.listen} is reachable from other hosts and anyone who reaches "
            "it could write any job's records and start captures: give --auth-token-file, "
            "--token-key-file or --tls-client-ca (with --tls-cert/--tls-key), or --insecure "
            "to serve it open"
        )
    log.warning(
        "serving %s WITHOUT authentication (--insecure): any host that reaches it may write "
        "records of any job and start captures",
        config.listen,
    )


def secure_data_dir(root: Path, group: str) -> None:
    """The data dir's folder ``0750`` (``2750`` with ``group``), and the umask ``027``
    for everything this process makes from now on."""
    os.umask(UMASK)
    mode = DIR_MODE
    if group:
        try:
            gid = grp.getgrnam(group).gr_gid if not group.isdigit() else int(group)
        except KeyError:
            raise ConfigError(f"--data-group {group}: no such group") from None
        try:
            os.chown(root, -1, gid)
        except OSError as exc:
            raise ConfigError(f"--data-group {group}: cannot give {root} to it: {exc}") from None
        mode |= 0o2000  # new files and folders inherit the group
    # The data dir and the folders every later one is made in (an older release made
    # them 0755); what is further down keeps its modes, behind these.
    for folder in (root, root / "jobs", root / "lake"):
        if not folder.is_dir() or folder.is_symlink():
            continue
        try:
            if group:
                os.chown(folder, -1, gid)
            os.chmod(folder, mode)
        except OSError as exc:
            log.warning("cannot make %s readable by its owner and group only: %s", folder, exc)
