"""Which addresses a webhook may reach (services/webhooks/targets.refusal): public ones only."""

from __future__ import annotations

import ipaddress
import logging

import pytest

from services.webhooks.targets import PrivateTarget, check_addresses, refusal


@pytest.mark.parametrize(
    "address, why",
    [
        ("127.0.0.1", "loopback"),
        ("127.8.9.10", "loopback"),
        ("::1", "loopback"),
        ("::ffff:127.0.0.1", "loopback (as the IPv4 address inside ::ffff:7f00:1)"),  # IPv4-mapped IPv6
        ("10.0.0.5", "private"),
        ("172.16.3.4", "private"),
        ("192.168.1.1", "private"),
        ("fd12:3456::1", "private"),
        ("169.254.169.254", "a cloud metadata address"),
        ("fd00:ec2::254", "a cloud metadata address"),
        ("100.100.100.200", "a cloud metadata address"),
        ("169.254.10.10", "link-local"),
        ("fe80::1%eth0", "link-local"),
        ("0.0.0.0", "unspecified"),
        ("::", "unspecified"),
        ("224.0.0.1", "multicast"),
        ("100.64.0.1", "not public"),  # carrier-grade NAT, shared address space
    ],
)
def test_non_public_addresses_are_refused_with_their_kind(address, why):
    assert refusal(address) == why


@pytest.mark.parametrize("address", ["93.184.216.34", "8.8.8.8", "2606:4700:4700::1111"])
def test_public_addresses_are_let_through(address):
    assert refusal(address) is None


def test_one_private_address_among_public_ones_refuses_the_host():
    with pytest.raises(
        PrivateTarget, match=r"hooks.example resolves to a non-public address \(private\).*ALLOW_PRIVATE"
    ):
        check_addresses("hooks.example", ["93.184.216.34", "10.1.2.3"])


@pytest.mark.parametrize("address", ["10.1.2.3", "::ffff:10.1.2.3", "64:ff9b::a01:203"])
def test_a_host_names_refusal_gives_the_kind_of_address_not_the_address(address, caplog):
    # the caller would learn where an internal name points; the operator's log gets it, once
    caplog.set_level(logging.INFO, logger="services.webhooks.targets")
    with pytest.raises(PrivateTarget) as refused:
        check_addresses("db.internal", [address])
    assert str(refused.value).startswith("db.internal resolves to a non-public address (private);")
    assert not any(shown in str(refused.value) for shown in (address, str(ipaddress.ip_address(address)), "10.1.2.3"))
    assert [address in r.getMessage() for r in caplog.records] == [True]


@pytest.mark.parametrize("host", ["10.1.2.3", "[::ffff:10.1.2.3]"])
def test_an_ip_literals_refusal_names_it(host):
    with pytest.raises(PrivateTarget) as refused:
        check_addresses(host, [str(ipaddress.ip_address(host.strip("[]")))])
    assert str(refused.value).startswith(f"{host} is private")  # the caller wrote it: nothing is revealed


@pytest.mark.parametrize(
    "address",
    ["64:ff9b::7f00:1", "64:ff9b::a00:1", "::127.0.0.1", "::ffff:0:7f00:1", "2002:7f00:1::1", "2002:a9fe:a9fe::1"],
)
def test_an_ipv6_address_carrying_a_non_public_ipv4_one_is_refused(address):
    # NAT64, IPv4-compatible, IPv4-translated and 6to4 addresses reach the IPv4 address inside them
    assert "as the IPv4 address inside" in refusal(address)


@pytest.mark.parametrize("address", ["fec0::1", "64:ff9b:1::a9fe:a9fe", "3fff::1", "5f00::1", "100::1"])
def test_ipv6_outside_global_unicast_is_refused_whatever_python_calls_global(address):
    # site-local, the local-use NAT64 prefix and newer reserved ranges passed as public on Python 3.11
    assert refusal(address) is not None


@pytest.mark.parametrize("address", ["64:ff9b::808:808", "2002:808:808::1", "::ffff:0:808:808"])
def test_an_ipv6_address_carrying_a_public_ipv4_one_is_let_through(address):
    assert refusal(address) is None


async def test_names_whose_dns_never_answers_hold_one_thread_each_and_never_a_good_names_lookup(monkeypatch):
    # each given-up lookup kept a thread of asyncio's shared pool (6 here): ten hung names, each retried,
    # held them all, and a good name's lookup queued behind them until it too timed out
    import asyncio
    import socket
    import threading

    from services.webhooks import targets

    asked, release = [], threading.Event()

    def getaddrinfo(host, port, *args, **kwargs):
        asked.append(host)
        if host.startswith("hung"):
            release.wait(5)  # a nameserver that never answers (released at the end, for the pool's sake)
        return [(socket.AF_INET, socket.SOCK_STREAM, 6, "", ("203.0.113.9", port))]

    monkeypatch.setattr(targets.socket, "getaddrinfo", getaddrinfo)
    monkeypatch.setattr(targets, "RESOLVE_TIMEOUT_S", 0.3)
    try:
        for _ in range(3):  # three rounds of retries of ten hung names
            hung = [targets.resolve(f"hung-{i}.test", 443) for i in range(10)]
            assert all(isinstance(r, TimeoutError) for r in await asyncio.gather(*hung, return_exceptions=True))
        assert await targets.resolve("good.test", 443) == ["203.0.113.9"]
        assert asked.count("good.test") == 1 and len([h for h in asked if h.startswith("hung")]) == 10
    finally:
        release.set()
