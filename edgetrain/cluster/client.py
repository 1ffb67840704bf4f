"""A small typed Kubernetes REST client (httpx): CRUD, patch, list+watch, on plain dicts."""

from __future__ import annotations

import json
import os
import shutil
import ssl
import tempfile
import threading
import time
from collections.abc import Callable, Iterator, Mapping
from pathlib import Path
from typing import Any, Literal, cast

import httpx

from edgetrain.cluster.kubeconfig import KubeConfig, load_kubeconfig

Obj = dict[str, Any]
PatchType = Literal["merge", "strategic", "json", "apply"]
_PATCH_CONTENT_TYPES: dict[str, str] = {
    "merge": "application/merge-patch+json",
    "strategic": "application/strategic-merge-patch+json",
    "json": "application/json-patch+json",
    "apply": "application/apply-patch+yaml",
}
FIELD_MANAGER = "edgetrain"


class KubeApiError(RuntimeError):
    """The API server answered with an error Status."""

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


def _ssl_context(cfg: KubeConfig) -> ssl.SSLContext | bool:
    if cfg.insecure_skip_tls_verify:
        ctx = ssl.create_default_context()
        ctx.check_hostname = False
        ctx.verify_mode = ssl.CERT_NONE
    elif cfg.ca_pem is not None:
        ctx = ssl.create_default_context(cadata=cfg.ca_pem.decode())
    else:
        ctx = ssl.create_default_context()
    if cfg.client_cert_pem is not None and cfg.client_key_pem is not None:
        # load_cert_chain only reads files: stage them in a private dir, drop them once loaded.
        tmp = Path(tempfile.mkdtemp(prefix="edgetrain-kc-"))
        try:
            crt, key = tmp / "c.crt", tmp / "c.key"
            fd = os.open(key, os.O_WRONLY | os.O_CREAT, 0o600)
            with os.fdopen(fd, "wb") as f:
                f.write(cfg.client_key_pem)
            crt.write_bytes(cfg.client_cert_pem)
            ctx.load_cert_chain(crt, key)
        finally:
            shutil.rmtree(tmp, ignore_errors=True)
    return ctx


class KubeClient:
    """Thread-safe client for one API server; objects are plain JSON dicts."""

    def __init__(self, config: KubeConfig, timeout_s: float = 30.0) -> None:
        self.config = config
        self.timeout_s = timeout_s
        headers = {"User-Agent": "edgetrain/cluster"}
        if config.token:
            headers["Authorization"] = f"Bearer {config.token}"
        self._verify = _ssl_context(config)
        self._headers = headers
        self._http = httpx.Client(
            base_url=config.server,
            verify=self._verify,
            headers=headers,
            timeout=timeout_s,
            limits=httpx.Limits(max_connections=64, max_keepalive_connections=16),
        )

    @classmethod
    def from_kubeconfig(cls, path: Path | None = None, context: str | None = None) -> KubeClient:
        """Client for a kubeconfig file (default: $KUBECONFIG or ~/.kube/config)."""
        return cls(load_kubeconfig(path, context))

    def close(self) -> None:
        """Close pooled connections."""
        self._http.close()

    def __enter__(self) -> KubeClient:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # --- raw requests ---

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
        clean = {k: (str(v).lower() if isinstance(v, bool) else str(v))
                 for k, v in (params or {}).items()}
        content = None if body is None else json.dumps(body).encode()
        headers = {"Content-Type": content_type} if content is not None else {}
        try:
            resp = self._http.request(method, path, params=clean, content=content,
                                      headers=headers)
        except httpx.HTTPError as exc:
            raise KubeApiError(method, path, 0, type(exc).__name__, str(exc)) from exc
        if resp.status_code >= 400:
            reason, message = resp.reason_phrase, resp.text[:2000]
            try:
                status = resp.json()
                reason = status.get("reason", reason)
                message = status.get("message", message)
            except ValueError:
                pass
            raise KubeApiError(method, path, resp.status_code, reason, message)
        if not resp.content:
            return {}
        return cast(Obj, resp.json())

    def get(self, path: str, **params: str | int | bool) -> Obj:
        """GET an object or a list."""
        return self.request("GET", path, params=params)

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

    # --- health ---

    def readyz(self) -> bool:
        """True if /readyz answers ok."""
        try:
            resp = self._http.get("/readyz", timeout=5.0)
        except httpx.HTTPError:
            return False
        return resp.status_code == 200

    # --- watch ---

    def watch(
        self, path: str, resource_version: str, timeout_s: int = 30,
        params: Mapping[str, str | int | bool] | None = None,
    ) -> Iterator[tuple[str, Obj]]:
        """Stream (type, object) events from one watch call; ends after `timeout_s`."""
        query = {k: (str(v).lower() if isinstance(v, bool) else str(v))
                 for k, v in (params or {}).items()}
        query.update(watch="true", resourceVersion=resource_version,
                     allowWatchBookmarks="true", timeoutSeconds=str(timeout_s))
        timeout = httpx.Timeout(self.timeout_s, read=timeout_s + 30.0)
        with self._http.stream("GET", path, params=query, timeout=timeout) as resp:
            if resp.status_code == 410:
                raise WatchExpired(path)
            if resp.status_code >= 400:
                resp.read()
                raise KubeApiError("WATCH", path, resp.status_code, resp.reason_phrase,
                                   resp.text[:2000])
            for line in resp.iter_lines():
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
            except (KubeApiError, httpx.HTTPError, ValueError, KeyError):
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
                if exc.code not in (429, 500, 503):
                    raise
                last = None
            if last is not None and predicate(last):
                return last
            if time.monotonic() > deadline:
                status = json.dumps((last or {}).get("status", "<missing>"))[:1500]
                raise TimeoutError(f"{path}: {what} not reached after {timeout_s:.0f} s; "
                                   f"last status: {status}")
            time.sleep(interval_s)
