"""HTTP clients for the model servers, sharing one TLS context per process.

The SDK builds a TLS context for every client it makes, and loading the system's CA certificates into
one takes about 45 ms. The API alone makes a client per Chat reasoning level and one for embeddings, and
every worker, API process and test server does it again at start-up; one context serves them all
(an `ssl.SSLContext` may be shared across connections and threads).
"""

from __future__ import annotations

import ssl
from functools import cache

import openai


@cache
def tls_context() -> ssl.SSLContext:
    """The system's CA certificates (or SSL_CERT_FILE / SSL_CERT_DIR), hostnames checked."""
    return ssl.create_default_context()


def async_http_client() -> openai.DefaultAsyncHttpxClient:
    return openai.DefaultAsyncHttpxClient(verify=tls_context())


def sync_http_client() -> openai.DefaultHttpxClient:
    return openai.DefaultHttpxClient(verify=tls_context())
