"""Kubernetes API access for every edgetrain process.

With a kubeconfig, the official `kubernetes` client does configuration and authentication
(contexts, client certificates, exec/OIDC plugins), TLS and connection pooling. In a pod the
credentials are a token file and a CA: urllib3 (which the library itself uses) carries them
directly, and the library is never imported. Its package imports all of itself (the kubeconfig
loader with requests and OAuth, the dynamic client, websockets): 0.15 s of every pod's start,
about 1.5 s under arm64 emulation (docs/cluster.md, "What a real Jetson node costs"). What
stays here is what neither has: requests by REST path on plain JSON dicts (the code base
passes dicts, not generated models), an informer-style list+watch that relists after 410
Gone, and a poll-until helper.
"""

from __future__ import annotations

import datetime as dt
import json
import math
import os
import shutil
import signal
import threading
import time
from collections.abc import Callable, Iterator, Mapping
from pathlib import Path
from typing import Any, Literal, cast
from urllib.parse import urlencode

import urllib3
import yaml

Obj = dict[str, Any]
PatchType = Literal["merge", "strategic", "json", "apply"]
_PATCH_CONTENT_TYPES: dict[str, str] = {
    "merge": "application/merge-patch+json",
    "strategic": "application/strategic-merge-patch+json",
    "json": "application/json-patch+json",
    "apply": "application/apply-patch+yaml",
}
FIELD_MANAGER = "edgetrain"
SERVICE_ACCOUNT_DIR = Path("/var/run/secrets/kubernetes.io/serviceaccount")
# Virtual nodes place a pod's mounts under its own directory and rewrite env values naming
# mount paths, so pods find their ServiceAccount files through this variable (the chart sets it).
ENV_SERVICE_ACCOUNT_DIR = "EDGETRAIN_SA_DIR"
# How often the in-cluster token file is re-read (the kubelet rotates it well before expiry).
TOKEN_REREAD_S = 60.0
# Many threads (pod runners, watches, heartbeats) share one client in the virtual-node agent.
POOL_SIZE = 32


class KubeconfigError(ValueError):
    """No usable credentials: a kubeconfig missing, malformed or naming a missing plugin."""


class KubeApiError(RuntimeError):
    """The API server answered with an error Status (code 0: it could not be reached)."""

    def __init__(self, method: str, path: str, code: int, reason: str, message: str) -> None:
        super().__init__(f"{method} {path}: {code} {reason}: {message}")
        self.code = code
        self.reason = reason
        self.message = message


class WatchExpired(RuntimeError):
    """The watch's resourceVersion is too old (410 Gone): relist."""


def api_path(
    api_version: str,
    plural: str,
    namespace: str | None = None,
    name: str | None = None,
    subresource: str | None = None,
) -> str:
    """REST path, e.g. api_path("batch/v1", "jobs", "ns", "j1", "status")."""
    base = f"/api/{api_version}" if "/" not in api_version else f"/apis/{api_version}"
    parts = [base]
    if namespace is not None:
        parts.append(f"namespaces/{namespace}")
    parts.append(plural)
    if name is not None:
        parts.append(name)
    if subresource is not None:
        parts.append(subresource)
    return "/".join(parts)


# --- configuration ---------------------------------------------------------------------------


def service_account_dir(sa_dir: Path | None = None) -> Path:
    """Where the pod's token, ca.crt and namespace files are."""
    return sa_dir or Path(os.environ.get(ENV_SERVICE_ACCOUNT_DIR) or SERVICE_ACCOUNT_DIR)


def in_cluster(sa_dir: Path | None = None) -> bool:
    """Running in a pod: the service host is set and the token is mounted."""
    return bool(os.environ.get("KUBERNETES_SERVICE_HOST")) and (
        service_account_dir(sa_dir) / "token").is_file()


def default_kubeconfig_path() -> Path:
    """$KUBECONFIG (first entry) or ~/.kube/config."""
    env = os.environ.get("KUBECONFIG", "")
    first = env.split(os.pathsep)[0] if env else ""
    return Path(first) if first else Path.home() / ".kube" / "config"


