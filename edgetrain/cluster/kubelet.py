"""The part of a kubelet's HTTPS API that virtual nodes serve: container logs, which the API
server proxies for `kubectl logs` (-f, --tail, --previous, -c, --limit-bytes)."""

from __future__ import annotations

import contextlib
import fcntl
import functools
import logging
import os
import ssl
import tempfile
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Callable
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from urllib.parse import parse_qs, unquote, urlparse

log = logging.getLogger("edgetrain.vnode.kubelet")

KUBELET_PORT = 10250
FOLLOW_POLL_S = 0.2
# Host-wide claims on 127.0.0.N: virtual nodes of several clusters on one machine never share
# an address. A claim is an flock on a file; it ends when its process does.
ADDRESS_LOCK_DIRNAME = "edgetrain-vnode-addresses"  # under the temp dir


@dataclass(frozen=True)
class ContainerLog:
    """Where a container's log is, and whether it may still grow."""

    path: Path
    running: Callable[[], bool]


# (namespace, pod, container or "", previous) -> the log, or an error text for a 404.
LogFinder = Callable[[str, str, str, bool], ContainerLog | str]


class AddressClaim:
    """An exclusive loopback address 127.0.0.N (N ≥ 2; 127.0.0.1 stays the control plane's)."""

    def __init__(self, lock_dir: Path | None = None) -> None:
        # Resolved here, not at import: importing the CLI must not need a writable temp dir
        # (the chart's pods run with a read-only root file system).
        lock_dir = lock_dir or Path(tempfile.gettempdir()) / ADDRESS_LOCK_DIRNAME
        lock_dir.mkdir(parents=True, exist_ok=True)
        for third in range(256):
            for fourth in range(2 if third == 0 else 1, 255):
                address = f"127.0.{third}.{fourth}"
                fd = os.open(lock_dir / f"{address}.lock", os.O_RDWR | os.O_CREAT, 0o644)
                try:
                    fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                except BlockingIOError:
                    os.close(fd)
                    continue
                self.address, self._fd = address, fd
                return
        raise RuntimeError(f"no free loopback address left (claims in {lock_dir})")

    def release(self) -> None:
        """Give the address back (idempotent: a second close would close whatever descriptor
        has the number by then, a twin's file or a pipe of another thread)."""
        fd, self._fd = self._fd, -1
        if fd >= 0:
            with contextlib.suppress(OSError):
                os.close(fd)


def tail_bytes(data: bytes, lines: int | None, limit_bytes: int | None) -> bytes:
    """The last `lines` lines of a log, then at most `limit_bytes` of it (kubelet order)."""
    if lines is not None:
        if lines <= 0:
            data = b""
        else:
            parts = data.splitlines(keepends=True)
            data = b"".join(parts[-lines:])
    if limit_bytes is not None:
        data = data[:limit_bytes]
    return data


class _Handler(BaseHTTPRequestHandler):
    server: _KubeletHTTPServer
    protocol_version = "HTTP/1.0"  # the body ends when the connection does: fits -f

    def log_message(self, format: str, *args: object) -> None:
        log.debug("%s %s", self.address_string(), format % args)

    def _text(self, code: int, text: str) -> None:
        body = text.encode()
        self.send_response(code)
        self.send_header("Content-Type", "text/plain; charset=utf-8")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def do_GET(self) -> None:
        url = urlparse(self.path)
        if url.path in ("/healthz", "/readyz"):
            self._text(200, "ok")
            return
        parts = [unquote(p) for p in url.path.split("/") if p]
        if len(parts) not in (3, 4) or parts[0] != "containerLogs":
            self._text(404, f"not found: {url.path}")
            return
        query = {k: v[-1] for k, v in parse_qs(url.query).items()}
        namespace, pod = parts[1], parts[2]
        container = parts[3] if len(parts) == 4 else ""
        found = self.server.find_log(namespace, pod, container,
                                     query.get("previous") == "true")
        if isinstance(found, str):
            self._text(404, found)
            return
        try:
            tail = int(query["tailLines"]) if "tailLines" in query else None
            limit = int(query["limitBytes"]) if "limitBytes" in query else None
        except ValueError:
            self._text(400, "tailLines and limitBytes must be integers")
            return
        self._stream(found, tail, limit, query.get("follow") == "true")

    def _stream(self, found: ContainerLog, tail: int | None, limit: int | None,
                follow: bool) -> None:
        try:
            data = found.path.read_bytes()
        except OSError:
            data = b""
        self.send_response(200)
        self.send_header("Content-Type", "text/plain; charset=utf-8")
        self.end_headers()
        out = tail_bytes(data, tail, limit)
        sent = len(out)
        offset = len(data)
        with contextlib.suppress(BrokenPipeError, ConnectionResetError, ssl.SSLError):
            self.wfile.write(out)
            self.wfile.flush()
            while follow and (limit is None or sent < limit) and not self.server.stopping:
                alive = found.running()
                try:
                    with found.path.open("rb") as f:
                        f.seek(offset)
                        more = f.read()
                except OSError:
                    more = b""
                if more:
                    offset += len(more)
                    if limit is not None:
                        more = more[: limit - sent]
                    self.wfile.write(more)
                    self.wfile.flush()
                    sent += len(more)
                elif not alive:
                    break
                else:
                    time.sleep(FOLLOW_POLL_S)


