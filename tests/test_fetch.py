"""The one image-URL fetcher (vis_embed.data.fetch): scheme and address policy on every hop,
a deadline for the whole fetch, a byte cap, and errors that do not map the network.
Loopback only (tests/_loopback.py)."""

from __future__ import annotations

import io
import re
import socket
import time
import urllib.parse

import pytest
from _loopback import ScriptedServer, closed_port, drip, send
from PIL import Image

from vis_embed.data import fetch
from vis_embed.data.fetch import FetchError, UrlPolicy, fetch_url, is_public_address

pytestmark = pytest.mark.timeout(60)

PRIVATE_OK = UrlPolicy(allow_private=True, timeout_s=5.0, max_bytes=1 << 20)
PUBLIC_ONLY = UrlPolicy(allow_private=False, timeout_s=5.0, max_bytes=1 << 20)


def _png() -> bytes:
    buffer = io.BytesIO()
    Image.new("RGB", (4, 4), (9, 9, 9)).save(buffer, "PNG")
    return buffer.getvalue()


@pytest.fixture
def servers():
    started: list[ScriptedServer] = []

    def start(answer, host: str = "127.0.0.1") -> ScriptedServer:
        started.append(ScriptedServer(answer, host))
        return started[-1]

    yield start
    for server in started:
        server.close()


@pytest.mark.parametrize("address, public", [
    ("8.8.8.8", True), ("2001:4860:4860::8888", True), ("127.0.0.1", False), ("::1", False),
    ("10.1.2.3", False), ("192.168.0.1", False), ("172.16.0.1", False), ("169.254.169.254", False),
    ("fe80::1%eth0", False), ("224.0.0.1", False), ("ff02::1", False), ("0.0.0.0", False),
    ("100.64.0.1", False), ("::ffff:127.0.0.1", False), ("fc00::1", False)])
def test_only_global_unicast_addresses_are_public(address: str, public: bool) -> None:
    assert is_public_address(address) is public


def test_a_loopback_url_is_fetched_only_when_private_addresses_are_allowed(servers) -> None:
    png = _png()
    server = servers(lambda handler: send(handler, 200, png, {"Content-Type": "image/png"}))
    assert fetch_url(f"{server.url}/a.png", PRIVATE_OK) == png
    with pytest.raises(FetchError, match="address not allowed"):
        fetch_url(f"{server.url}/a.png", PUBLIC_ONLY)
    with pytest.raises(FetchError, match="address not allowed"):
        fetch_url(server.url.replace("127.0.0.1", "localhost") + "/a.png", PUBLIC_ONLY)
    assert server.hits == 1  # the refused fetches never connected


def test_every_resolved_address_is_checked(monkeypatch) -> None:
    """A name resolving to a public and a private address is refused, whichever comes first."""
    def resolves_to_both(host, port, *args, **kwargs):
        return [(socket.AF_INET, socket.SOCK_STREAM, 6, "", (address, port)) for address in ("8.8.8.8", "127.0.0.1")]

    monkeypatch.setattr(fetch.socket, "getaddrinfo", resolves_to_both)
    with pytest.raises(FetchError, match="address not allowed"):
        fetch_url("http://mixed.example/a.png", PUBLIC_ONLY)


def test_every_redirect_hop_is_checked(servers, monkeypatch) -> None:
    """127.0.0.1 plays a public host; its redirect to 127.0.0.2 (a private one) is refused."""
    monkeypatch.setattr(fetch, "is_public_address", lambda address: address == "127.0.0.1")
    try:
        private = servers(lambda handler: send(handler, 200, _png()), host="127.0.0.2")
    except OSError:
        pytest.skip("127.0.0.2 is not usable here")
    public = servers(lambda handler: send(handler, 302, headers={"Location": f"{private.url}/secret.png"}))
    with pytest.raises(FetchError, match="address not allowed"):
        fetch_url(f"{public.url}/a.png", PUBLIC_ONLY)
    assert public.hits == 1 and private.hits == 0