def _check_kubeconfig(path: Path, context: str | None) -> None:
    """Name what is wrong before the library does: it logs a missing exec plugin and goes on
    unauthenticated, which surfaces much later as a bare 401."""
    try:
        doc = yaml.safe_load(path.read_text())
    except OSError as exc:
        raise KubeconfigError(f"cannot read kubeconfig {path}: {exc.strerror}; set "
                              "KUBECONFIG or pass --kubeconfig") from None
    except yaml.YAMLError as exc:
        raise KubeconfigError(f"kubeconfig {path} is not valid YAML: {exc}") from None
    if not isinstance(doc, dict):
        raise KubeconfigError(f"kubeconfig {path}: expected a mapping (apiVersion: v1, "
                              "kind: Config)")
    ctx_name = context or doc.get("current-context")
    ctx = next((c.get("context") or {} for c in doc.get("contexts") or []
                if isinstance(c, dict) and c.get("name") == ctx_name), None)
    if ctx is None:
        known = ", ".join(str(c.get("name")) for c in doc.get("contexts") or []
                          if isinstance(c, dict))
        raise KubeconfigError(f"kubeconfig {path}: no context {ctx_name!r} (known: "
                              f"{known or 'none'}); pass --context")
    user = next((u.get("user") or {} for u in doc.get("users") or []
                 if isinstance(u, dict) and u.get("name") == ctx.get("user")), {})
    plugin = (user.get("exec") or {}).get("command")
    if plugin and shutil.which(str(plugin)) is None:
        raise KubeconfigError(
            f"kubeconfig {path}: user {ctx.get('user')!r} authenticates with the exec plugin "
            f"{plugin!r}, which is not on PATH; install it (or put it on PATH) and retry")


class InClusterConfig:
    """A pod's credentials: the `kubernetes` Service's address, the ServiceAccount's CA and
    token. The token file is re-read every TOKEN_REREAD_S (the kubelet rotates it well before
    it expires) and at once after `expire` (a 401: the old token was revoked, e.g. its
    ServiceAccount recreated, and the kubelet wrote a new one)."""

    def __init__(self, sa_dir: Path) -> None:
        host = os.environ["KUBERNETES_SERVICE_HOST"]
        port = os.environ.get("KUBERNETES_SERVICE_PORT", "443")
        self.host = f"https://{'[' + host + ']' if ':' in host else host}:{port}"
        self.token_file = sa_dir / "token"
        self.ssl_ca_cert = str(sa_dir / "ca.crt")
        # The rest of the library's Configuration that callers read (kopf's login handler).
        self.verify_ssl = True
        self.cert_file: str | None = None
        self.key_file: str | None = None
        if not Path(self.ssl_ca_cert).is_file():
            raise KubeconfigError(f"no usable API credentials: no CA at {self.ssl_ca_cert}")
        self._token = ""
        self._read_at = -math.inf
        self.get_api_key_with_prefix("BearerToken")  # an unreadable token fails here

    def expire(self) -> None:
        """Read the token file again at the next request."""
        self._read_at = -math.inf

    def get_api_key_with_prefix(self, _name: str) -> str:
        """The Authorization header's value (the library's name for it)."""
        now = time.monotonic()
        if now - self._read_at >= TOKEN_REREAD_S:
            try:
                self._token = self.token_file.read_text().strip()
            except OSError as exc:
                raise KubeconfigError(f"no usable API credentials: cannot read "
                                      f"{self.token_file}: {exc.strerror}") from None
            self._read_at = now
        return f"bearer {self._token}"


def load_configuration(kubeconfig: Path | None = None, context: str | None = None,
                       sa_dir: Path | None = None) -> Any:
    """In-cluster ServiceAccount credentials (an InClusterConfig) unless a kubeconfig is
    given; else a `kubernetes.client.Configuration` from the kubeconfig, or from
    $KUBECONFIG or ~/.kube/config."""
    if kubeconfig is None and in_cluster(sa_dir):
        return InClusterConfig(service_account_dir(sa_dir))
    from kubernetes import client as k8s_client
    from kubernetes import config as k8s_config

    cfg = k8s_client.Configuration()
    try:
        path = kubeconfig or default_kubeconfig_path()
        _check_kubeconfig(path, context)
        k8s_config.load_kube_config(config_file=str(path), context=context,
                                    client_configuration=cfg, persist_config=False)
    except k8s_config.ConfigException as exc:
        raise KubeconfigError(f"no usable API credentials: {exc}") from None
    cfg.connection_pool_maxsize = POOL_SIZE
    return cfg


