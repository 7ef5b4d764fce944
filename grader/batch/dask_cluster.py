"""Which Dask scheduler a batch may be sent to, and with what security.

A Dask worker runs whatever task reaches it, and grading workers run as root: whoever can
talk to an unencrypted, unauthenticated scheduler owns every grading machine and every
student's result. So the grader sends work over plain TCP only to this machine's loopback;
anywhere else it needs Dask's TLS (a `tls://` address and the cluster's certificates, which
the scheduler and workers require of every peer), unless the staff say explicitly that the
network is theirs (--insecure-scheduler).
"""
from __future__ import annotations

import ipaddress
import re
import socket

from grader.errors import SubmissionError
from grader.settings import Settings

ENCRYPTED = ("tls", "wss")
IN_PROCESS = ("inproc",)
DEFAULT_SCHEME = "tcp"   # Dask's, for an address without one
TLS_FILES = ("tls_ca_file", "tls_cert", "tls_key")


# What a host of an address may hold: a name's letters, digits, dots and hyphens, or an IP
# address's (IPv6 in brackets). Anything else (`user@`, `#`, `/`) is read one way by a URL
# parser and another by Dask, so it is never taken for loopback.
PLAIN_HOST = re.compile(r"[A-Za-z0-9.\-]+|[0-9A-Fa-f:.]+(%[A-Za-z0-9]+)?")


def _host(address: str) -> tuple[str, str]:
    """(scheme, host) of a Dask address such as tls://head:8786, tcp://[::1]:8786 or head:8786,
    read as Dask reads it (distributed.comm.addressing: parse_address, then parse_host_port):
    the host is what comes before the last colon, or between brackets. A host that is not
    plainly a name or an address, or a port that is not a number, gives the host ''."""
    scheme, sep, location = address.partition("://")
    if not sep:
        scheme, location = DEFAULT_SCHEME, address
    scheme = scheme.lower()
    if location.startswith("["):
        host, bracket, tail = location[1:].partition("]")
        port = tail[1:] if tail.startswith(":") else None if not tail else "bad"
        if not bracket:
            return scheme, ""
    else:
        host, colon, port = location.rpartition(":")
        if not colon:
            host, port = port, None
        elif ":" in host:
            return scheme, ""
    if (port is not None and not port.isdigit()) or not PLAIN_HOST.fullmatch(host):
        return scheme, ""
    return scheme, host


def is_loopback(host: str) -> bool:
    """Whether every address `host` stands for is this machine's loopback; a name that does
    not resolve is not."""
    try:
        found = {info[4][0] for info in socket.getaddrinfo(host, None)} if host else set()
    except (OSError, UnicodeError):
        return False
    return bool(found) and all(ipaddress.ip_address(str(a).split("%", 1)[0]).is_loopback for a in found)


def checked_address(address: str, settings: Settings) -> str:
    """The scheduler address, once it is safe to send work to; else a SubmissionError in one
    line saying what would make it so."""
    scheme, host = _host(address)
    given = [f for f in TLS_FILES if getattr(settings, f) is not None]
    flags = "--tls-ca-file, --tls-cert and --tls-key"
    if given and len(given) != len(TLS_FILES):
        raise SubmissionError(f"{flags} go together: the cluster's CA and this machine's certificate and key")
    for name in given:
        if not getattr(settings, name).is_file():
            raise SubmissionError(f"no such file: {getattr(settings, name)} (--{name.replace('_', '-')})")
    if given and scheme not in ENCRYPTED:
        raise SubmissionError(f"{flags} are for an encrypted scheduler address (tls://HOST:PORT), not {address}")
    if scheme in ENCRYPTED or scheme in IN_PROCESS or settings.insecure_scheduler or is_loopback(host):
        return address
    raise SubmissionError(f"the scheduler address {address} is not encrypted and not this machine's loopback: "
                          f"whoever reaches it could run code on the workers; use tls://HOST:PORT with {flags} "
                          "(docs/grading-a-class.md: On a Dask cluster), or --insecure-scheduler on a network "
                          "only the staff reach")


def security(settings: Settings):
    """distributed's Security for the client from the TLS files given, requiring encryption;
    None without them (Dask's own configuration then applies)."""
    if settings.tls_ca_file is None:
        return None
    from distributed.security import Security
    return Security(tls_ca_file=str(settings.tls_ca_file), tls_client_cert=str(settings.tls_cert),
                    tls_client_key=str(settings.tls_key), require_encryption=True)
