#!/bin/bash
# Graft a device twin's sysfs tree into a kind node's /sys, where a Jetson has its files, so
# hostPath volumes (the chart's node agent, the profile and train pods) reach the twin through
# the node's real kubelet and containerd. Runs in the node (ExecStartPre of kubelet.service,
# from 20-edgetrain-twin.conf); the twin itself runs on the host (`edgetrain device sim`) and
# is bind-mounted into the node by kind's extraMounts. Usage: graft-twin.sh TWIN_ROOT
#
# A container's /sys is a sysfs: nothing can be created in it, so kind's extraMounts cannot
# place /sys/devices/gpu.0 there (runc: "mkdir .../sys/devices/gpu.0: operation not
# permitted"). A directory that lacks an entry is first *opened*: bound aside, covered by a
# tmpfs, and each original entry bound back, so the twin's entry can be added beside them
# (the same steps as edgetrain/cluster/nodefs.py). Files are bound, never copied: the twin's
# updates show through. Idempotent: kubelet.service restarts until kubeadm has configured it.
set -euo pipefail

TWIN="${1:?usage: graft-twin.sh TWIN_ROOT}"
DONE=/run/edgetrain-twin.grafted      # /run is the node's own tmpfs: gone when the node stops
STASH=/run/edgetrain-twin.stash
# cAdvisor reads the node's CPUs under /sys/devices/system/cpu (a twin CPU without topology/
# stops it): that part of the twin is left out, as on the namespaced nodes (nsnode.TWIN_SKIP).
SKIP=(/sys/devices/system/cpu)

[[ -e "$DONE" ]] && exit 0
if [[ ! -d "$TWIN/sys" ]]; then
  echo "graft-twin: no twin at $TWIN (no $TWIN/sys): start \`edgetrain device sim --root DIR\`" \
    "on the host before the cluster, and mount DIR at $TWIN (extraMounts)" >&2
  exit 1
fi

declare -A OPENED=()
n=0

is_dir() { [[ -d "$1" && ! -L "$1" ]]; }

bind_entry() {  # src dst: bind src (recursively) at dst, making the mount point first
  if is_dir "$1"; then mkdir -p "$2"; else [[ -e "$2" ]] || : >"$2"; fi
  mount --rbind "$1" "$2"
}

open_dir() {  # target: make it a tmpfs holding binds of its original entries (once)
  local target="$1" stash name src mode
  [[ -n "${OPENED[$target]:-}" ]] && return 0
  n=$((n + 1)); stash="$STASH/$n"
  mkdir -p "$stash"
  mount --rbind "$target" "$stash"
  # The node's mounts are shared (systemd): without this, the tmpfs below would propagate
  # onto the stash too, and the original entries would be lost.
  mount --make-rprivate "$stash"
  mode="$(stat -c %a "$stash")"
  mount -t tmpfs -o "mode=$mode" edgetrain-twin "$target"
  for src in "$stash"/* "$stash"/.[!.]*; do
    [[ -e "$src" || -L "$src" ]] || continue
    name="${src##*/}"
    if [[ -L "$src" ]]; then ln -s "$(readlink "$src")" "$target/$name"
    else bind_entry "$src" "$target/$name"; fi
  done
  OPENED[$target]=1
}

replace() {  # src dst: dst becomes src (a symlink is copied, anything else bound)
  if [[ -e "$2" || -L "$2" ]]; then
    umount -l "$2" 2>/dev/null || true
    if is_dir "$2"; then rmdir "$2"; else rm -f "$2"; fi
  fi
  if [[ -L "$1" ]]; then ln -s "$(readlink "$1")" "$2"; else bind_entry "$1" "$2"; fi
}

graft() {  # target source: merge the tree source into the directory target
  local target="$1" source="$2" src dst s
  for src in "$source"/*; do
    [[ -e "$src" || -L "$src" ]] || continue
    dst="$target/${src##*/}"
    for s in "${SKIP[@]}"; do [[ "$dst" == "$s" ]] && continue 2; done
    if is_dir "$src" && is_dir "$dst"; then graft "$dst" "$src"; continue; fi
    if [[ -f "$src" && ! -L "$src" && -f "$dst" && ! -L "$dst" ]]; then
      mount --bind "$src" "$dst"   # same kind on both sides (a file over a file): in place
      continue
    fi
    open_dir "$target"
    replace "$src" "$dst"
  done
}

graft /sys "$TWIN/sys"
# /etc is the node's own (overlay) root file system: the release file is bound in place.
if [[ -f "$TWIN/etc/nv_tegra_release" ]]; then
  [[ -e /etc/nv_tegra_release ]] || : >/etc/nv_tegra_release
  mount --bind "$TWIN/etc/nv_tegra_release" /etc/nv_tegra_release
fi
: >"$DONE"
echo "graft-twin: $TWIN/sys grafted into /sys ($n directories opened)"
