"""Where other machines reach this one: the addresses a server listening on all interfaces names for its clients.

The machine's name is not enough: on many hosts it resolves to 127.0.0.1 (Debian's `/etc/hosts` line for the
hostname), which names this machine to itself only. The addresses offered are the outbound interface's (the one a
packet to another network would leave by: a UDP socket's `connect` picks it without sending anything) and those the
name resolves to, loopback ones dropped; when none is left, the banner says it cannot tell.
"""

from __future__ import annotations

import ipaddress
import socket
from typing import Optional

ALL_INTERFACES = ("0.0.0.0", "::")
"""What a server given to listen on every interface is bound to."""
PROBE = ("10.254.254.254", 1)
"""Any non-loopback destination: connecting a UDP socket to it chooses the outbound interface, sending nothing."""


def _outbound_address() -> Optional[str]:
    """The address of the interface traffic to another network leaves by (None: no route, as on an offline box)."""
    try:
        with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
            s.connect(PROBE)
            return str(s.getsockname()[0])
    except OSError:
        return None


def _named_addresses() -> list[str]:
    """What the machine's name resolves to."""
    try:
        infos = socket.getaddrinfo(socket.gethostname(), None, type=socket.SOCK_STREAM)
    except OSError:
        return []
    return [str(info[4][0]) for info in infos]


def reachable_addresses() -> list[str]:
    """This machine's addresses other machines may reach, without loopback ones, in a stable order."""
    found = [a for a in [_outbound_address(), *_named_addresses()] if a is not None]
    out: list[str] = []
    for address in found:
        ip = ipaddress.ip_address(address.split("%")[0])
        if not (ip.is_loopback or ip.is_unspecified or ip.is_link_local) and address not in out:
            out.append(address)
    return out


def client_urls(host: str, port: int) -> list[str]:
    """The URLs other machines' clients use for a server listening on `host`:`port`: `host` itself when it is one
    address; for all interfaces, each reachable address ([] when none could be found)."""
    if host not in ALL_INTERFACES:
        return [f"http://{host}:{port}"]
    return [f"http://[{a}]:{port}" if ":" in a else f"http://{a}:{port}" for a in reachable_addresses()]


def first_client_url(host: str, port: int) -> str:
    """The URL a start's access lines name: the first one other machines can use, else this machine's own."""
    return next(iter(client_urls(host, port)), f"http://127.0.0.1:{port}")


def where_line(host: str, port: int) -> str:
    """How the banner says where other machines connect (or that it cannot tell)."""
    urls = client_urls(host, port)
    if not urls:
        return (
            "other machines: this machine's address could not be found (its name resolves to loopback only); use "
            f"its address on your network, port {port}"
        )
    return "other machines use " + " or ".join(urls)
