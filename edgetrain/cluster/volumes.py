"""Pod volumes on a virtual node: each volume is materialised under the pod dir (ConfigMap,
Secret, downward API and projected service-account tokens as files, hostPath into the node's
host root, emptyDir, a claim's NFS export of this host) and linked at its mount path under the
pod root."""

from __future__ import annotations

import base64
import ipaddress
import logging
import os
import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING

from edgetrain.cluster.pki import write_atomic
from edgetrain.cluster.podspec import PathMap, field_ref, resource_field
from edgetrain.kube import KubeApiError, KubeClient, Obj, api_path

if TYPE_CHECKING:
    from edgetrain.cluster.container import Container
    from edgetrain.cluster.nodes import PodHost

log = logging.getLogger("edgetrain.vnode")

TOKEN_REFRESH_FRACTION = 0.8
API_DATA_VOLUMES = frozenset({"configMap", "secret", "downwardAPI", "projected"})
# The volume sources a PersistentVolume may name (named in the error for an unsupported one).
PV_SOURCES = frozenset({"nfs", "hostPath", "local", "csi", "iscsi", "fc", "cephfs", "rbd",
                        "glusterfs", "azureFile", "awsElasticBlockStore", "gcePersistentDisk"})


def _is_this_host(server: str) -> bool:
    if server == "localhost":
        return True
    try:
        return ipaddress.ip_address(server).is_loopback
    except ValueError:
        return False


