"""Images for a real node without a registry: the pause image made here from the locally built
pause binary, and the project's images copied from podman's store into containerd's `k8s.io`
namespace under the very tags the chart names (so `IfNotPresent` finds them)."""

from __future__ import annotations

import hashlib
import io
import json
import shutil
import subprocess
import tarfile
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

PAUSE_IMAGE = "localhost/edgetrain/pause:3.10"
PLATFORM = "linux/amd64"
# Where `make images-core` (REGISTRY default) and tests/images (localhost) put the images.
REGISTRIES = ("ghcr.io/edgetrain", "localhost/edgetrain")
CORE_IMAGES = ("operator", "node-agent")


def _blob(blobs: dict[str, bytes], data: bytes, media_type: str) -> dict[str, object]:
    digest = "sha256:" + hashlib.sha256(data).hexdigest()
    blobs[digest] = data
    return {"mediaType": media_type, "digest": digest, "size": len(data)}


def write_pause_archive(pause_binary: Path, out: Path, name: str = PAUSE_IMAGE) -> Path:
    """An OCI image-layout tar holding one layer with /pause, named for `ctr images import`."""
    layer_buf = io.BytesIO()
    with tarfile.open(fileobj=layer_buf, mode="w", format=tarfile.PAX_FORMAT) as layer:
        info = layer.gettarinfo(str(pause_binary), arcname="pause")
        info.uid = info.gid = 0
        info.uname = info.gname = ""
        info.mode = 0o755
        info.mtime = 0
        with pause_binary.open("rb") as f:
            layer.addfile(info, f)
    layer_bytes = layer_buf.getvalue()
    blobs: dict[str, bytes] = {}
    layer_desc = _blob(blobs, layer_bytes, "application/vnd.oci.image.layer.v1.tar")
    config = {
        "architecture": "amd64", "os": "linux",
        "config": {"Entrypoint": ["/pause"], "User": "65535:65535"},
        "rootfs": {"type": "layers", "diff_ids": [layer_desc["digest"]]},
    }
    config_desc = _blob(blobs, json.dumps(config).encode(),
                        "application/vnd.oci.image.config.v1+json")
    manifest = {"schemaVersion": 2, "mediaType": "application/vnd.oci.image.manifest.v1+json",
                "config": config_desc, "layers": [layer_desc]}
    manifest_desc = _blob(blobs, json.dumps(manifest).encode(),
                          "application/vnd.oci.image.manifest.v1+json")
    manifest_desc["annotations"] = {"io.containerd.image.name": name,
                                    "org.opencontainers.image.ref.name": name.rsplit(":", 1)[1]}
    manifest_desc["platform"] = {"architecture": "amd64", "os": "linux"}
    index = {"schemaVersion": 2, "mediaType": "application/vnd.oci.image.index.v1+json",
             "manifests": [manifest_desc]}
    out.parent.mkdir(parents=True, exist_ok=True)
    with tarfile.open(out, "w") as tar:
        def add(path: str, data: bytes) -> None:
            info = tarfile.TarInfo(path)
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))

        add("oci-layout", b'{"imageLayoutVersion":"1.0.0"}')
        add("index.json", json.dumps(index).encode())
        for digest, data in blobs.items():
            add(f"blobs/sha256/{digest.split(':', 1)[1]}", data)
    return out


@dataclass(frozen=True)
class ImportResult:
    """One image: where it came from in podman, or why it was not imported."""

    ref: str
    source: str = ""  # the podman reference it was exported from
    missing: str = ""  # why not imported


def podman_ref(name: str, tag: str, registries: Sequence[str] = REGISTRIES) -> str | None:
    """The first `<registry>/<name>:<tag>` podman holds (an image or a manifest list)."""
    if shutil.which("podman") is None:
        return None
    for registry in registries:
        ref = f"{registry}/{name}:{tag}"
        for cmd in (["manifest", "exists", ref], ["image", "exists", ref]):
            if subprocess.run(["podman", *cmd], capture_output=True, check=False).returncode == 0:
                return ref
    return None


def _is_manifest_list(ref: str) -> bool:
    return subprocess.run(["podman", "manifest", "exists", ref], capture_output=True,
                          check=False).returncode == 0


