"""The one image-URL fetcher: ``load_image`` (batch jobs) and ``vis-embed serve`` both use it.

What it guarantees, whoever calls it:

* **http and https only**, on the first URL and on every redirect hop (at most
  :data:`MAX_REDIRECTS`); a redirect to ``ftp://`` or ``file://`` is refused, not followed.
* **Address policy** (:class:`UrlPolicy`): the host name is resolved once, *every* address it
  resolves to is checked, and the connection goes to a checked address (no second DNS lookup
  that could answer differently).  Unless ``allow_private`` is set, loopback, private,
  link-local, shared, reserved, unspecified and multicast addresses are refused: a server must
  not let a client reach its own machine or network (server-side request forgery).
* **One deadline for the whole fetch** (``timeout_s``): a watchdog closes the socket when the
  time is up, so a host that sends one byte every few seconds cannot hold a fetch longer than
  that (a socket timeout only bounds each read).
* **The path and query sent as a URL**: a space or a non-ASCII character (``/my photo é.jpg``) is
  sent percent-encoded (UTF-8), an escape already there as it is (``%20`` stays ``%20``); the
  host, which the address policy checks, is never touched (:func:`_request_target`).
* **A byte cap** (``max_bytes``): a larger answer is refused after ``max_bytes + 1`` bytes.
* **Errors that leak nothing**: :class:`FetchError` says "cannot fetch image URL" and, when
  the host answered, only the status class (``HTTP 4xx``); a closed port, a refused address and
  a timeout read the same, so the fetcher cannot be used to map a network.
"""

from __future__ import annotations

import http.client
import ipaddress
import re
import socket
import threading
import time
import urllib.parse
from dataclasses import dataclass
from typing import Any

from vis_embed.errors import DataError
from vis_embed.io import MAX_INPUT_BYTES

MAX_REDIRECTS = 5
REDIRECT_STATUSES = (301, 302, 303, 307, 308)
FETCH_FAILED = "cannot fetch image URL"
_CHUNK = 1 << 16
_NAT64 = ipaddress.IPv6Network("64:ff9b::/96")  # RFC 6052's well-known prefix
_NAT64_LOCAL = ipaddress.IPv6Network("64:ff9b:1::/48")  # RFC 8215's local-use prefix (IPv4 in the low 32 bits)
# What a request target keeps as written: RFC 3986's reserved characters and '%' (so an escape
# already there is not encoded twice); quote() keeps the unreserved ones (requests' requote_uri
# keeps the same set).
_TARGET_SAFE = "!$%&'()*+,/:;=?@[]~"
_STRAY_PERCENT = re.compile(r"%(?![0-9A-Fa-f]{2})")  # a '%' that starts no escape


class FetchError(DataError):
    """A URL that could not be fetched; the message names no port-level reason."""


@dataclass(frozen=True)
class UrlPolicy:
    """What a fetch may do.  The defaults suit a batch job on the user's own data (any
    address, 30 s, 256 MiB); ``vis-embed serve`` builds a stricter one from its flags."""

    allow_private: bool = True
    timeout_s: float = 30.0
    max_bytes: int = MAX_INPUT_BYTES


def fetch_url(url: str, policy: UrlPolicy = UrlPolicy()) -> bytes:
    """The body of ``url`` (status 200, after redirects), or a :class:`FetchError`."""
    deadline = time.monotonic() + policy.timeout_s
    for _hop in range(MAX_REDIRECTS + 1):
        parts = _checked_parts(url)
        address = _allowed_address(parts, policy.allow_private)
        status, location, body = _get(parts, address, deadline, policy.max_bytes)
        if status in REDIRECT_STATUSES and location:
            url = urllib.parse.urljoin(url, location)
            continue
        if status != 200:
            raise FetchError(f"{FETCH_FAILED} (HTTP {status // 100}xx)", path=_shown(url))
        return body
    raise FetchError(f"{FETCH_FAILED} (more than {MAX_REDIRECTS} redirects)", path=_shown(url))


def is_public_address(address: str) -> bool:
    """True for a globally routable unicast address (what a server may fetch by default).  An
    IPv6 address that carries an IPv4 one -- mapped ``::ffff:a.b.c.d``, IPv4-compatible
    ``::a.b.c.d``, NAT64 ``64:ff9b::/96``, 6to4 ``2002::/16`` -- is judged by that IPv4 (a NAT64
    or 6to4 gateway would carry the connection to it: ``64:ff9b::10.0.0.1`` is 10.0.0.1)."""
    ip = ipaddress.ip_address(address.split("%", 1)[0])  # drop an IPv6 zone id ("fe80::1%eth0")
    if ip.version == 6:
        ip = embedded_ipv4(ip) or ip
    return ip.is_global and not ip.is_multicast


def embedded_ipv4(ip: ipaddress.IPv6Address) -> ipaddress.IPv4Address | None:
    """The IPv4 address ``ip`` carries (see :func:`is_public_address`), or None."""
    if ip.ipv4_mapped is not None:
        return ip.ipv4_mapped
    if ip.sixtofour is not None:
        return ip.sixtofour
    low32 = ipaddress.IPv4Address(int(ip) & 0xFFFFFFFF)
    if ip in _NAT64 or ip in _NAT64_LOCAL:
        return low32
    if int(ip) >> 32 == 0 and int(ip) > 1:  # ::a.b.c.d (deprecated); :: and ::1 are themselves
        return low32
    if int(ip) >> 32 == 0xFFFF0000:  # ::ffff:0:a.b.c.d, IPv4-translated (RFC 2765)
        return low32
    return None


