"""Deciding a process's part in a launch: launcher, identity, role, address exchange.

Nothing is started here: :func:`negotiate` only reads the environment through
the launcher plug-in, so ``hpcfutures info`` can show the outcome and its reasons.
"""

from __future__ import annotations

import dataclasses
import os
from collections.abc import Mapping

from .._support.config import Settings
from ..launchers import AddressExchange, Launcher, detect_launcher, get_launcher
from .roles import Identity, Role, assign_role

__all__ = ["Plan", "bind_address", "choose_launcher", "negotiate"]


@dataclasses.dataclass(frozen=True)
class Plan:
    """The outcome of negotiation: what this process will do, and why."""

    launcher: Launcher
    reason: str
    identity: Identity
    role: Role
    exchange: AddressExchange | None

    @property
    def peers_exchange(self) -> AddressExchange:
        """The exchange of a launch with other processes (every role but STANDALONE)."""
        if self.exchange is None:
            raise RuntimeError(f"rank {self.identity.rank} ({self.role.value}) has no address "
                               "exchange: it is a launch of one process")
        return self.exchange


def choose_launcher(settings: Settings, environ: Mapping[str, str]) -> tuple[Launcher, str]:
    """The launcher plug-in asked for, else the detected one; and why."""
    if settings.launcher:
        cls = get_launcher(settings.launcher)
        reason = f"launcher={settings.launcher!r} was asked for"
    else:
        cls, reason = detect_launcher(environ)
    return cls(settings, environ), reason


def negotiate(settings: Settings, environ: Mapping[str, str] | None = None) -> Plan:
    """Decide this process's launcher, identity and role; start nothing."""
    environ = os.environ if environ is None else environ
    launcher, reason = choose_launcher(settings, environ)
    identity = launcher.identity()
    role = assign_role(identity.rank, identity.size, settings.scheduler_in_client)
    exchange = None if role is Role.STANDALONE else launcher.address_exchange(identity)
    return Plan(launcher, reason, identity, role, exchange)


def bind_address(settings: Settings, identity: Identity) -> tuple[str | None, str | None]:
    """(host, interface) for the scheduler and workers: explicit, else loopback on one host."""
    if settings.host or settings.interface:
        return settings.host, settings.interface
    if identity.single_host:
        return "127.0.0.1", None
    return None, None