class _PoolTransport:
    """Requests over urllib3 with an InClusterConfig (TLS to the CA, bearer token)."""

    def __init__(self, cfg: InClusterConfig) -> None:
        self.cfg = cfg
        self.pool = urllib3.PoolManager(num_pools=4, maxsize=POOL_SIZE, cert_reqs="CERT_REQUIRED",
                                        ca_certs=cfg.ssl_ca_cert)

    def send(self, method: str, path: str, query: list[tuple[str, str]], body: Any,
             content_type: str, timeout: float | tuple[float, float]) -> Any:
        url = self.cfg.host + path + (f"?{urlencode(query)}" if query else "")
        headers = {"Accept": "application/json", "Content-Type": content_type,
                   "User-Agent": "edgetrain",
                   "Authorization": self.cfg.get_api_key_with_prefix("BearerToken")}
        connect, read = timeout if isinstance(timeout, tuple) else (timeout, timeout)
        data = None if body is None else json.dumps(body).encode()
        return self.pool.request(method, url, body=data, headers=headers,
                                 timeout=urllib3.Timeout(connect=connect, read=read),
                                 preload_content=False, retries=False)

    def expire_token(self) -> bool:
        self.cfg.expire()
        return True

    def close(self) -> None:
        self.pool.clear()


class _LibraryTransport:
    """Requests through the `kubernetes` client's ApiClient (a kubeconfig's credentials)."""

    def __init__(self, cfg: Any) -> None:
        from kubernetes import client as k8s_client

        self.error = k8s_client.ApiException
        self.api = k8s_client.ApiClient(cfg)
        self.api.user_agent = "edgetrain"

    def send(self, method: str, path: str, query: list[tuple[str, str]], body: Any,
             content_type: str, timeout: float | tuple[float, float]) -> Any:
        try:
            verb, url, headers, sent, post = self.api.param_serialize(
                method=method, resource_path=path, query_params=query or None,
                header_params={"Accept": "application/json", "Content-Type": content_type},
                body=body, auth_settings=["BearerToken"])
            return self.api.call_api(verb, url, header_params=headers, body=sent,
                                     post_params=post, _request_timeout=timeout).response
        except self.error as exc:  # the library's word for TLS failures
            raise KubeApiError(method, path, int(exc.status or 0), str(exc.reason),
                               str(exc.body or "")) from None

    def expire_token(self) -> bool:
        return False  # a kubeconfig's credentials: no token file to read again

    def close(self) -> None:
        self.api.close()


def _lines(resp: Any) -> Iterator[str]:
    """A streamed response's lines (a watch: one JSON event per line)."""
    buffer = bytearray()
    for chunk in resp.stream(amt=None, decode_content=False):
        buffer.extend(chunk)
        while (end := buffer.find(b"\n")) != -1:
            yield buffer[:end].decode("utf-8", errors="replace")
            del buffer[:end + 1]
    if buffer:
        yield buffer.decode("utf-8", errors="replace")


# --- the client ------------------------------------------------------------------------------


def _query(params: Mapping[str, str | int | bool] | None) -> list[tuple[str, str]]:
    return [(k, str(v).lower() if isinstance(v, bool) else str(v))
            for k, v in (params or {}).items()]


