"""Which address a launch listens on, and why: against a fake host network, in one process.

The same choices for real, on nodes without a default route and with an
unresolvable hostname, are in ``test_multinode.py``.
"""

from __future__ import annotations

import json

import pytest

from hpcfutures import ConfigurationError
from hpcfutures._launch.plan import bind_address, choose_bind, negotiate
from hpcfutures._support import network
from hpcfutures._support.config import resolve_settings
from hpcfutures.launchers import Identity, mpi
from hpcfutures.launchers.flux import FluxLauncher

ACROSS = "3 nodes in the Slurm step"


def settings(environ=None, dask_config=None, **explicit):
    return resolve_settings(explicit, environ=environ or {}, dask_config=dask_config or {})


def identity(single_host=False, several_hosts=ACROSS) -> Identity:
    return Identity("slurm", 2, 4, "slurm-7.0", single_host=single_host,
                    several_hosts="" if single_host else several_hosts)


@pytest.fixture
def host(monkeypatch):
    """A fake network: ``host(route=..., name=..., resolves=..., nics={...})``."""
    def make(route=None, name="node7", resolves=None, nics=None):
        nics = {"lo": "127.0.0.1", **({"eth0": "10.1.0.7"} if nics is None else nics)}
        monkeypatch.setattr(network, "default_route_address", lambda: route)
        monkeypatch.setattr(network, "hostname_address", lambda: (name, resolves))
        monkeypatch.setattr(network, "interface_addresses", lambda: dict(nics))
    make()
    return make


def step_env(rank, nodes=3, **extra):
    return {"SLURM_JOB_ID": "7", "SLURM_STEP_ID": "0", "SLURM_PROCID": str(rank),
            "SLURM_STEP_NUM_TASKS": "6", "SLURM_STEP_NUM_NODES": str(nodes), **extra}


# ------------------------------------------------------------ the defaults
def test_one_host_is_loopback_unless_serving(host):
    bind = choose_bind(settings(), identity(single_host=True))
    assert (bind.host, bind.interface, bind.address) == ("127.0.0.1", None, "127.0.0.1")
    assert "every process of the launch is on this host" in bind.why
    host(route="10.1.0.7")
    serving = choose_bind(settings(), identity(single_host=True), serving=True)
    assert serving.host is None and serving.address == "10.1.0.7"
    assert "reached from other hosts" in serving.why


def test_with_a_default_route_dask_chooses_as_before(host):
    host(route="10.1.0.7")
    bind = choose_bind(settings(), identity())
    assert (bind.host, bind.interface, bind.address) == (None, None, "10.1.0.7")
    assert ACROSS in bind.why and "eth0 (10.1.0.7), which holds the default route" in bind.why


def test_without_a_default_route_the_hostnames_address(host):
    host(route=None, name="node7", resolves="10.1.0.7",
         nics={"eth0": "10.1.0.7", "ib0": "10.2.0.7"})
    bind = choose_bind(settings(), identity())
    assert (bind.host, bind.interface, bind.address) == ("10.1.0.7", None, "10.1.0.7")
    assert "no default route" in bind.why and "'node7' resolves to" in bind.why


@pytest.mark.parametrize("resolves, said", [(None, "does not resolve"),
                                            ("127.0.1.1", "127.0.1.1, loopback"),
                                            ("192.0.2.99", "192.0.2.99, not one of its own")])
def test_without_a_route_or_a_usable_hostname_the_only_interface(host, resolves, said):
    host(route=None, resolves=resolves, nics={"eth0": "10.1.0.7"})
    bind = choose_bind(settings(), identity())
    assert (bind.host, bind.address) == ("10.1.0.7", "10.1.0.7")
    assert "eth0, the only interface besides loopback" in bind.why and said in bind.why
    assert bind_address(settings(), identity()) == ("10.1.0.7", None)


def test_several_interfaces_and_no_clue_ask_for_one(host):
    host(route=None, resolves=None, nics={"eth0": "10.1.0.7", "ib0": "10.2.0.7"})
    with pytest.raises(ConfigurationError, match=r"eth0 \(10.1.0.7\), ib0 \(10.2.0.7\).*"
                                                 r"HPCFUTURES_INTERFACE"):
        choose_bind(settings(), identity())
    # Where nobody knows that hosts differ (a job array), Dask's fallback may still do.
    unknown = choose_bind(settings(), identity(several_hosts=""))
    assert (unknown.host, unknown.address) == (None, "Dask's default address")
    assert "interface=" in unknown.why


