"""Images for a real node without a registry: the pause image made here from the locally built
pause binary, and the project's images copied from podman's store into containerd's `k8s.io`
namespace under the very tags the chart names (so `IfNotPresent` finds them)."""

from __future__ import annotations

import contextlib
import hashlib
import io
import json
import os
import shutil
import subprocess
import tarfile
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

PAUSE_IMAGE = "localhost/edgetrain/pause:3.10"
PLATFORM = "linux/amd64"
# Where `make images-core` (REGISTRY default) and tests/images (localhost) put the images;
# EDGETRAIN_IMAGE_REGISTRIES (space-separated) looks elsewhere first, e.g. a branch's own build
# (`make images-core REGISTRY=localhost/mine`) beside others' in a shared store.
REGISTRIES = (*os.environ.get("EDGETRAIN_IMAGE_REGISTRIES", "").split(), "ghcr.io/edgetrain",
              "localhost/edgetrain")
CORE_IMAGES = ("operator", "node-agent")
CHART_REGISTRY = "ghcr.io/edgetrain"  # the chart's default: imported images answer to it too


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


def member_digest(listed: dict[str, Any], platform: str) -> str | None:
    """The digest of a manifest list's (`podman manifest inspect`) member for `platform`."""
    os_name, arch = platform.split("/")
    for member in listed.get("manifests", []):
        plat = member.get("platform", {})
        if plat.get("os") == os_name and plat.get("architecture") == arch:
            return str(member["digest"])
    return None


def platform_image_tag(ref: str, platform: str = PLATFORM) -> str | None:
    """A tag of the image a node of `platform` runs for `ref`: `ref` itself, or a tag of its
    manifest list's member for `platform`; None where that member has no tag."""
    if not _is_manifest_list(ref):
        return ref
    digest = member_digest(json.loads(_podman(["podman", "manifest", "inspect", ref])), platform)
    if digest is None:
        raise RuntimeError(f"{ref} lists no {platform} image")
    member = f"{ref.rsplit(':', 1)[0]}@{digest}"
    res = subprocess.run(["podman", "image", "inspect", "--format", "{{json .RepoTags}}", member],
                         capture_output=True, text=True, check=False)
    tags = json.loads(res.stdout or "null") if res.returncode == 0 else None
    return str(tags[0]) if tags else None


def image_arch(ref: str) -> str:
    """The architecture podman records for a plain image ("" if unknown)."""
    res = subprocess.run(["podman", "image", "inspect", "--format", "{{.Architecture}}", ref],
                         capture_output=True, text=True, check=False)
    return res.stdout.strip() if res.returncode == 0 else ""


def platform_member(ref: str, platform: str = PLATFORM) -> str | None:
    """The tag of the plain image a node of `platform` runs for `ref`, or None where the
    member has no tag; an image of another architecture is refused, saying so."""
    tag = platform_image_tag(ref, platform)
    if tag is None:
        return None
    arch = image_arch(tag)
    if arch and arch != platform.split("/")[1]:
        raise RuntimeError(f"{tag} is a {arch} image, not {platform}")
    return tag


def export_platform_archive(ref: str, out: Path, platform: str = PLATFORM) -> tuple[Path, str]:
    """The image a node of `platform` runs for `ref` as an archive, and the name `ctr images
    import` gives it: a docker archive of one image, its layers uncompressed (an OCI archive of
    a whole list gzips every architecture's layers: 15 s of CPU against 3.5 s here); the OCI
    archive where the member has no tag to name it by. A plain image of another architecture
    is refused, saying so."""
    tag = platform_member(ref, platform)
    if tag is None:
        return export_oci_archive(ref, out), ref
    out.unlink(missing_ok=True)
    _podman(["podman", "save", "--quiet", "--format", "docker-archive", "-o", str(out), tag])
    return out, tag


def export_host_archive(ref: str, out: Path) -> tuple[Path, str]:
    """export_platform_archive for this host's platform (the server node's)."""
    return export_platform_archive(ref, out, PLATFORM)


