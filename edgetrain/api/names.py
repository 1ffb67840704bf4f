"""The names a job may use: fixed sets (models, data sets) and patterns for the rest.

Defined here, at the bottom of the import graph, so the CRD (`api/crd.py`) lets the API server
refuse a bad name at `kubectl apply`; `workloads/catalog.py` describes the same names (a test
keeps both equal).
"""

from __future__ import annotations

MODEL_ARCHITECTURES = (
    "resnet18",
    "resnet8",
    "mobilenetv2",
    "mobilenetv2-w025",
    "mobilenetv2-tiny",
    "resnet8-w025",
    "charformer",
    "charformer-small",
)
DATASET_NAMES = (
    "fashion-mnist",
    "mnist",
    "digits",
    "austen-emma",
    "austen-persuasion",
    "austen-sense",
    "austen-pride",
    "austen-mansfield",
    "austen-northanger",
    "austen",
    "moby-dick",
    "sherlock-holmes",
    "tom-sawyer",
    "brown",
)
PROFILING_STRATEGIES = ("frontier", "full", "predicted")

#: A Kubernetes label value (also a node name's label form): ≤ 63 characters.
LABEL_VALUE_PATTERN = r"^(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?$"
LABEL_VALUE_MAX = 63
#: A Kubernetes label key: an optional DNS-subdomain prefix and a name.
LABEL_KEY_PATTERN = (
    r"^([a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*/)?"
    r"[A-Za-z0-9]([-A-Za-z0-9_.]*[A-Za-z0-9])?$"
)
#: A DNS-1123 subdomain (ConfigMap, PVC, ServiceAccount, RuntimeClass names).
DNS_SUBDOMAIN_PATTERN = r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$"
#: A file path or URI given as one argv element: no control characters, and no leading '-' so
#: a command line never reads it as an option.
FILE_PATTERN = r"^[^-\s\x00-\x1f\x7f][^\x00-\x1f\x7f]*$"
#: `placement.device` of a standalone run: 'local' or 'sim:<board>'.
DEVICE_PATTERN = r"^(local|sim:[a-z0-9][-a-z0-9.]*)$"
#: A container image reference: [registry[:port]/]path[:tag][@digest], no spaces.
IMAGE_PATTERN = (
    r"^[A-Za-z0-9][A-Za-z0-9._-]*(:[0-9]+)?(/[A-Za-z0-9._-]+)*"
    r"(:[A-Za-z0-9_][A-Za-z0-9._-]{0,127})?(@[a-z0-9]+:[a-f0-9]{32,})?$"
)