class PodVolumes:
    """Volume handling of a PodRunner (mixin: the state lives on the runner)."""

    pod: Obj
    node: PodHost
    uid: str
    namespace: str
    pod_name: str
    dir: Path
    root: Path
    inits: list[Container]
    mains: list[Container]
    _tokens: dict[Path, tuple[str | None, int, float]]

    if TYPE_CHECKING:
        @property
        def client(self) -> KubeClient: ...

        def _report(self, phase: str) -> bool: ...

    def _volume_dir(self, name: str) -> Path:
        return self.dir / "volumes" / name

    def _prepare_volumes(self) -> bool:
        """Materialise every volume under the pod dir; False (retry later) if a source is
        missing, as the kubelet keeps the pod in ContainerCreating."""
        self.root.mkdir(parents=True, exist_ok=True)
        try:
            for vol in self.pod["spec"].get("volumes", []):
                self._materialise(vol)
        except (ValueError, KubeApiError) as exc:
            for c in [*self.inits, *self.mains]:
                c.waiting_reason, c.waiting_message = "ContainerCreating", str(exc)
            self._report("Pending")
            return False
        return True

    def _write_items(self, target: Path, data: Mapping[str, bytes], items: Sequence[Obj] | None,
                     ) -> None:
        if items:
            for item in items:
                if item["key"] in data:
                    write_atomic(target / item["path"], data[item["key"]], 0o644)
        else:
            for key, value in data.items():
                write_atomic(target / key, value, 0o644)

    def _source_bytes(self, plural: str, name: str, optional: bool) -> dict[str, bytes]:
        obj = self.client.get_or_none(api_path("v1", plural, self.namespace, name))
        if obj is None:
            if optional:
                return {}
            raise ValueError(f"{plural[:-1]} {self.namespace}/{name} not found")
        out: dict[str, bytes] = {}
        if plural == "secrets":
            out = {k: base64.b64decode(v) for k, v in (obj.get("data") or {}).items()}
        else:
            out = {k: str(v).encode() for k, v in (obj.get("data") or {}).items()}
            out.update({k: base64.b64decode(v) for k, v in (obj.get("binaryData") or {}).items()})
        return out

    def _downward_items(self, target: Path, items: Sequence[Obj]) -> None:
        for item in items:
            if "fieldRef" in item:
                value = field_ref(self.pod, item["fieldRef"]["fieldPath"], self.node.address)
            else:
                ref = item["resourceFieldRef"]
                container = next((c.spec for c in self.mains
                                  if c.name == ref.get("containerName")), {})
                value = resource_field(container, ref["resource"], str(ref.get("divisor", "1")),
                                       self.node.spec.profile.capacity())
            write_atomic(target / item["path"], value.encode(), 0o644)

    def _claim_source(self, claim: Obj) -> Path:
        """The host directory behind a PersistentVolumeClaim: its bound PV's NFS export. Every
        virtual node runs on this host, so an export of this host is storage they all share,
        as an NFS server is to a real fleet. ValueError (the pod waits) while it is unbound."""
        name = claim["claimName"]
        pvc = self.client.get_or_none(
            api_path("v1", "persistentvolumeclaims", self.namespace, name))
        if pvc is None:
            raise ValueError(f"persistentvolumeclaim {self.namespace}/{name} not found")
        pv_name = (pvc.get("spec") or {}).get("volumeName")
        if (pvc.get("status") or {}).get("phase") != "Bound" or not pv_name:
            raise ValueError(f"persistentvolumeclaim {self.namespace}/{name} is not bound")
        pv = self.client.get(api_path("v1", "persistentvolumes", name=pv_name))
        nfs = (pv.get("spec") or {}).get("nfs")
        if not nfs:
            kinds = sorted(set(pv.get("spec") or {}) & PV_SOURCES) or ["none"]
            raise ValueError(
                f"persistentvolume {pv_name} (claim {self.namespace}/{name}) has source"
                f" {'/'.join(kinds)}: a virtual node mounts NFS exports of this host only"
                " (spec.nfs with server 127.0.0.1)")
        if not _is_this_host(str(nfs.get("server", ""))):
            raise ValueError(
                f"persistentvolume {pv_name}: NFS server {nfs.get('server')!r} is not this"
                " host; a virtual node mounts exports of the host it runs on (server"
                " 127.0.0.1)")
        src = Path(nfs["path"])
        if not src.is_dir():
            raise ValueError(f"persistentvolume {pv_name}: export {src} does not exist on"
                             " this host (mount.nfs: No such file or directory)")
        return src

    def _materialise(self, vol: Obj) -> None:
        target = self._volume_dir(vol["name"])
        if "persistentVolumeClaim" in vol:
            src = self._claim_source(vol["persistentVolumeClaim"])
            if not (target.is_symlink() or target.exists()):
                target.parent.mkdir(parents=True, exist_ok=True)
                target.symlink_to(src)
            return
        if "hostPath" in vol:
            # The node's host filesystem is its twin root: /sys here is the twin's sysfs.
            src = self.node.host_root / vol["hostPath"]["path"].lstrip("/")
            kind = vol["hostPath"].get("type", "")
            if kind in ("DirectoryOrCreate", "") and not src.exists():
                src.mkdir(parents=True, exist_ok=True)
            elif kind == "FileOrCreate" and not src.exists():
                src.parent.mkdir(parents=True, exist_ok=True)
                src.touch()
            if target.is_symlink() or target.exists():
                return
            target.parent.mkdir(parents=True, exist_ok=True)
            target.symlink_to(src)
            return
        target.mkdir(parents=True, exist_ok=True)
        if "emptyDir" in vol:
            target.chmod(0o777)  # the kubelet's mode: any UID of the pod may write it
        if "projected" in vol:
            for source in vol["projected"].get("sources", []):
                self._projected(target, source)
        elif "secret" in vol:  # a secret volume names its source `secretName`, a projection `name`
            ref = vol["secret"]
            self._projected(target, {"secret": {**ref, "name": ref["secretName"]}})
        else:
            # configMap and downwardAPI volumes have the shape of a projected source; emptyDir
            # and anything else stay an empty directory owned by the pod.
            self._projected(target, vol)

    def _projected(self, target: Path, source: Obj) -> None:
        if "serviceAccountToken" in source:
            sat = source["serviceAccountToken"]
            audience = sat.get("audience")
            lifetime_s = max(int(sat.get("expirationSeconds", 3600)), 600)
            token = self._service_account_token(audience, lifetime_s)
            self._write_token(target / sat["path"], token)
            # The kubelet renews a token once it is 80 % through its life.
            self._tokens[target / sat["path"]] = (
                audience, lifetime_s, time.monotonic() + TOKEN_REFRESH_FRACTION * lifetime_s)
        elif "configMap" in source:
            ref = source["configMap"]
            data = self._source_bytes("configmaps", ref["name"], ref.get("optional", False))
            self._write_items(target, data, ref.get("items"))
        elif "secret" in source:
            ref = source["secret"]
            data = self._source_bytes("secrets", ref["name"], ref.get("optional", False))
            self._write_items(target, data, ref.get("items"))
        elif "downwardAPI" in source:
            self._downward_items(target, source["downwardAPI"].get("items", []))

    def _refresh_tokens(self) -> None:
        """Renew projected tokens before they expire, as the kubelet does."""
        now = time.monotonic()
        for path, (audience, lifetime_s, due_s) in list(self._tokens.items()):
            if now < due_s:
                continue
            try:
                token = self._service_account_token(audience, lifetime_s)
            except KubeApiError as exc:
                log.warning("pod %s/%s: token refresh failed: %s", self.namespace,
                            self.pod_name, exc)
                self._tokens[path] = (audience, lifetime_s, now + 5.0)
                continue
            self._write_token(path, token)
            self._tokens[path] = (audience, lifetime_s, now + TOKEN_REFRESH_FRACTION * lifetime_s)

    def _write_token(self, path: Path, token: str) -> None:
        """0600, owned by the pod's runAsUser when it sets one, as the kubelet writes it."""
        write_atomic(path, token.encode(), 0o600)
        sc = self.pod["spec"].get("securityContext") or {}
        if sc.get("runAsUser") is not None:
            os.chown(path, int(sc["runAsUser"]), int(sc.get("runAsGroup") or 0))

    def rotate_tokens(self) -> None:
        """Renew every projected token at the next tick, as the kubelet does 80 % into a
        token's life (tests rotate without waiting for that)."""
        self._tokens = {path: (audience, lifetime_s, 0.0)
                        for path, (audience, lifetime_s, _due) in self._tokens.items()}

    def _service_account_token(self, audience: str | None, expiration_s: int) -> str:
        """A bound token for the pod's service account (TokenRequest API, like the kubelet)."""
        sa = self.pod["spec"].get("serviceAccountName", "default")
        body: Obj = {
            "apiVersion": "authentication.k8s.io/v1",
            "kind": "TokenRequest",
            "spec": {
                "audiences": [audience] if audience else [],
                "expirationSeconds": max(expiration_s, 600),
                "boundObjectRef": {"apiVersion": "v1", "kind": "Pod", "name": self.pod_name,
                                   "uid": self.uid},
            },
        }
        path = api_path("v1", "serviceaccounts", self.namespace, sa, "token")
        return str(self.client.create(path, body)["status"]["token"])

    def _mount(self, spec: Obj, paths: PathMap) -> list[tuple[str, bool]]:
        """Link each volumeMount (with subPath) at its translated container path; return
        (resolved host path, read-only) per mount for the container's mount namespace."""
        out: list[tuple[str, bool]] = []
        kinds = {v["name"]: v for v in self.pod["spec"].get("volumes", [])}
        for m in spec.get("volumeMounts", []):
            src = self._volume_dir(m["name"])
            if m.get("subPath"):
                src = src / m["subPath"]
                if not src.exists():
                    src.mkdir(parents=True, exist_ok=True)
            # Like the kubelet, API-data volumes are always read-only, whatever readOnly says.
            kind = kinds.get(m["name"], {})
            read_only = (bool(m.get("readOnly")) or bool(API_DATA_VOLUMES & set(kind))
                         or bool((kind.get("persistentVolumeClaim") or {}).get("readOnly")))
            out.append((os.path.realpath(src), read_only))
            dst = paths.host(m["mountPath"])
            if dst.is_symlink():
                if dst.resolve() == src.resolve():
                    continue
                dst.unlink()
            elif dst.exists():
                continue  # a parent mount already placed something here
            dst.parent.mkdir(parents=True, exist_ok=True)
            dst.symlink_to(src)
        return out
