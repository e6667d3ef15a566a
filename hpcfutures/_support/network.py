"""Facts about this host's network, for choosing the address a launch listens on.

Nothing here sends a packet: the default route is found by connecting a UDP
socket (which only asks the kernel for a route), the interfaces are read from
the kernel, and a hostname is resolved the way every other program would.
"""

from __future__ import annotations

import ipaddress
import socket

__all__ = [
    "default_route_address",
    "hostname_address",
    "interface_addresses",
    "interface_of",
    "is_loopback",
]

#: Any address outside every private network: only the route toward it matters.
_OUTSIDE = ("8.8.8.8", 80)


def default_route_address() -> str | None:
    """The source address of this host's default route; None without one.

    The same probe as Dask's own default, minus its warning when it fails
    (nodes on an isolated compute network have no default route).
    """
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as probe:
        try:
            probe.connect(_OUTSIDE)
            return probe.getsockname()[0]
        except OSError:
            return None


def hostname_address() -> tuple[str, str | None]:
    """This host's name and the IPv4 address it resolves to (None if it does not)."""
    name = socket.gethostname()
    try:
        return name, socket.gethostbyname(name)
    except OSError:
        return name, None


def interface_addresses() -> dict[str, str]:
    """``{interface: IPv4 address}`` of the interfaces that are up, loopback included."""
    import psutil

    stats = psutil.net_if_stats()
    return {name: entry.address
            for name, entries in psutil.net_if_addrs().items()
            if name in stats and stats[name].isup
            for entry in entries if entry.family == socket.AF_INET}


def interface_of(address: str, interfaces: dict[str, str] | None = None) -> str | None:
    """The name of the interface carrying ``address`` on this host, if any."""
    interfaces = interface_addresses() if interfaces is None else interfaces
    return next((name for name, own in interfaces.items() if own == address), None)


def is_loopback(host: str) -> bool:
    """Whether ``host`` (an address or a name) means this host's loopback only."""
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        pass
    try:
        return ipaddress.ip_address(socket.gethostbyname(host)).is_loopback
    except OSError:
        return False
