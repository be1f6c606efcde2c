"""Where a webhook may POST: only to public addresses, unless the setting allows private ones.

A URL is checked when it is registered (after DNS resolution) and again at every connection the delivery
opens, on the addresses it actually connects to, so a name that resolves to a public address at
registration and to a private one later (DNS rebinding) is refused too. Without that a webhook would let
any workspace token make the server POST to its own network: loopback services, the cloud metadata
endpoint (169.254.169.254), databases on private addresses.
"""

from __future__ import annotations

import asyncio
import ipaddress
import logging
import socket
from concurrent.futures import ThreadPoolExecutor
from urllib.parse import urlsplit

import httpcore
import httpx

RESOLVE_TIMEOUT_S = 5.0
# of a host's addresses all but the last get this long to connect: a dead address's whole cost to an attempt
CONNECT_TRY_S = 2.0
IP = ipaddress.IPv4Address | ipaddress.IPv6Address
METADATA = {ipaddress.ip_address(a) for a in ("169.254.169.254", "fd00:ec2::254", "100.100.100.200")}

log = logging.getLogger(__name__)


class PrivateTarget(ValueError):
    """A webhook URL's host is, or resolves to, an address deliveries may not reach."""


def refusal(address: str) -> str | None:
    """Why deliveries may not go to `address` (an IP literal), or None when it is public."""
    ip, reached = _reached(address)
    why = _kind(reached)
    return f"{why} (as the IPv4 address inside {ip})" if why and reached is not ip else why


def _reached(address: str) -> tuple[IP, IP]:
    """`address` parsed, and the address a packet to it reaches: the IPv4 one it carries, else itself."""
    ip = ipaddress.ip_address(address.split("%", 1)[0])  # a zone index (fe80::1%eth0) names no other host
    embedded = _embedded_ipv4(ip)
    return ip, ip if embedded is None else embedded


def _kind(ip: IP) -> str | None:
    for kind, hit in (
        ("a cloud metadata address", ip in METADATA),
        ("loopback", ip.is_loopback),
        ("link-local", ip.is_link_local),
        ("unspecified", ip.is_unspecified),
        ("multicast", ip.is_multicast),
        ("private", ip.is_private),
        ("not public", not ip.is_global),
        # what is global differs between Python releases (site-local fec0::/10, the local-use NAT64 prefix
        # 64:ff9b:1::/48 passed on 3.11): of IPv6, only global unicast 2000::/3 is taken, whatever runs this
        ("not global unicast", isinstance(ip, ipaddress.IPv6Address) and ip not in GLOBAL_UNICAST),
        ("reserved for documentation", any(ip in net for net in DOCUMENTATION)),
    ):
        if hit:
            return kind
    return None


GLOBAL_UNICAST = ipaddress.ip_network("2000::/3")
DOCUMENTATION = (ipaddress.ip_network("3fff::/20"),)  # RFC 9637, inside 2000::/3; older Pythons call it global
# prefixes whose last 32 bits are an IPv4 address a gateway reaches: NAT64 (RFC 6052) and IPv4-translated.
# RFC 8215's local-use NAT64 prefix (64:ff9b:1::/48) is not global unicast, so refused whole
TRANSLATED = (ipaddress.ip_network("64:ff9b::/96"), ipaddress.ip_network("::ffff:0:0:0/96"))


def _embedded_ipv4(ip: IP) -> ipaddress.IPv4Address | None:
    """The IPv4 address an IPv6 one carries and a host or gateway would reach: mapped (::ffff:a.b.c.d),
    compatible (::a.b.c.d), NAT64 or translated, 6to4 (2002:AABB:CCDD::); None for any other."""
    if not isinstance(ip, ipaddress.IPv6Address):
        return None
    if ip.ipv4_mapped is not None:
        return ip.ipv4_mapped
    if ip.sixtofour is not None:
        return ip.sixtofour
    low = int(ip) & 0xFFFFFFFF
    if any(ip in net for net in TRANSLATED) or (int(ip) >> 32 == 0 and low > 1):  # ::a.b.c.d, not :: or ::1
        return ipaddress.IPv4Address(low)
    return None


async def resolve(host: str, port: int) -> list[str]:
    """The addresses `host` stands for: itself when it is an IP literal, else what DNS answers."""
    literal = _literal(host)
    if literal is not None:
        return [literal]
    found = await asyncio.wait_for(asyncio.shield(_lookup(host, port)), RESOLVE_TIMEOUT_S)
    return list(dict.fromkeys(info[4][0] for info in found))


def _literal(host: str) -> str | None:
    """`host` as an IP address when it is one (a URL's IPv6 literal may keep its brackets), else None."""
    try:
        return str(ipaddress.ip_address(host.strip("[]")))
    except ValueError:
        return None


# DNS lookups block a thread until the resolver answers, and one given up after RESOLVE_TIMEOUT_S keeps its
# thread: on asyncio's shared pool (6 threads on 2 cores) a few names whose nameserver never answers, each
# retried, held every thread, and other endpoints' lookups (and the API's other blocking work) queued behind
# them until they too timed out. Lookups have their own pool, and a name already being looked up is not
# looked up again beside it: a name that hangs holds one thread, however often it is asked for
_LOOKUPS = ThreadPoolExecutor(32, thread_name_prefix="webhook-dns")
_IN_FLIGHT: dict[tuple[asyncio.AbstractEventLoop, str, int], asyncio.Future] = {}


