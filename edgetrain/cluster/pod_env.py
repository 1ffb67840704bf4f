"""The environment of a container on a virtual node: passed-through agent variables, the
node's own variables, literal values with mount paths translated, downward API fields and
ConfigMap/Secret references."""

from __future__ import annotations

import base64
import os
import sys
from pathlib import Path
from typing import TYPE_CHECKING

from edgetrain.cluster.podspec import PathMap, expand_vars, field_ref, resource_field
from edgetrain.kube import KubeClient, Obj, api_path

if TYPE_CHECKING:
    from edgetrain.cluster.container import Container
    from edgetrain.cluster.nodes import PodHost

# Env passed through from the agent: processes need a PATH and a HOME to work at all, and the
# host's thread policy (OMP_NUM_THREADS) holds for the pods it runs as processes.
PASSTHROUGH_ENV = ("PATH", "HOME", "LANG", "LC_ALL", "TZ", "TMPDIR", "PYTHONPATH", "VIRTUAL_ENV",
                   "OMP_NUM_THREADS")


class PodEnv:
    """Env building of a PodRunner (mixin: the state lives on the runner)."""

    pod: Obj
    node: PodHost
    namespace: str
    pod_name: str
    root: Path
    inits: list[Container]
    mains: list[Container]

    if TYPE_CHECKING:
        @property
        def client(self) -> KubeClient: ...

    def _env(self, spec: Obj) -> dict[str, str]:
        agent = self.node.agent
        env = {k: os.environ[k] for k in PASSTHROUGH_ENV if k in os.environ}
        # Resolve `edgetrain`, `kubectl` and `python` to this installation first.
        env["PATH"] = os.pathsep.join([str(Path(sys.executable).parent), env.get("PATH", "")])
        env.update({
            "HOSTNAME": self.pod_name,
            "PYTHONUNBUFFERED": "1",
            "EDGETRAIN_NODE_NAME": self.node.name,
            "EDGETRAIN_POD_ROOT": str(self.root),
            "EDGETRAIN_SYSFS_ROOT": str(self.node.host_root),
            "KUBERNETES_SERVICE_HOST": agent.api_host,
            "KUBERNETES_SERVICE_PORT": str(agent.api_port),
        })
        pod = self.pod
        paths = PathMap.for_container(self.root, spec)
        if any(m["mountPath"].rstrip("/") == "/tmp" for m in spec.get("volumeMounts", [])):
            # The process shares the host's /tmp: point temp files at the pod's /tmp volume
            # (with a read-only root file system it is the only writable temp directory).
            env["TMPDIR"] = str(paths.host("/tmp"))
        for src in spec.get("envFrom", []):
            prefix = src.get("prefix", "")
            if "configMapRef" in src:
                ref = src["configMapRef"]
                data = self._config_data("configmaps", ref["name"], ref.get("optional", False))
            else:
                ref = src["secretRef"]
                data = self._config_data("secrets", ref["name"], ref.get("optional", False))
            env.update({prefix + k: v for k, v in data.items()})
        for var in spec.get("env", []):
            name = var["name"]
            if "value" in var:
                # A literal value naming a mount path must point at the pod's host copy.
                env[name] = expand_vars(paths.translate(str(var["value"])), env)
                continue
            src = var.get("valueFrom", {})
            if "fieldRef" in src:
                env[name] = field_ref(pod, src["fieldRef"]["fieldPath"], self.node.address)
            elif "resourceFieldRef" in src:
                ref = src["resourceFieldRef"]
                target = next((c for c in [*self.inits, *self.mains]
                               if c.name == ref.get("containerName", spec["name"])), None)
                env[name] = resource_field(target.spec if target else spec, ref["resource"],
                                           str(ref.get("divisor", "1")),
                                           self.node.spec.profile.capacity())
            elif "configMapKeyRef" in src or "secretKeyRef" in src:
                is_cm = "configMapKeyRef" in src
                ref = src["configMapKeyRef" if is_cm else "secretKeyRef"]
                optional = bool(ref.get("optional", False))
                data = self._config_data("configmaps" if is_cm else "secrets", ref["name"],
                                         optional)
                if ref["key"] in data:
                    env[name] = data[ref["key"]]
                elif not optional:
                    raise ValueError(f"key {ref['key']!r} not found in {ref['name']!r}")
        return env

    def _config_data(self, plural: str, name: str, optional: bool) -> dict[str, str]:
        """data of a ConfigMap or Secret (decoded); {} if optional and missing."""
        obj = self.client.get_or_none(api_path("v1", plural, self.namespace, name))
        if obj is None:
            if optional:
                return {}
            raise ValueError(f"{plural[:-1]} {self.namespace}/{name} not found")
        if plural == "secrets":
            return {k: base64.b64decode(v).decode(errors="replace")
                    for k, v in (obj.get("data") or {}).items()}
        out = dict(obj.get("data") or {})
        out.update({k: base64.b64decode(v).decode(errors="replace")
                    for k, v in (obj.get("binaryData") or {}).items()})
        return out
