"""Every generated CRD file: the job's, the budget's and kopf's peering CRDs (`edgetrain crds`)."""

from __future__ import annotations

from typing import Any

import yaml

from edgetrain.api.budget_crd import BUDGET_CRD_FILE, budget_crd_yaml
from edgetrain.api.crd import CRD_FILE, crd_yaml


def _kopf_peering_crd(kind: str, plural: str, scope: str) -> dict[str, Any]:
    return {
        "apiVersion": "apiextensions.k8s.io/v1",
        "kind": "CustomResourceDefinition",
        "metadata": {"name": f"{plural}.kopf.dev"},
        "spec": {
            "scope": scope,
            "group": "kopf.dev",
            "names": {"kind": kind, "plural": plural, "singular": kind.lower()},
            "versions": [
                {
                    "name": "v1",
                    "served": True,
                    "storage": True,
                    "schema": {
                        "openAPIV3Schema": {
                            "type": "object",
                            "properties": {
                                "status": {
                                    "type": "object",
                                    "x-kubernetes-preserve-unknown-fields": True,
                                }
                            },
                        }
                    },
                }
            ],
        },
    }


PEERING_FILE = "kopf.dev_peerings.yaml"


def crd_files() -> dict[str, str]:
    """Every generated file: the job and budget CRDs, and kopf's peering CRDs."""
    peering = [
        _kopf_peering_crd("ClusterKopfPeering", "clusterkopfpeerings", "Cluster"),
        _kopf_peering_crd("KopfPeering", "kopfpeerings", "Namespaced"),
    ]
    return {
        CRD_FILE: crd_yaml(),
        BUDGET_CRD_FILE: budget_crd_yaml(),
        PEERING_FILE: "# kopf peering CRDs: `edgetrain operator --peering NAME` keeps one active"
        " replica.\n" + yaml.safe_dump_all(peering, sort_keys=False, width=100),
    }