def _checked_parts(url: str) -> urllib.parse.SplitResult:
    parts = urllib.parse.urlsplit(url)
    try:
        parts.port  # noqa: B018  (raises ValueError for a port that is not a number in range)
    except ValueError:
        raise FetchError(f"{FETCH_FAILED} (malformed URL)", path=_shown(url)) from None
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise FetchError(f"{FETCH_FAILED} (only http and https URLs are fetched)", path=_shown(url))
    return parts


def _allowed_address(parts: urllib.parse.SplitResult, allow_private: bool) -> tuple[str, int]:
    """The (ip, port) to connect to: every address of the host checked against the policy."""
    port = parts.port or (443 if parts.scheme == "https" else 80)
    try:
        infos = socket.getaddrinfo(parts.hostname, port, type=socket.SOCK_STREAM)
    except (OSError, UnicodeError):
        raise FetchError(FETCH_FAILED, path=_shown(parts.geturl())) from None
    addresses = [info[4][0] for info in infos]
    if not addresses:
        raise FetchError(FETCH_FAILED, path=_shown(parts.geturl()))
    if not allow_private and not all(is_public_address(address) for address in addresses):
        # The server says only FETCH_FAILED for this and an unknown name alike (serving.images).
        raise FetchError(f"{FETCH_FAILED} (address not allowed)", path=_shown(parts.geturl()))
    return addresses[0], port


def _get(parts: urllib.parse.SplitResult, address: tuple[str, int], deadline: float,
         max_bytes: int) -> tuple[int, str | None, bytes]:
    """(status, Location header, body) of one GET sent to ``address``, all before ``deadline``."""
    remaining = deadline - time.monotonic()
    if remaining <= 0:
        raise FetchError(FETCH_FAILED, path=_shown(parts.geturl()))
    connection_class = http.client.HTTPSConnection if parts.scheme == "https" else http.client.HTTPConnection
    # The host name stays the connection's (Host header, TLS SNI and certificate check); only
    # the socket goes to the address that was checked.
    connection = connection_class(parts.hostname, address[1], timeout=remaining)
    sockets: list[socket.socket] = []  # what the watchdog shuts: the connection lets go of its socket early

    def connect(_host_port: Any, timeout: float, source: Any = None) -> socket.socket:
        sockets.append(socket.create_connection(address, timeout, source))
        return sockets[-1]

    connection._create_connection = connect  # type: ignore[attr-defined]
    watchdog = threading.Timer(remaining, _abort, args=(sockets,))
    watchdog.daemon = True
    watchdog.start()
    try:
        connection.request("GET", _request_target(parts), headers={"User-Agent": "vis_embed", "Accept": "image/*"})
        if connection.sock is not None:
            sockets.append(connection.sock)  # https: the TLS socket wrapping the first one
        response = connection.getresponse()
        if response.status != 200:
            return response.status, _location(response.getheader("Location")), b""
        body = _read_capped(response, max_bytes, parts)
        if time.monotonic() > deadline:
            raise TimeoutError
        return 200, None, body
    except FetchError:
        raise
    except Exception:  # noqa: BLE001  (refused, reset, timed out, TLS, malformed answer: all one message)
        raise FetchError(FETCH_FAILED, path=_shown(parts.geturl())) from None
    finally:
        watchdog.cancel()
        connection.close()


def _request_target(parts: urllib.parse.SplitResult) -> str:
    """The path and query to send: a space, a non-ASCII or another character a URL may not hold
    is percent-encoded (http.client refuses a space, and ASCII-encodes the request line, so such
    a URL was never fetched); an escape already there is kept, not encoded twice."""
    target = parts.path or "/"
    if parts.query:
        target += "?" + parts.query
    if _STRAY_PERCENT.search(target):  # "100% cotton.jpg": the % is the name's, not an escape (requests' rule)
        return urllib.parse.quote(target, safe=_TARGET_SAFE.replace("%", ""))
    return urllib.parse.quote(target, safe=_TARGET_SAFE)


def _location(value: str | None) -> str | None:
    """A Location header as its sender meant it: http.client reads header bytes as latin-1, so a
    Location sent as raw UTF-8 (not a URI, yet servers send it) is read back as UTF-8 (as requests
    does); one that is not UTF-8 stays as read."""
    if value is None:
        return None
    try:
        return value.encode("latin-1").decode("utf-8")
    except UnicodeError:
        return value


def _read_capped(response: http.client.HTTPResponse, max_bytes: int, parts: urllib.parse.SplitResult) -> bytes:
    chunks, size = [], 0
    while True:
        chunk = response.read(_CHUNK)
        if not chunk:
            return b"".join(chunks)
        size += len(chunk)
        if size > max_bytes:
            raise FetchError(f"{FETCH_FAILED} (larger than {max_bytes} bytes)", path=_shown(parts.geturl()))
        chunks.append(chunk)


def _abort(sockets: list[socket.socket]) -> None:
    """The deadline passed: unblock the fetching thread's read by shutting its socket down."""
    for sock in reversed(sockets):
        try:
            sock.shutdown(socket.SHUT_RDWR)
            return
        except OSError:  # closed already, or detached into the TLS socket: try the next
            continue


def _shown(url: str) -> str:
    return url[:200]
