"""Fetching a client's metadata document (its client_id URL) under the webhook URLs' SSRF rules.

The toolkit's own fetcher already pins the address it checked (every address the host resolves to
must be public: no private, loopback, link-local, CGNAT or cloud-metadata address, however an IPv6
address embeds it), connects to that address only, follows no redirect, stops reading past
CIMD_MAX_DOCUMENT_SIZE and within CIMD_FETCH_TIMEOUT_SECONDS. Before it runs, the URL is held to the
rules a webhook URL is held to (approvals.agents.webhooks.webhook_url_check: absolute, at most 2000
characters, no credentials); the toolkit adds https only, a path, no fragment and no dot segments.

Tests serve documents on 127.0.0.1 over https: with OAUTH_CIMD_TEST_LOOPBACK_CA_FILE set (tests only),
a loopback literal address is fetched trusting that CA alone, under the same reading rules. Empty, the
default, leaves loopback refused like any private address.
"""

from __future__ import annotations

import ipaddress
from typing import Any
from urllib.parse import urlsplit

import urllib3
from django.conf import settings
from oauth2_provider.cimd import CIMDError, SafeMetadataFetcher, _validate_client_id_url
from oauth2_provider.settings import oauth2_settings

from approvals.agents.webhooks import webhook_url_check
from approvals.core.errors import ApplicationError


def _loopback_literal(host: str | None) -> bool:
    try:
        return host is not None and ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


class GatewayMetadataFetcher(SafeMetadataFetcher):
    """The toolkit's SSRF-hardened fetcher, behind the webhook URLs' check."""

    def fetch(self, client_id: str) -> tuple[dict[str, Any], int]:
        try:
            webhook_url_check(client_id)
        except ApplicationError as error:
            raise CIMDError(f"client_id URL refused: {error.message}") from error
        host = urlsplit(client_id).hostname
        if settings.OAUTH_CIMD_TEST_LOOPBACK_CA_FILE and _loopback_literal(host):
            return self._fetch_loopback(client_id)
        result: tuple[dict[str, Any], int] = super().fetch(client_id)
        return result

    def _fetch_loopback(self, client_id: str) -> tuple[dict[str, Any], int]:
        parsed = _validate_client_id_url(client_id)
        timeout = oauth2_settings.CIMD_FETCH_TIMEOUT_SECONDS
        pool = urllib3.HTTPSConnectionPool(
            host=parsed.hostname,
            port=parsed.port or 443,
            timeout=urllib3.Timeout(connect=timeout, read=timeout, total=timeout),
            retries=False,
            maxsize=1,
            cert_reqs="CERT_REQUIRED",
            ca_certs=settings.OAUTH_CIMD_TEST_LOOPBACK_CA_FILE,
        )
        path = parsed.path + (f"?{parsed.query}" if parsed.query else "")
        try:
            response = pool.urlopen("GET", path, redirect=False, preload_content=False)
            try:
                document: tuple[dict[str, Any], int] = self._read_document(response)
                return document
            finally:
                response.release_conn()
        except urllib3.exceptions.HTTPError as error:
            raise CIMDError(f"could not fetch client_id document: {error}") from error
        finally:
            pool.close()