def _lookup(host: str, port: int) -> asyncio.Future:
    loop = asyncio.get_running_loop()
    key = (loop, host, port)  # a future belongs to its loop
    if key not in _IN_FLIGHT:
        future = loop.run_in_executor(_LOOKUPS, socket.getaddrinfo, host, port, 0, socket.SOCK_STREAM)
        _IN_FLIGHT[key] = future
        future.add_done_callback(lambda _: _IN_FLIGHT.pop(key, None))
    return _IN_FLIGHT[key]


def check_addresses(host: str, addresses: list[str]) -> None:
    """PrivateTarget if any address is not public: an attacker's DNS may answer with several. A host
    name's refusal gives the kind of address it resolves to, not the address, which only the log gets."""
    for address in addresses:
        why = refusal(address)
        if why is not None:
            raise PrivateTarget(
                f"{_refused(host, address, why)}; webhooks may only reach public addresses "
                "(PEERLOG_WEBHOOK_ALLOW_PRIVATE_TARGETS=true allows others)"
            )


def _refused(host: str, address: str, why: str) -> str:
    if _literal(host) is not None:  # the caller wrote the address: naming it tells them nothing
        return f"{host} is {why}"
    # the caller sees no address: with it, a workspace token could learn which internal names exist and
    # where they point, one CreateWebhook (or dead letter) at a time
    log.info("webhook host %r refused: it resolves to %s, %s", host, address, why)
    return f"{host} resolves to a non-public address ({_kind(_reached(address)[1])})"


async def check_url(url: str) -> None:
    """PrivateTarget if the URL's host is or resolves to a non-public address. A name that does not
    resolve now is let through: every delivery checks again where it connects."""
    parts = urlsplit(url)
    try:
        addresses = await resolve(parts.hostname or "", parts.port or (443 if parts.scheme == "https" else 80))
    except (OSError, TimeoutError):
        return
    check_addresses(parts.hostname or "", addresses)


def unsendable(url: str) -> str | None:
    """Why deliveries cannot POST to `url` as httpx parses it (a host it encodes by IDNA 2008, stricter
    than Python's IDNA 2003 codec; an IPv6 literal it accepts), or None when they can."""
    try:
        parsed = httpx.URL(url)
        parsed.raw_host, parsed.host  # noqa: B018 - the check: httpx encodes one and decodes (xn--) the other
    except (httpx.InvalidURL, ValueError) as refused:  # idna's errors are UnicodeErrors, so ValueErrors
        return f"{type(refused).__name__}: {refused}"
    return None


class _CheckedBackend(httpcore.AsyncNetworkBackend):
    """Connects only to public addresses: resolves the host itself, checks every address, then connects
    to the checked one (TLS still names the URL's host: httpcore takes it from the request)."""

    def __init__(self) -> None:
        self._inner = httpcore.AnyIOBackend()

    async def connect_tcp(self, host, port, timeout=None, local_address=None, socket_options=None):
        try:
            addresses = await resolve(host, port)
        except (OSError, TimeoutError) as failed:
            raise httpcore.ConnectError(f"{host} does not resolve: {failed}") from failed
        # PrivateTarget itself, not a ConnectError: httpx lets it through unmapped, so the delivery
        # dead-letters it at once instead of retrying an address that is refused every time
        check_addresses(host, addresses)
        # the next address when one refuses or stays silent for CONNECT_TRY_S: with no bound (deliveries'
        # client has no connect timeout) an address that drops SYNs took each whole attempt, every retry
        # went to it again, and a receiver curl reaches through its next address got nothing
        bounded = CONNECT_TRY_S if timeout is None else min(timeout, CONNECT_TRY_S)
        for address in addresses[:-1]:
            try:
                return await self._inner.connect_tcp(address, port, bounded, local_address, socket_options)
            except (httpcore.ConnectError, httpcore.ConnectTimeout):
                continue
        return await self._inner.connect_tcp(addresses[-1], port, timeout, local_address, socket_options)

    async def connect_unix_socket(self, path, timeout=None, socket_options=None):
        raise httpcore.ConnectError("webhooks do not connect to unix sockets")

    async def sleep(self, seconds: float) -> None:
        await self._inner.sleep(seconds)


def delivery_client(allow_private: bool) -> httpx.AsyncClient:
    """An HTTP client for deliveries, one per endpoint (a pool of its own: receivers that never answer
    hold only their own webhook's connections). Checked unless private targets are allowed; no proxy from
    the environment either way a check could be bypassed through."""
    # no timeout of httpx's own (5 s by default): each attempt is bounded by the retry policy's (10 s), and
    # a receiver answering after 6 s was retried, and dead-lettered, though it had taken every attempt
    if allow_private:
        return httpx.AsyncClient(timeout=None)
    transport = httpx.AsyncHTTPTransport(trust_env=False)
    # httpx does not take a network backend; its pool does (httpcore.AsyncConnectionPool.network_backend).
    # tests/integration/test_webhook_targets.py fails if this stops reaching the connections
    transport._pool._network_backend = _CheckedBackend()
    return httpx.AsyncClient(transport=transport, trust_env=False, timeout=None)
