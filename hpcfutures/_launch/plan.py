"""Deciding a process's part in a launch: launcher, identity, role, address exchange.

Nothing is started here: :func:`negotiate` only reads the environment through
the launcher plug-in, and :func:`choose_bind` the host's network, so
``hpcfutures info`` can show the outcome and its reasons.
"""

from __future__ import annotations

import dataclasses
import os
from collections.abc import Mapping

from .._errors import ConfigurationError, NestedExecutorError
from .._support import network
from .._support.config import Settings
from ..launchers import AddressExchange, Launcher, detect_launcher, get_launcher
from ..launchers._identity import Identity
from .roles import Role, assign_role

__all__ = ["TASK_VAR", "Bind", "Plan", "bind_address", "choose_bind", "choose_launcher",
           "mark_worker_process", "negotiate"]

#: Set in a worker's process, to where it runs: every task runs inside a launch
#: there, and so does every process a task starts (they inherit it).
TASK_VAR = "HPCFUTURES_INSIDE_TASK_ON"


@dataclasses.dataclass(frozen=True)
class Plan:
    """The outcome of negotiation: what this process will do, and why."""

    launcher: Launcher
    reason: str
    identity: Identity
    role: Role
    exchange: AddressExchange | None
    #: The Dask name of this process's worker, when not ``rank-N`` (a worker that
    #: joins another launch: ``hpcfutures serve --join``).
    worker_name: str | None = None

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
    refuse_inside_a_task(environ)
    launcher, reason = choose_launcher(settings, environ)
    identity = launcher.identity()
    refuse_loopback_across_hosts(settings, identity)
    role = assign_role(identity.rank, identity.size, settings.scheduler_in_client)
    exchange = None if role is Role.STANDALONE else launcher.address_exchange(identity)
    return Plan(launcher, reason, identity, role, exchange)


def mark_worker_process(where: str) -> None:
    """Note in this worker's environment where it runs (see :func:`refuse_inside_a_task`)."""
    os.environ[TASK_VAR] = where


def refuse_inside_a_task(environ: Mapping[str, str]) -> None:
    """A NestedExecutorError if this process is a worker, or was started by a task.

    Before anything else, MPI included: under a launcher the task's process
    has the launch's variables, so it would pose as another rank of the
    launch (a worker that fails to start, or a wait for a broadcast that
    never comes); on a laptop it would start a cluster inside the worker.
    """
    where = environ.get(TASK_VAR, "")
    if not where:
        return
    raise NestedExecutorError(
        f"an hpcfutures executor was created inside a task, which runs on {where}: a task "
        "cannot open an executor of its own. Run the inner work in the task itself (call "
        "the function), or submit it from the client: a task can return the calls to make "
        "next, and the client can pass futures as arguments of later submits. (A process "
        "that a task starts and that must run a separate launch of its own can remove "
        f"{TASK_VAR} from its environment.)")


@dataclasses.dataclass(frozen=True)
class Bind:
    """Where the scheduler and workers listen, and why (what ``hpcfutures info`` shows)."""

    host: str | None  #: given to Dask; None with interface None: Dask's default
    interface: str | None
    address: str  #: the address other processes reach this one at
    why: str


def bind_address(settings: Settings, identity: Identity, *,
                 serving: bool = False) -> tuple[str | None, str | None]:
    """(host, interface) for the scheduler and workers; see :func:`choose_bind`."""
    bind = choose_bind(settings, identity, serving=serving)
    return bind.host, bind.interface