def ctr_import(ctr: Sequence[str], archive: Path | None, name: str,
               aliases: Sequence[str] = (), platform: str = PLATFORM) -> None:
    """Import an archive into containerd's k8s.io namespace (`platform` only) and make sure it
    answers to `name` and each of `aliases`. `ctr`: the command with its --address. With no
    archive, podman's plain image `name` is streamed in through a pipe: for an image of GBs
    that goes to one node, an archive would be a third copy beside containerd's content store
    and its unpacked snapshot (the CPU estimator's three copies ran CI's disk full)."""
    base = [*ctr, "-n", "k8s.io"]
    # Unpacked layers leave the content store (it would hold each image twice: 1.1 GB more
    # per node for the arm64 trainer); nothing pulls them again here.
    cmd = [*base, "images", "import", "--local", "--discard-unpacked-layers",
           "--platform", platform, "-" if archive is None else str(archive)]
    if archive is None:
        save = subprocess.Popen(["podman", "save", "--quiet", "--format", "docker-archive", name],
                                stdout=subprocess.PIPE, stderr=subprocess.PIPE)
        assert save.stdout is not None and save.stderr is not None
        try:
            res = subprocess.run(cmd, stdin=save.stdout, capture_output=True, text=True,
                                 check=False)
        finally:
            save.stdout.close()
            save_err = save.stderr.read().decode(errors="replace")
            save.wait()
        if save.returncode != 0:
            raise RuntimeError(f"podman save {name}: {save_err.strip()[-500:]}")
    else:
        res = subprocess.run(cmd, capture_output=True, text=True, check=False)
    source = f"podman's {name}" if archive is None else str(archive)
    if res.returncode != 0:
        raise RuntimeError(f"ctr images import {source}: {res.stderr.strip()[-500:]}")
    names = subprocess.run([*base, "images", "ls", "-q"], capture_output=True, text=True,
                           check=False).stdout.split()
    if name not in names:
        raise RuntimeError(f"ctr images import {source} did not create {name} (has: {names})")
    for alias in dict.fromkeys(aliases):  # podman's name is often the chart's default too
        if alias != name:
            res = subprocess.run([*base, "images", "tag", "--force", name, alias],
                                 capture_output=True, text=True, check=False)
            if res.returncode != 0:
                raise RuntimeError(f"ctr images tag {name} {alias}: {res.stderr.strip()}")


@dataclass
class ImageExports:
    """Project images copied from podman into nodes' containerd: as an archive made once where
    an image goes to several nodes, streamed where it goes to one (`shared` says which)."""

    work_dir: Path
    tag: str
    shared: frozenset[tuple[str, str]] = frozenset()  # (name, platform) for 2+ nodes
    made: dict[tuple[str, str], tuple[Path | None, str, str] | ImportResult] = field(
        default_factory=dict)

    def archive(self, name: str, platform: str) -> tuple[Path | None, str, str] | ImportResult:
        """(archive, imported name, podman ref), or why there is none. The archive is None
        where the image is to be streamed: the platform's member is a plain, tagged image
        that goes to one node only."""
        key = (name, platform)
        if key not in self.made:
            ref = podman_ref(name, self.tag)
            if ref is None:
                self.made[key] = ImportResult(f"{CHART_REGISTRY}/{name}:{self.tag}", missing=(
                    f"not in podman's store under {' or '.join(REGISTRIES)} "
                    f"(`make images-core` builds it)"))
            else:
                try:
                    self.made[key] = self._stream_or_export(name, ref, platform)
                except RuntimeError as exc:
                    self.made[key] = ImportResult(ref, missing=str(exc))
        return self.made[key]

    def _stream_or_export(self, name: str, ref: str, platform: str,
                          ) -> tuple[Path | None, str, str]:
        tag = None if (name, platform) in self.shared else platform_member(ref, platform)
        if tag is not None:
            return None, tag, ref
        self.work_dir.mkdir(parents=True, exist_ok=True)
        out = self.work_dir / f"{name}.{platform.replace('/', '-')}.image.tar"
        return (*export_platform_archive(ref, out, platform), ref)

    def import_into(self, ctr: Sequence[str], names: Sequence[str], platform: str = PLATFORM,
                    ) -> list[ImportResult]:
        """Import each image into one node's containerd, under podman's own name and the
        chart's default (`<CHART_REGISTRY>/<name>:<tag>`)."""
        results = []
        for name in names:
            got = self.archive(name, platform)
            if isinstance(got, ImportResult):
                results.append(got)
                continue
            archive, imported, ref = got
            ctr_import(ctr, archive, imported, [ref, f"{CHART_REGISTRY}/{name}:{self.tag}"],
                       platform)
            results.append(ImportResult(ref, source=ref))
        return results

    def clean(self) -> None:
        """Remove the archives (and the folder, when it is empty)."""
        for got in self.made.values():
            if not isinstance(got, ImportResult) and got[0] is not None:
                got[0].unlink(missing_ok=True)
        with contextlib.suppress(OSError):
            self.work_dir.rmdir()


