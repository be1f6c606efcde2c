"""Which webhook URLs CreateWebhook refuses by their form alone, before any lookup (services/api/webhooks.py)."""

from __future__ import annotations

import pytest

from services.api.webhooks import MAX_URL_CHARS, check_url_form
from services.errors import InvalidArgument


@pytest.mark.parametrize(
    "url, reason",
    [
        ("https://93.184.216.34/\x00x", r"contains U\+0000 \(a space or control character\)"),  # cannot be stored
        ("https://93.184.216.34/a\nb", r"contains U\+000A"),  # urlsplit would drop it silently
        ("https://93.184.216.34/a\x7fb", r"contains U\+007F"),
        ("https://a b.com/", r"contains U\+0020"),
        ("https://93.184.216.34:99999/", "is not a well-formed URL: Port out of range"),
        ("https://93.184.216.34:abc/", "is not a well-formed URL: Port could not be cast to integer"),
        ("https://[::1/", "is not a well-formed URL: Invalid IPv6 URL"),
        ("https://93.184.216.34:0/", "names port 0; name one from 1 to 65535"),
        ("https://" + "a" * 64 + ".com/", "is not a host name DNS can look up"),
        ("https://a..b/", "is not a host name DNS can look up"),
        ("ftp://x/y", r"is not an http\(s\) URL with a host"),
        ("https:///path", r"is not an http\(s\) URL with a host"),
        ("https://x/" + "a" * MAX_URL_CHARS, f"characters; the limit is {MAX_URL_CHARS}"),
    ],
)
def test_a_malformed_webhook_url_is_refused_with_what_is_wrong(url, reason):
    with pytest.raises(InvalidArgument, match=reason):
        check_url_form(url)


@pytest.mark.parametrize(
    "url",
    [
        "https://hooks.example.com:8443/in?x=1",
        "http://localhost:8080/",
        "https://über.de/hook",
        "https://user:pw@[2606:4700::1]:443/p",
        "https://93.184.216.34:/",  # an empty port is the scheme's own
        "https://xn--ber-goa.de/hook",
    ],
)
def test_a_well_formed_webhook_url_passes(url):
    check_url_form(url)


@pytest.mark.parametrize(
    "url, why",
    [
        ("http://\u2603.example.com/hook", "Invalid IDNA hostname"),  # IDNA 2003 takes it; httpx's IDNA 2008 not
        ("http://a\u200db.example.com/", "Invalid IDNA hostname"),  # a zero-width joiner
        ("http://[v1.fe]/", "Invalid IPv6 address"),  # an IPvFuture literal
        ("http://xn--a.example.com/", "InvalidCodepoint"),  # an xn-- label that decodes to no host name
    ],
)
def test_a_url_the_delivery_client_cannot_send_to_is_refused_saying_how_to_write_the_host(url, why):
    # each was accepted, then every delivery to it raised and the webhook's loop restarted on it forever
    with pytest.raises(InvalidArgument, match="is not a URL deliveries can be sent to") as refused:
        check_url_form(url)
    assert why in str(refused.value) and "xn-- form" in str(refused.value)