def choose_bind(settings: Settings, identity: Identity, *, serving: bool = False) -> Bind:
    """What to listen on: as asked, else loopback on one host, else a routable address.

    A serving launch (``serving``) is reached from other hosts, so never loopback
    unless asked.  The routable address is Dask's default where the host has a
    default route; without one (an isolated compute network), it is the address
    the hostname resolves to, else the one interface besides loopback, given to
    Dask explicitly so that it neither warns nor falls back to loopback.
    """
    refuse_loopback_across_hosts(settings, identity)
    if settings.host or settings.interface:
        return _as_asked(settings)
    if identity.single_host and not serving:
        return Bind("127.0.0.1", None, "127.0.0.1",
                    "every process of the launch is on this host: loopback keeps it private")
    spans = ("a serving launch is reached from other hosts" if serving else
             f"the launch spans several hosts ({identity.several_hosts})"
             if identity.several_hosts else "the launch may span several hosts")
    interfaces = network.interface_addresses()
    routed = network.default_route_address()
    if routed:
        return Bind(None, None, routed,
                    f"{spans}: Dask's default, the address of {_nic(routed, interfaces)}, "
                    "which holds the default route (listening on every interface)")
    name, resolved = network.hostname_address()
    if resolved and not network.is_loopback(resolved) and resolved in interfaces.values():
        return Bind(resolved, None, resolved,
                    f"{spans} and this host has no default route: the address its hostname "
                    f"{name!r} resolves to, on {_nic(resolved, interfaces)}")
    outward = {nic: address for nic, address in interfaces.items()
               if not network.is_loopback(address)}
    unresolved = (f"its hostname {name!r} does not resolve" if not resolved else
                  f"its hostname {name!r} resolves to {resolved}, "
                  + ("loopback" if network.is_loopback(resolved) else "not one of its own"))
    if len(outward) == 1:
        nic, address = next(iter(outward.items()))
        return Bind(address, None, address,
                    f"{spans}, this host has no default route and {unresolved}: {nic}, "
                    "the only interface besides loopback")
    choices = ", ".join(f"{nic} ({address})" for nic, address in sorted(outward.items()))
    if identity.several_hosts:
        raise ConfigurationError(
            f"{spans}, but this host has no default route, {unresolved}, and it has "
            f"{len(outward)} network interfaces besides loopback ({choices or 'none'}): "
            "choose the one the hosts share with interface= or HPCFUTURES_INTERFACE")
    return Bind(None, None, "Dask's default address",
                f"{spans}; this host has no default route and {unresolved}, and "
                f"{len(outward)} interfaces besides loopback ({choices or 'none'}): Dask "
                "falls back to loopback; choose with interface= or HPCFUTURES_INTERFACE")


def refuse_loopback_across_hosts(settings: Settings, identity: Identity) -> None:
    """A ConfigurationError if a setting chose loopback but the launch spans hosts.

    Raised at once, on every rank, instead of the start-up timeout that the
    ranks on other hosts would otherwise run into.
    """
    if not identity.several_hosts:
        return
    if settings.host and network.is_loopback(settings.host):
        chosen = _setting(settings, "host")
    elif settings.interface and network.is_loopback(
            network.interface_addresses().get(settings.interface, "")):
        chosen = _setting(settings, "interface")
    else:
        return
    raise ConfigurationError(
        f"{chosen} binds the scheduler and workers to loopback, but the launch spans several "
        f"hosts ({identity.several_hosts}): processes on the other hosts cannot reach a "
        "loopback address, so the launch could never start. Leave it unset, so that every "
        "host listens on its routable address, or choose the network the hosts share with "
        f"interface= or HPCFUTURES_INTERFACE ({_interfaces_here()})")


def _as_asked(settings: Settings) -> Bind:
    if settings.host:
        return Bind(settings.host, settings.interface, settings.host,
                    f"{_setting(settings, 'host')} asks for it")
    address = network.interface_addresses().get(settings.interface or "")
    return Bind(None, settings.interface, address or f"interface {settings.interface}",
                f"{_setting(settings, 'interface')} asks for it"
                + ("" if address else f", but it has no IPv4 address here ({_interfaces_here()})"))


def _setting(settings: Settings, name: str) -> str:
    """How the user set ``name``: HPCFUTURES_HOST=..., host='...' or the Dask config key."""
    value, source = getattr(settings, name), settings.sources.get(name, "")
    variable = source.removeprefix("environment variable ")
    if variable != source:
        return f"{variable}={value}"
    if source.startswith("dask config"):
        return f"{source.removeprefix('dask config ')}={value!r} in the Dask config"
    return f"{name}={value!r}"


def _nic(address: str, interfaces: dict[str, str]) -> str:
    nic = network.interface_of(address, interfaces)
    return f"{nic} ({address})" if nic else address


def _interfaces_here() -> str:
    found = ", ".join(f"{nic} {address}" for nic, address
                      in sorted(network.interface_addresses().items()))
    return f"this host has: {found}" if found else "this host has no IPv4 interface"