class KubeClient:
    """Thread-safe access to one API server; objects are plain JSON dicts."""

    def __init__(self, configuration: Any, timeout_s: float = 30.0) -> None:
        self.configuration = configuration
        self.timeout_s = timeout_s
        self.transport: _PoolTransport | _LibraryTransport = (
            _PoolTransport(configuration) if isinstance(configuration, InClusterConfig)
            else _LibraryTransport(configuration))

    @classmethod
    def connect(cls, kubeconfig: Path | None = None, context: str | None = None,
                sa_dir: Path | None = None) -> KubeClient:
        """Client from `load_configuration` (kubeconfig, in-cluster, default kubeconfig)."""
        return cls(load_configuration(kubeconfig, context, sa_dir))

    @classmethod
    def from_kubeconfig(cls, path: Path | None = None, context: str | None = None,
                        ) -> KubeClient:
        """Client for a kubeconfig file (default: $KUBECONFIG or ~/.kube/config)."""
        return cls(load_configuration(path or default_kubeconfig_path(), context))

    @property
    def server(self) -> str:
        """https URL of the API server."""
        return str(self.configuration.host).rstrip("/")

    def close(self) -> None:
        """Close pooled connections."""
        self.transport.close()

    def __enter__(self) -> KubeClient:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # --- raw requests ---

    def _expire_token(self) -> bool:
        """Make the next request re-read the in-cluster token file; False if there is none."""
        return self.transport.expire_token()

    def _call(self, method: str, path: str, query: list[tuple[str, str]], body: Any,
              content_type: str, timeout: float | tuple[float, float],
              retried: bool = False) -> Any:
        """One request (auth, TLS, pool); the urllib3 response, not read yet. A 401 with
        in-cluster credentials is retried once with the token file read again."""
        try:
            resp = self.transport.send(method, path, query, body, content_type, timeout)
        except (urllib3.exceptions.HTTPError, OSError) as exc:
            raise KubeApiError(method, path, 0, type(exc).__name__, str(exc)) from exc
        if resp.status == 401 and not retried and self._expire_token():
            resp.read()  # return the connection to the pool
            return self._call(method, path, query, body, content_type, timeout, retried=True)
        if resp.status >= 400:
            text = resp.read().decode(errors="replace")
            reason, message = str(resp.reason), text[:2000]
            try:
                status = json.loads(text)
                reason = status.get("reason", reason)
                message = status.get("message", message)
            except (ValueError, AttributeError):
                pass
            raise KubeApiError(method, path, int(resp.status), reason, message)
        return resp

    def request(
        self,
        method: str,
        path: str,
        *,
        params: Mapping[str, str | int | bool] | None = None,
        body: Obj | list[Any] | None = None,
        content_type: str = "application/json",
    ) -> Obj:
        """One request; returns the decoded JSON body or raises KubeApiError."""
        resp = self._call(method, path, _query(params), body, content_type, self.timeout_s)
        data = resp.read()
        if not data:
            return {}
        return cast(Obj, json.loads(data))

    def get(self, path: str, **params: str | int | bool) -> Obj:
        """GET an object or a list."""
        return self.request("GET", path, params=params)

    def get_bytes(self, path: str, timeout_s: float | None = None) -> bytes:
        """GET an endpoint that answers something other than JSON (/metrics, /debug/pprof)."""
        resp = self._call("GET", path, [], None, "application/json", timeout_s or self.timeout_s)
        return bytes(resp.read())

    def get_text(self, path: str) -> str:
        """GET an endpoint that answers text, such as /metrics."""
        return self.get_bytes(path).decode(errors="replace")

    def get_or_none(self, path: str) -> Obj | None:
        """GET, or None on 404."""
        try:
            return self.get(path)
        except KubeApiError as exc:
            if exc.code == 404:
                return None
            raise

    def create(self, path: str, body: Obj, **params: str | int | bool) -> Obj:
        """POST a new object to a collection path."""
        return self.request("POST", path, params=params, body=body)

    def replace(self, path: str, body: Obj) -> Obj:
        """PUT a whole object."""
        return self.request("PUT", path, body=body)

    def patch(self, path: str, body: Obj | list[Any], patch_type: PatchType = "merge",
              **params: str | int | bool) -> Obj:
        """PATCH with merge, strategic-merge, JSON or server-side apply semantics."""
        if patch_type == "apply":
            params.setdefault("fieldManager", FIELD_MANAGER)
            params.setdefault("force", True)
        return self.request("PATCH", path, params=params, body=body,
                            content_type=_PATCH_CONTENT_TYPES[patch_type])

    def delete(self, path: str, body: Obj | None = None, **params: str | int | bool) -> Obj:
        """DELETE (an object, or a collection with a labelSelector)."""
        return self.request("DELETE", path, params=params, body=body)

    def delete_ignore_missing(self, path: str, body: Obj | None = None) -> None:
        """DELETE; a 404 counts as success."""
        try:
            self.delete(path, body)
        except KubeApiError as exc:
            if exc.code != 404:
                raise

    def apply(self, obj: Obj, plural: str) -> Obj:
        """Server-side apply of a full manifest (create or update)."""
        meta = obj["metadata"]
        path = api_path(obj["apiVersion"], plural, meta.get("namespace"), meta["name"])
        return self.patch(path, obj, "apply")

    def readyz(self) -> bool:
        """True if /readyz answers ok."""
        try:
            self._call("GET", "/readyz", [], None, "application/json", 5.0)
        except KubeApiError:
            return False
        return True

    # --- watch ---

    def watch(
        self, path: str, resource_version: str, timeout_s: int = 30,
        params: Mapping[str, str | int | bool] | None = None,
    ) -> Iterator[tuple[str, Obj]]:
        """Stream (type, object) events from one watch call; ends after `timeout_s`."""
        query = [*_query(params), ("watch", "true"), ("resourceVersion", resource_version),
                 ("allowWatchBookmarks", "true"), ("timeoutSeconds", str(timeout_s))]
        try:
            resp = self._call("GET", path, query, None, "application/json",
                              (self.timeout_s, timeout_s + 30.0))
        except KubeApiError as exc:
            if exc.code == 410:
                raise WatchExpired(path) from None
            raise
        try:
            for line in _lines(resp):
                if not line.strip():
                    continue
                event = json.loads(line)
                kind, obj = event.get("type", ""), event.get("object", {})
                if kind == "ERROR":
                    if obj.get("code") == 410:
                        raise WatchExpired(path)
                    raise KubeApiError("WATCH", path, int(obj.get("code", 0)),
                                       str(obj.get("reason", "")), str(obj.get("message", "")))
                yield kind, obj
        except (urllib3.exceptions.HTTPError, OSError) as exc:
            raise KubeApiError("WATCH", path, 0, type(exc).__name__, str(exc)) from exc
        finally:
            resp.release_conn()

    def list_watch(
        self, path: str, stop: threading.Event, **params: str | int | bool
    ) -> Iterator[tuple[str, Obj]]:
        """Informer-style stream: ADDED/MODIFIED/DELETED, relisting after expiry or errors."""
        known: dict[str, Obj] = {}
        while not stop.is_set():
            try:
                listing = self.get(path, **params)
                rv = str(listing["metadata"].get("resourceVersion", ""))
                seen: dict[str, Obj] = {}
                for item in listing.get("items", []):
                    uid = item["metadata"]["uid"]
                    seen[uid] = item
                    yield ("MODIFIED" if uid in known else "ADDED"), item
                for uid, gone in known.items():
                    if uid not in seen:
                        yield "DELETED", gone
                known = seen
                while not stop.is_set():
                    for kind, obj in self.watch(path, rv, params=params):
                        if kind == "BOOKMARK":
                            rv = obj["metadata"]["resourceVersion"]
                            continue
                        rv = obj["metadata"].get("resourceVersion", rv)
                        uid = obj["metadata"]["uid"]
                        if kind == "DELETED":
                            known.pop(uid, None)
                        else:
                            known[uid] = obj
                        yield kind, obj
                        if stop.is_set():
                            return
            except WatchExpired:
                continue
            except (KubeApiError, ValueError, KeyError):
                if stop.wait(1.0):
                    return

    def wait_for(
        self,
        path: str,
        predicate: Callable[[Obj], bool],
        timeout_s: float = 60.0,
        interval_s: float = 0.25,
        what: str = "condition",
    ) -> Obj:
        """Poll GET `path` until `predicate(obj)` holds; TimeoutError names the last state."""
        deadline = time.monotonic() + timeout_s
        last: Obj | None = None
        while True:
            try:
                last = self.get_or_none(path)
            except KubeApiError as exc:
                # A fresh CRD's storage answers 429 "(re)initializing" for a moment.
                if exc.code not in (0, 429, 500, 503):
                    raise
                last = None
            if last is not None and predicate(last):
                return last
            if time.monotonic() > deadline:
                status = json.dumps((last or {}).get("status", "<missing>"))[:1500]
                raise TimeoutError(f"{path}: {what} not reached after {timeout_s:.0f} s; "
                                   f"last status: {status}")
            time.sleep(interval_s)