def export_oci_archive(ref: str, out: Path) -> Path:
    """podman's image (or every member of its manifest list) as an OCI archive named `ref`."""
    out.unlink(missing_ok=True)
    if _is_manifest_list(ref):
        cmd = ["podman", "manifest", "push", "--all", "--quiet", ref, f"oci-archive:{out}:{ref}"]
    else:
        cmd = ["podman", "save", "--quiet", "--format", "oci-archive", "-o", str(out), ref]
    _podman(cmd)
    return out


def _podman(cmd: Sequence[str]) -> str:
    res = subprocess.run(cmd, capture_output=True, text=True, check=False)
    if res.returncode != 0:
        raise RuntimeError(f"{' '.join(cmd)}: {res.stderr.strip()[-500:]}")
    return res.stdout


def host_image_tag(ref: str) -> str | None:
    """A tag of the image a node of this host's platform runs for `ref`: `ref` itself, or a
    tag of its manifest list's member for PLATFORM; None where that member has no tag."""
    if not _is_manifest_list(ref):
        return ref
    os_name, arch = PLATFORM.split("/")
    listed = json.loads(_podman(["podman", "manifest", "inspect", ref]))
    digests = [m["digest"] for m in listed.get("manifests", [])
               if m.get("platform", {}).get("os") == os_name
               and m.get("platform", {}).get("architecture") == arch]
    if not digests:
        raise RuntimeError(f"{ref} lists no {PLATFORM} image")
    member = f"{ref.rsplit(':', 1)[0]}@{digests[0]}"
    res = subprocess.run(["podman", "image", "inspect", "--format", "{{json .RepoTags}}", member],
                         capture_output=True, text=True, check=False)
    tags = json.loads(res.stdout or "null") if res.returncode == 0 else None
    return str(tags[0]) if tags else None


def export_host_archive(ref: str, out: Path) -> tuple[Path, str]:
    """The image this host's platform runs for `ref` as an archive, and the name `ctr images
    import` gives it: a docker archive of one image, its layers uncompressed (an OCI archive of
    a whole list gzips every architecture's layers: 15 s of CPU against 3.5 s here); the OCI
    archive where the member has no tag to name it by."""
    tag = host_image_tag(ref)
    if tag is None:
        return export_oci_archive(ref, out), ref
    out.unlink(missing_ok=True)
    _podman(["podman", "save", "--quiet", "--format", "docker-archive", "-o", str(out), tag])
    return out, tag


def ctr_import(ctr: Path, address: Path, archive: Path, name: str,
               aliases: Sequence[str] = ()) -> None:
    """Import an OCI archive into containerd's k8s.io namespace (this host's platform only)
    and make sure it answers to `name` and each of `aliases`."""
    base = [str(ctr), "--address", str(address), "-n", "k8s.io"]
    res = subprocess.run([*base, "images", "import", "--platform", PLATFORM, str(archive)],
                         capture_output=True, text=True, check=False)
    if res.returncode != 0:
        raise RuntimeError(f"ctr images import {archive}: {res.stderr.strip()[-500:]}")
    names = subprocess.run([*base, "images", "ls", "-q"], capture_output=True, text=True,
                           check=False).stdout.split()
    if name not in names:
        raise RuntimeError(f"ctr images import {archive} did not create {name} (has: {names})")
    for alias in dict.fromkeys(aliases):  # podman's name is often the chart's default too
        if alias != name:
            res = subprocess.run([*base, "images", "tag", "--force", name, alias],
                                 capture_output=True, text=True, check=False)
            if res.returncode != 0:
                raise RuntimeError(f"ctr images tag {name} {alias}: {res.stderr.strip()}")


def import_project_images(ctr: Path, address: Path, work_dir: Path, tag: str,
                          names: Sequence[str] = CORE_IMAGES) -> list[ImportResult]:
    """Copy each project image podman holds into containerd, under podman's own name and the
    chart's default (`<REGISTRIES[0]>/<name>:<tag>`)."""
    results = []
    for name in names:
        ref = podman_ref(name, tag)
        if ref is None:
            results.append(ImportResult(f"{REGISTRIES[0]}/{name}:{tag}", missing=(
                f"not in podman's store under {' or '.join(REGISTRIES)} "
                f"(`make images-core` builds it)")))
            continue
        archive, imported = export_host_archive(ref, work_dir / f"{name}.image.tar")
        try:
            ctr_import(ctr, address, archive, imported, [ref, f"{REGISTRIES[0]}/{name}:{tag}"])
        finally:
            archive.unlink(missing_ok=True)
        results.append(ImportResult(ref, source=ref))
    return results
