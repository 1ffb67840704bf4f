"""Pure helpers that turn a Pod spec into a local process: env, $(VAR) expansion, downward-API
files, path translation and pod phase rules. No I/O against the API server here."""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from edgetrain.kube import Obj

TERMINATION_LOG = "/dev/termination-log"
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


_SUFFIXES = {"m": 1e-3, "k": 1e3, "M": 1e6, "G": 1e9, "T": 1e12, "P": 1e15, "E": 1e18,
             "Ki": 2**10, "Mi": 2**20, "Gi": 2**30, "Ti": 2**40, "Pi": 2**50, "Ei": 2**60}


def parse_quantity(q: str) -> float:
    """A Kubernetes resource quantity as a float ("500m" -> 0.5, "4Gi" -> 4294967296)."""
    m = re.fullmatch(r"([+-]?[0-9.]+(?:[eE][+-]?[0-9]+)?)([a-zA-Z]*)", q.strip())
    if not m or (m.group(2) and m.group(2) not in _SUFFIXES):
        raise ValueError(f"bad quantity {q!r}")
    return float(m.group(1)) * _SUFFIXES.get(m.group(2), 1.0)


def resource_field(container: Obj, resource: str, divisor: str, node_alloc: Mapping[str, str],
                   ) -> str:
    """Value of a resourceFieldRef (limits default to the node's allocatable, like kubelet)."""
    kind, _, name = resource.partition(".")
    res = container.get("resources", {})
    raw = (res.get(kind) or {}).get(name)
    if raw is None and kind == "limits":
        raw = node_alloc.get(name, "0")
    if raw is None:
        raw = "0"
    value = parse_quantity(str(raw)) / parse_quantity(divisor or "1")
    # The kubelet rounds up to an integer in units of the divisor.
    whole = int(value) if value == int(value) else int(value) + 1
    return str(whole)


@dataclass(frozen=True)
class PathMap:
    """Container paths (mounts, workingDir) mapped onto directories under the pod root.

    Processes share the host filesystem, so a manifest's absolute container paths are rewritten
    wherever they appear as a path in command, args and env values.
    """

    root: Path
    mounts: tuple[str, ...]  # container paths, longest first

    @classmethod
    def for_container(cls, root: Path, container: Obj) -> PathMap:
        """Mount paths, working directory and termination-message path of one container."""
        paths = {m["mountPath"].rstrip("/") for m in container.get("volumeMounts", [])}
        paths.add(str(container.get("terminationMessagePath") or TERMINATION_LOG))
        if container.get("workingDir"):
            paths.add(str(container["workingDir"]).rstrip("/"))
        paths.discard("")
        return cls(root, tuple(sorted(paths, key=len, reverse=True)))

    def host(self, container_path: str) -> Path:
        """Where an absolute container path lives on the host."""
        return self.root / container_path.lstrip("/")

    def translate(self, text: str) -> str:
        """Rewrite mount paths occurring as path prefixes in `text` onto the pod root."""
        if not self.mounts:
            return text
        # One pass over all mounts (longest first): a rewritten path that starts with another
        # mount's path (the pod root under /tmp, a /tmp emptyDir) must not be rewritten again.
        pattern = re.compile(r"(?<![\w./-])(" + "|".join(map(re.escape, self.mounts))
                             + r")(?=$|[/\s'\"`:;,)=])")
        return pattern.sub(lambda m: str(self.host(m.group(1))), text)


def resolve_command(
    command: Sequence[str], args: Sequence[str], executables: Mapping[str, Sequence[str]]
) -> list[str]:
    """argv for a container: command + args, mapping known names (edgetrain, python) locally."""
    argv = [*command, *args]
    if not argv:
        raise ValueError(
            "container has neither command nor args: a virtual node runs the container's "
            "command as a local process and cannot run an image entrypoint"
        )
    head = executables.get(argv[0])
    return [*head, *argv[1:]] if head is not None else argv


def exit_reason(exit_code: int) -> str:
    """Reason shown in containerStatuses[].state.terminated."""
    return "Completed" if exit_code == 0 else "Error"


def pod_phase(restart_policy: str, exit_codes: Sequence[int | None], restarting: bool) -> str:
    """Pod phase from main-container exit codes (None = still running or not yet started)."""
    if any(code is None for code in exit_codes) or restarting:
        return "Running"
    if restart_policy == "Always":
        return "Running"
    if all(code == 0 for code in exit_codes):
        return "Succeeded"
    return "Failed"


def should_restart(restart_policy: str, exit_code: int) -> bool:
    """Restart rule of a container that exited."""
    if restart_policy == "Always":
        return True
    return restart_policy == "OnFailure" and exit_code != 0