def test_a_redirect_to_another_scheme_is_refused_without_connecting(servers) -> None:
    with socket.socket() as listener:  # an "FTP server" that must never see a connection
        listener.bind(("127.0.0.1", 0))
        listener.listen(1)
        listener.settimeout(0.5)
        ftp = f"ftp://127.0.0.1:{listener.getsockname()[1]}/a.png"
        server = servers(lambda handler: send(handler, 302, headers={"Location": ftp}))
        with pytest.raises(FetchError, match="only http and https"):
            fetch_url(f"{server.url}/a.png", PRIVATE_OK)
        with pytest.raises(TimeoutError):
            listener.accept()


def test_a_redirect_loop_ends(servers) -> None:
    server = servers(lambda handler: send(handler, 302, headers={"Location": "/again"}))
    with pytest.raises(FetchError, match="redirects"):
        fetch_url(f"{server.url}/a.png", PRIVATE_OK)
    assert server.hits == fetch.MAX_REDIRECTS + 1


def test_the_timeout_bounds_the_whole_fetch_not_each_read(servers) -> None:
    """One byte every 0.3 s never trips a per-read timeout of 1 s; the whole-fetch deadline does."""
    server = servers(drip)
    started = time.monotonic()
    with pytest.raises(FetchError):
        fetch_url(f"{server.url}/slow.png", UrlPolicy(allow_private=True, timeout_s=1.0))
    assert time.monotonic() - started < 6  # the drip would take 12 s


def test_an_answer_over_the_byte_cap_is_refused(servers) -> None:
    server = servers(lambda handler: send(handler, 200, b"x" * 5000))
    with pytest.raises(FetchError, match="larger than 1000 bytes"):
        fetch_url(f"{server.url}/big.png", UrlPolicy(allow_private=True, max_bytes=1000))


def test_errors_name_the_status_class_but_no_network_detail(servers) -> None:
    not_found = servers(lambda handler: send(handler, 404))
    broken = servers(lambda handler: send(handler, 503))
    with pytest.raises(FetchError) as found:
        fetch_url(f"{not_found.url}/a.png", PRIVATE_OK)
    assert found.value.reason == "cannot fetch image URL (HTTP 4xx)"
    with pytest.raises(FetchError) as failed:
        fetch_url(f"{broken.url}/a.png", PRIVATE_OK)
    assert failed.value.reason == "cannot fetch image URL (HTTP 5xx)"
    # A closed port and an open port that speaks no HTTP read the same.
    with socket.socket() as mute:
        mute.bind(("127.0.0.1", 0))
        mute.listen(1)
        reasons = set()
        for port in (closed_port(), mute.getsockname()[1]):
            with pytest.raises(FetchError) as info:
                fetch_url(f"http://127.0.0.1:{port}/a.png", UrlPolicy(allow_private=True, timeout_s=1.0))
            reasons.add(info.value.reason)
    assert reasons == {"cannot fetch image URL"}


@pytest.fixture
def photo_server(servers):
    """A file server (http.server's own: it unquotes the request path) holding one photo whose
    name has a space and a non-ASCII character, and a decoy at the name's first word; the
    request targets it received are in ``.targets``."""
    photo = _png()
    files = {"/photos/my photo é.jpg": photo, "/photos/my": b"decoy"}
    targets: list[str] = []

    def answer(handler) -> None:
        targets.append(handler.path)
        path = handler.path.partition("?")[0]
        if path == "/moved":
            send(handler, 302, headers={"Location": "/photos/my photo%20%C3%A9.jpg"})  # a raw space, as some send
            return
        body = files.get(urllib.parse.unquote(path))
        send(handler, 404) if body is None else send(handler, 200, body, {"Content-Type": "image/jpeg"})

    server = servers(answer)
    server.photo, server.targets = photo, targets
    return server


@pytest.mark.parametrize("name", ["my photo é.jpg", "my%20photo%20%C3%A9.jpg", "my photo%20%C3%A9.jpg",
                                  "my%20photo%20é.jpg?size=large%20one&tag=été"])