def test_asked_for_host_or_interface_is_used_as_is(host):
    bind = choose_bind(settings({"HPCFUTURES_INTERFACE": "eth0"}), identity())
    assert (bind.host, bind.interface, bind.address) == (None, "eth0", "10.1.0.7")
    assert "HPCFUTURES_INTERFACE=eth0 asks for it" in bind.why
    missing = choose_bind(settings(interface="ib0"), identity())
    assert missing.address == "interface ib0" and "no IPv4 address here" in missing.why
    asked = choose_bind(settings(host="10.1.0.7"), identity())
    assert (asked.host, asked.why) == ("10.1.0.7", "host='10.1.0.7' asks for it")


# ------------------------------------------------------ loopback across hosts
@pytest.mark.parametrize("chosen, named", [
    (settings({"HPCFUTURES_HOST": "127.0.0.1"}), "HPCFUTURES_HOST=127.0.0.1"),
    (settings(host="localhost"), "host='localhost'"),
    (settings(host="::1"), "host='::1'"),
    (settings(dask_config={"host": "127.0.0.2"}), "hpcfutures.host='127.0.0.2' in the Dask"),
    (settings({"HPCFUTURES_INTERFACE": "lo"}), "HPCFUTURES_INTERFACE=lo"),
])
def test_loopback_across_hosts_is_refused_naming_the_setting(host, chosen, named):
    with pytest.raises(ConfigurationError) as caught:
        choose_bind(chosen, identity())
    message = str(caught.value)
    assert message.startswith(named), message
    assert f"spans several hosts ({ACROSS})" in message
    assert "cannot reach a loopback address" in message
    assert "interface= or HPCFUTURES_INTERFACE (this host has: eth0 10.1.0.7, lo" in message


def test_loopback_stays_allowed_where_hosts_may_be_one(host):
    loopback = settings({"HPCFUTURES_HOST": "127.0.0.1"})
    for where in (identity(single_host=True), identity(several_hosts="")):  # a job array
        assert bind_address(loopback, where) == ("127.0.0.1", None)


def test_every_rank_refuses_at_once_while_negotiating(host):
    loopback = settings({"HPCFUTURES_HOST": "127.0.0.1"})
    for rank in range(6):  # scheduler, client, workers: nobody waits for anybody
        with pytest.raises(ConfigurationError, match=r"HPCFUTURES_HOST=127\.0\.0\.1"):
            negotiate(loopback, step_env(rank))
    assert negotiate(loopback, step_env(1, nodes=1)).identity.single_host


# ------------------------------------------------- what launchers know of hosts
def test_launchers_say_when_the_launch_spans_hosts(monkeypatch):
    assert negotiate(settings(), step_env(1)).identity.several_hosts == ACROSS
    assert negotiate(settings(), step_env(1, nodes=1)).identity.several_hosts == ""
    assert mpi.several_hosts({"MPI_LOCALNRANKS": "2"}, 6) == "MPI_LOCALNRANKS=2: 4 ranks elsewhere"
    assert mpi.several_hosts({"MPI_LOCALNRANKS": "6"}, 6) == ""
    assert mpi.several_hosts({**step_env(1), "PMI_RANK": "1", "PMI_SIZE": "6"}, 6) == ACROSS
    flux = {"FLUX_TASK_RANK": "1", "FLUX_JOB_SIZE": "4", "FLUX_JOB_ID": "f1"}
    across = FluxLauncher(settings(), {**flux, "FLUX_JOB_NNODES": "2"}).identity()
    assert across.several_hosts == "FLUX_JOB_NNODES=2"
    assert FluxLauncher(settings(), {**flux, "FLUX_JOB_NNODES": "1"}).identity().several_hosts == ""


# ------------------------------------------------------------- hpcfutures info
def test_info_shows_the_address_and_why(host, monkeypatch, capsys):
    from hpcfutures._cli import main

    host(route=None, resolves=None, nics={"eth0": "10.1.0.7"})
    for name, value in step_env(2).items():
        monkeypatch.setenv(name, value)
    assert main(["info", "--json"]) == 0
    report = json.loads(capsys.readouterr().out)
    assert report["bind"] == "10.1.0.7"
    assert "no default route" in report["bind_why"] and "eth0" in report["bind_why"]
    monkeypatch.setenv("HPCFUTURES_HOST", "127.0.0.1")
    assert main(["info"]) == 1
    assert "error: ConfigurationError: HPCFUTURES_HOST=127.0.0.1 binds" in capsys.readouterr().out


# --------------------------------------------------------------- the probes
def test_network_probes_on_this_host():
    interfaces = network.interface_addresses()
    assert interfaces.get("lo") == "127.0.0.1" and network.interface_of("127.0.0.1") == "lo"
    routed = network.default_route_address()
    assert routed is None or routed in interfaces.values()
    assert network.is_loopback("localhost") and network.is_loopback("127.0.0.1")
    assert not network.is_loopback("10.1.0.7")
