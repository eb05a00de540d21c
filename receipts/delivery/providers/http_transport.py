"""One keep-alive HTTP transport for a provider's API, made once per worker.

:class:`JsonEndpoint` posts the request bodies of one endpoint URL. Each
post builds its :class:`requests.PreparedRequest` from headers made once and
hands it to the session's transport adapter, skipping what
``Session.request`` and ``Session.send`` do on every call for features these
requests never use: merging the environment's proxy and certificate settings,
cookies, auth and hooks into the request and preparing it again, then
storing the answer's cookies and looking for a redirect to follow. That was
more than half of a send's CPU time at full speed. The environment
(``HTTPS_PROXY``, ``NO_PROXY``, ``REQUESTS_CA_BUNDLE``) is read once, here.
A redirect is never followed: the adapter does not follow them, so the 3xx
itself is the answer (a configuration error), and the credentials never
travel to another address. Lookups (:meth:`JsonEndpoint.get`) are rare and
go through the session as usual.
"""

from __future__ import annotations

import threading
from collections.abc import Mapping
from typing import Any

import requests
from requests.adapters import HTTPAdapter
from requests.structures import CaseInsensitiveDict

from receipts.config import ConfigError


class JsonEndpoint:
    """POSTs JSON bodies to ``url`` with fixed ``headers``; GETs anything else."""

    def __init__(
        self,
        *,
        url: str,
        headers: Mapping[str, str],
        connect_timeout: float,
        read_timeout: float,
        pool_size: int,
        setting: str,
    ) -> None:
        self.url = prepared_url(url, setting)
        self.session = requests.Session()
        self._adapter = _OneEndpointAdapter(
            pool_connections=1, pool_maxsize=max(1, pool_size), max_retries=0
        )
        self.session.mount("http://", self._adapter)
        self.session.mount("https://", self._adapter)
        self.headers = CaseInsensitiveDict(
            {
                "User-Agent": "receipts-worker",
                "Accept-Encoding": "gzip, deflate",
                "Content-Type": "application/json",
                **headers,
            }
        )
        self.timeout = (connect_timeout, read_timeout)
        environment = self.session.merge_environment_settings(self.url, {}, None, None, None)
        self._send_options: dict[str, Any] = {
            "timeout": self.timeout,
            "stream": False,
            "proxies": environment["proxies"],
            "verify": environment["verify"],
            "cert": environment["cert"],
        }

    def post(
        self, body: bytes, extra_headers: Mapping[str, str] | None = None
    ) -> requests.Response:
        """The request ``Session.post`` would prepare (less the headers HTTP/1.1
        implies), with ``body`` as it is. Raises what requests raises."""
        headers = self.headers.copy()
        headers.update(extra_headers or {})
        headers["Content-Length"] = str(len(body))
        request = requests.PreparedRequest()
        request.method = "POST"
        request.url = self.url
        request.headers = headers
        request.body = body
        response = self._adapter.send(request, **self._send_options)
        response.content  # noqa: B018 - read the body now, inside the timeout
        return response

    def get(self, url: str, params: Mapping[str, str | int], timeout: float) -> requests.Response:
        """A lookup: never redirected, within the provider timeouts and ``timeout`` seconds
        (what is left before the caller's deadline) for each of connect and read."""
        return self.session.get(
            url,
            params=dict(params),
            headers=dict(self.headers),
            timeout=(min(self.timeout[0], timeout), min(self.timeout[1], timeout)),
            allow_redirects=False,
        )

    def close(self) -> None:
        self.session.close()


class _OneEndpointAdapter(HTTPAdapter):
    """requests' adapter for a provider that posts to one URL with proxies and
    certificate settings fixed when it is made: the connection pool, its
    certificate settings and the request target are worked out on the first
    post to a URL and kept, instead of parsing the URL, selecting a proxy,
    looking the pool up and checking the CA bundle on disk on every send.
    Lookups (other URLs) take requests' ordinary path."""

    def __init__(self, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self._pools: dict[str, Any] = {}
        self._targets: dict[str, str] = {}
        self._lock = threading.Lock()
        self.fast_urls: set[str] = set()

    def get_connection_with_tls_context(
        self, request: requests.PreparedRequest, verify: Any, proxies: Any = None, cert: Any = None
    ) -> Any:
        url = request.url or ""
        if request.method != "POST":
            return super().get_connection_with_tls_context(request, verify, proxies, cert)
        pool = self._pools.get(url)
        if pool is None:
            with self._lock:
                pool = super().get_connection_with_tls_context(request, verify, proxies, cert)
                super().cert_verify(pool, url, verify, cert)  # type: ignore[no-untyped-call]
                self._pools[url] = pool
        return pool

    def cert_verify(self, conn: Any, url: str, verify: Any, cert: Any) -> None:
        """Done once per posted URL, when its pool was found (its settings stay on the pool);
        for lookups as requests does it."""
        if url not in self._pools:
            super().cert_verify(conn, url, verify, cert)  # type: ignore[no-untyped-call]

    def request_url(self, request: requests.PreparedRequest, proxies: Any) -> str:
        url = request.url or ""
        if request.method != "POST":
            return str(super().request_url(request, proxies))
        target = self._targets.get(url)
        if target is None:
            target = self._targets[url] = super().request_url(request, proxies)
        return target

    def close(self) -> None:
        with self._lock:
            self._pools.clear()
            self._targets.clear()
        super().close()


def prepared_url(url: str, setting: str) -> str:
    """The URL as requests would send it (IDNA host, quoted path); ConfigError naming
    ``setting`` if it is not usable."""
    request = requests.PreparedRequest()
    try:
        request.prepare_url(url, None)
    except requests.RequestException as exc:
        raise ConfigError(setting, f"is not a usable URL ({type(exc).__name__})") from exc
    assert request.url is not None
    return request.url