class _KubeletHTTPServer(ThreadingHTTPServer):
    daemon_threads = True

    def __init__(self, address: tuple[str, int], find_log: LogFinder) -> None:
        self.find_log = find_log
        self.stopping = False
        super().__init__(address, _Handler)


class KubeletServer:
    """One virtual node's kubelet endpoint on its own address."""

    def __init__(self, address: str, cert_pem: bytes, key_pem: bytes,
                 client_ca: Path | None, find_log: LogFinder) -> None:
        self.address = address
        try:
            self._http = _KubeletHTTPServer((address, KUBELET_PORT), find_log)
        except OSError:  # 10250 taken on this address by something else: any port will do
            self._http = _KubeletHTTPServer((address, 0), find_log)
        self.port = int(self._http.server_address[1])
        ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        with tempfile.TemporaryDirectory(prefix="edgetrain-kubelet-") as tmp:
            crt, key = Path(tmp) / "tls.crt", Path(tmp) / "tls.key"
            crt.write_bytes(cert_pem)
            key.touch(mode=0o600)
            key.write_bytes(key_pem)
            ctx.load_cert_chain(crt, key)
        if client_ca is not None:
            # Only the API server (a client certificate of the cluster CA) may read logs.
            ctx.verify_mode = ssl.CERT_REQUIRED
            ctx.load_verify_locations(cafile=str(client_ca))
        self._ctx = ctx
        self._http.socket = ctx.wrap_socket(self._http.socket, server_side=True,
                                            do_handshake_on_connect=False)
        self._thread = threading.Thread(target=self._http.serve_forever,
                                        name=f"kubelet-{address}", daemon=True)

    def start(self) -> KubeletServer:
        """Serve in a background thread."""
        self._thread.start()
        return self

    def stop(self) -> None:
        """Stop serving; open follows end at their next poll."""
        self._http.stopping = True
        self._http.shutdown()
        with contextlib.suppress(OSError):
            self._http.socket.close()
        self._thread.join(timeout=5)


def http_probe(host: str, port: int, path: str, scheme: str = "HTTP",
               timeout_s: float = 1.0) -> bool:
    """A kubelet httpGet probe: any status from 200 to 399 passes."""
    url = f"{scheme.lower()}://{host}:{port}{path or '/'}"
    ctx = _probe_tls() if scheme.upper() == "HTTPS" else None
    try:
        with urllib.request.urlopen(url, timeout=timeout_s, context=ctx) as resp:
            return 200 <= int(resp.status) < 400
    except urllib.error.HTTPError as exc:
        return 200 <= exc.code < 400
    except (urllib.error.URLError, OSError, ValueError):
        return False


@functools.cache
def _probe_tls() -> ssl.SSLContext:
    """One TLS context for every HTTPS probe, without the CA bundle: the kubelet does not verify
    probe certificates either, and loading the bundle for each probe was most of its cost."""
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
    ctx.check_hostname = False
    ctx.verify_mode = ssl.CERT_NONE
    return ctx