def test_a_url_with_a_space_or_non_ascii_character_is_sent_percent_encoded(photo_server, name) -> None:
    """http.client refuses a space in the request target and ASCII-encodes it, so
    ``http://host/photos/my photo é.jpg`` was never fetched ("cannot fetch image URL").  The
    path and query are sent percent-encoded (UTF-8); an escape already there is kept as it is."""
    assert fetch_url(f"{photo_server.url}/photos/{name}", PRIVATE_OK) == photo_server.photo
    path, _, query = photo_server.targets[-1].partition("?")
    assert path == "/photos/my%20photo%20%C3%A9.jpg"
    assert query in ("", "size=large%20one&tag=%C3%A9t%C3%A9")


def test_an_escape_is_never_encoded_twice(photo_server) -> None:
    """``%2520`` names a file called ``%20``, not ``%2525...``: it is sent as written."""
    with pytest.raises(FetchError, match="HTTP 4xx"):
        fetch_url(f"{photo_server.url}/photos/my%2520photo%2520%25C3%25A9.jpg", PRIVATE_OK)
    assert photo_server.targets == ["/photos/my%2520photo%2520%25C3%25A9.jpg"]


def test_a_percent_sign_that_starts_no_escape_is_sent_encoded(servers) -> None:
    """``/100% cotton.jpg`` names a file with a '%' in it: sent as written, a server reads a broken
    escape (nginx answers 400, as this one does); as requests does, such a target quotes its '%' too."""
    photo, targets = _png(), []

    def answer(handler) -> None:
        targets.append(handler.path)
        if re.search(r"%(?![0-9A-Fa-f]{2})", handler.path):
            send(handler, 400)
            return
        found = urllib.parse.unquote(handler.path) == "/shop/100% cotton.jpg"
        send(handler, 200, photo, {"Content-Type": "image/jpeg"}) if found else send(handler, 404)

    server = servers(answer)
    assert fetch_url(f"{server.url}/shop/100% cotton.jpg", PRIVATE_OK) == photo
    assert targets == ["/shop/100%25%20cotton.jpg"]


def test_an_unencoded_url_keeps_its_host_for_the_address_policy(photo_server) -> None:
    """Only path and query are encoded: the host the policy checks is the URL's, on the first
    hop and on a redirect to a Location with a raw space."""
    assert fetch_url(f"{photo_server.url}/moved", PRIVATE_OK) == photo_server.photo
    assert photo_server.targets == ["/moved", "/photos/my%20photo%20%C3%A9.jpg"]
    for url in (f"{photo_server.url}/photos/my photo é.jpg", f"{photo_server.url}/moved",
                photo_server.url.replace("127.0.0.1", "localhost") + "/photos/my photo é.jpg"):
        with pytest.raises(FetchError, match="address not allowed"):
            fetch_url(url, PUBLIC_ONLY)
    assert photo_server.hits == 2  # the refused fetches never connected


@pytest.mark.parametrize("encoding", ["utf-8", "latin-1"])
def test_a_redirect_to_a_raw_non_ascii_location_reaches_that_file(servers, encoding) -> None:
    """A Location of raw UTF-8 bytes (against the RFC, yet sent) was read by http.client as
    latin-1 and fetched as ``/photos/%C3%83%C2%A9.jpg``: another, missing, file."""
    photo, targets = _png(), []

    def answer(handler) -> None:
        targets.append(handler.path)
        if handler.path == "/moved":
            handler.wfile.write("HTTP/1.1 302 Found\r\nLocation: /photos/é.jpg\r\nContent-Length: 0\r\n\r\n"
                                .encode(encoding))
        elif urllib.parse.unquote(handler.path) == "/photos/é.jpg":
            send(handler, 200, photo)
        else:
            send(handler, 404)

    assert fetch_url(f"{servers(answer).url}/moved", PRIVATE_OK) == photo
    assert targets == ["/moved", "/photos/%C3%A9.jpg"]