def now_rfc3339() -> str:
    """metav1.Time for now (second precision, UTC)."""
    return dt.datetime.now(dt.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")


def now_micro() -> str:
    """metav1.MicroTime for now (Leases, Events' eventTime)."""
    return dt.datetime.now(dt.timezone.utc).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def node_ready(node: Obj) -> bool:
    """The Node's Ready condition is True."""
    conditions = node.get("status", {}).get("conditions", []) or []
    return any(c.get("type") == "Ready" and c.get("status") == "True" for c in conditions)


_NOT_READY_TAINTS = frozenset({"node.kubernetes.io/not-ready", "node.kubernetes.io/unreachable"})


def node_schedulable(node: Obj) -> bool:
    """Ready, not cordoned, and without the not-ready/unreachable taints the node lifecycle
    controller leaves on a node it lost."""
    taints = {t.get("key") for t in node.get("spec", {}).get("taints", []) or []}
    cordoned = bool(node.get("spec", {}).get("unschedulable"))
    return node_ready(node) and not cordoned and not taints & _NOT_READY_TAINTS


def wait_for_stop_signal(stop: threading.Event) -> None:
    """Block until SIGTERM or SIGINT (the kubelet stops a pod with SIGTERM) or until `stop` is
    set elsewhere; the main thread's handlers set `stop`, so other threads see it too."""

    def on_signal(_signum: int, _frame: object) -> None:
        stop.set()

    signal.signal(signal.SIGTERM, on_signal)
    signal.signal(signal.SIGINT, on_signal)
    while not stop.wait(1.0):
        pass


__all__ = [
    "ENV_SERVICE_ACCOUNT_DIR",
    "SERVICE_ACCOUNT_DIR",
    "KubeApiError",
    "KubeClient",
    "KubeconfigError",
    "Obj",
    "WatchExpired",
    "api_path",
    "in_cluster",
    "load_configuration",
    "node_ready",
    "node_schedulable",
    "now_micro",
    "now_rfc3339",
    "service_account_dir",
    "wait_for_stop_signal",
]
