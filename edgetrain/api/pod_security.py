"""What edgetrain's worker pods (estimate, profile, train) run as, and the Pod Security label a
job namespace enforces: one place for the operator's manifests, the virtual nodes that honour
them, the README and the tests."""

from __future__ import annotations

# The namespace label the Pod Security admission reads, and the level edgetrain's pods meet.
LABEL_POD_SECURITY_ENFORCE = "pod-security.kubernetes.io/enforce"
POD_SECURITY_RESTRICTED = "restricted"

# Worker UID and GID: distroless's "nonroot", the same as the operator image's USER.
WORKER_UID = 65532
WORKER_GID = 65532
# A Jetson's GPU device nodes (/dev/nvhost-*, /dev/nvmap) are root:video 0660 in L4T; a
# non-root pod reaches the GPU through this supplemental group (Ubuntu's `video`, GID 44).
# A virtual Jetson's device twin is shared with the same group.
JETSON_DEVICE_GID = 44

# The one writable scratch directory of a read-only root file system (an emptyDir), and the
# per-user caches the workloads' libraries write (torch, matplotlib, XDG) pointed into it.
WORKER_TMP = "/tmp"
WORKER_CACHE_ENV = {
    "XDG_CACHE_HOME": f"{WORKER_TMP}/.cache",
    "MPLCONFIGDIR": f"{WORKER_TMP}/matplotlib",
    "TORCH_HOME": f"{WORKER_TMP}/torch",
}

# The operator's default checkpoint root: storage every candidate node shares, writable by the
# worker UID (a PVC gets there through fsGroup; a virtual node's host directory is prepared).
DEFAULT_CHECKPOINT_DIR = "/var/lib/edgetrain/checkpoints"