def stream_import(ctr: Sequence[str], ref: str, aliases: Sequence[str] = (),
                  platform: str = PLATFORM) -> bool:
    """Pipe podman's image for `platform` straight into one node's containerd (no archive on
    disk: the CPU estimator is 7.6 GB); False where the member has no tag to save it by."""
    tag = platform_image_tag(ref, platform)
    if tag is None:
        return False
    arch = image_arch(tag)
    if arch and arch != platform.split("/")[1]:
        raise RuntimeError(f"{tag} is a {arch} image, not {platform}")
    save = subprocess.Popen(["podman", "save", "--quiet", "--format", "docker-archive", tag],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    try:
        res = subprocess.run([*ctr, "-n", "k8s.io", "images", "import", "--local",
                              "--discard-unpacked-layers", "--platform", platform, "-"],
                             stdin=save.stdout, capture_output=True, text=True, check=False)
    finally:
        assert save.stdout is not None
        save.stdout.close()
        save_err = save.stderr.read().decode(errors="replace") if save.stderr else ""
        save.wait()
    if save.returncode != 0:
        raise RuntimeError(f"podman save {tag}: {save_err.strip()[-500:]}")
    if res.returncode != 0:
        raise RuntimeError(f"ctr images import - ({tag}): {res.stderr.strip()[-500:]}")
    _tag_all(ctr, tag, aliases)
    return True


def _tag_all(ctr: Sequence[str], name: str, aliases: Sequence[str]) -> None:
    base = [*ctr, "-n", "k8s.io"]
    names = subprocess.run([*base, "images", "ls", "-q"], capture_output=True, text=True,
                           check=False).stdout.split()
    if name not in names:
        raise RuntimeError(f"ctr images import did not create {name} (has: {names})")
    for alias in dict.fromkeys(aliases):
        if alias != name:
            res = subprocess.run([*base, "images", "tag", "--force", name, alias],
                                 capture_output=True, text=True, check=False)
            if res.returncode != 0:
                raise RuntimeError(f"ctr images tag {name} {alias}: {res.stderr.strip()}")


def import_project_images(ctr: Sequence[str], work_dir: Path, tag: str,
                          names: Sequence[str] = CORE_IMAGES, platform: str = PLATFORM,
                          ) -> list[ImportResult]:
    """Copy each project image podman holds into one node's containerd: piped where podman
    can save the member (`stream_import`), else through an archive (see ImageExports)."""
    exports = ImageExports(work_dir, tag)
    results = []
    try:
        for name in names:
            # The list, else its member's own tag (`build-images.sh` tags each <tag>-<arch>,
            # and a build in progress replaces the list).
            ref = podman_ref(name, tag) or podman_ref(name, f"{tag}-{platform.split('/')[1]}")
            aliases = [ref or "", f"{CHART_REGISTRY}/{name}:{tag}"]
            try:
                if ref is not None and stream_import(ctr, ref, aliases, platform):
                    results.append(ImportResult(ref, source=ref))
                    continue
            except RuntimeError as exc:
                results.append(ImportResult(ref or name, missing=str(exc)))
                continue
            results += exports.import_into(ctr, [name], platform)
        return results
    finally:
        exports.clean()
