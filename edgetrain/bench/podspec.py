"""Pure helpers of the Pod spec the operator benchmark's worker stand-in reads (it plays a pod's
part beside kwok, which runs nothing): $(VAR) expansion and downward-API values. No I/O."""

from __future__ import annotations

import re
from collections.abc import Mapping

from edgetrain.kube import Obj

_VAR_REF = re.compile(r"\$\$|\$\(([A-Za-z_][A-Za-z0-9_.-]*)\)")
_FIELD_KEY = re.compile(r"^metadata\.(labels|annotations)\['(.+)'\]$")


def expand_vars(value: str, env: Mapping[str, str]) -> str:
    """Kubernetes $(VAR) expansion: defined names are substituted, $$ escapes, others stay."""

    def sub(m: re.Match[str]) -> str:
        if m.group(0) == "$$":
            return "$"
        name = m.group(1)
        return env.get(name, m.group(0))

    return _VAR_REF.sub(sub, value)


def field_ref(pod: Obj, path: str, host_ip: str) -> str:
    """Value of a downward-API fieldRef (env or volume item)."""
    meta, spec = pod.get("metadata", {}), pod.get("spec", {})
    simple = {
        "metadata.name": meta.get("name", ""),
        "metadata.namespace": meta.get("namespace", ""),
        "metadata.uid": meta.get("uid", ""),
        "spec.nodeName": spec.get("nodeName", ""),
        "spec.serviceAccountName": spec.get("serviceAccountName", ""),
        "status.hostIP": host_ip,
        "status.hostIPs": host_ip,
        "status.podIP": host_ip,
        "status.podIPs": host_ip,
    }
    if path in simple:
        return str(simple[path])
    if path in ("metadata.labels", "metadata.annotations"):
        return format_map_file(meta.get(path.split(".")[1]) or {})
    m = _FIELD_KEY.match(path)
    if m:
        return str((meta.get(m.group(1)) or {}).get(m.group(2), ""))
    raise ValueError(f"unsupported fieldRef {path!r}")


def format_map_file(values: Mapping[str, str]) -> str:
    """The kubelet's downward-API file format for labels/annotations: key="value" per line."""
    lines = []
    for key in sorted(values):
        escaped = str(values[key]).replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n")
        lines.append(f'{key}="{escaped}"')
    return "\n".join(lines)
