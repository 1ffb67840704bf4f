"""The PowerAwareTrainingJob CustomResourceDefinition, generated from the pydantic models.

`edgetrain crds` (or `make crds`) writes it to `crds/` and `charts/edgetrain/crds/`; a golden test
keeps the committed YAML equal to what this module generates.
"""

from __future__ import annotations

import copy
from typing import Any

import yaml
from pydantic import BaseModel

from edgetrain.api.job import API_VERSION, KIND, PowerAwareTrainingJobSpec
from edgetrain.api.job_status import MAX_STRING, PowerAwareTrainingJobStatus

GROUP, VERSION = API_VERSION.split("/")
PLURAL = "powerawaretrainingjobs"
SINGULAR = "powerawaretrainingjob"
SHORT_NAMES = ["patj"]
CRD_NAME = f"{PLURAL}.{GROUP}"
CRD_FILE = f"{GROUP}_{PLURAL}.yaml"

# Fields that define what is trained and how r was estimated: fixed once the job left Pending.
IMMUTABLE_ONCE_STARTED = (
    "model",
    "dataset",
    "proxyDataset",
    "targetAccuracy",
    "batchSizes",
    "optimizer",
)
_DROP = {"title", "$defs", "additionalProperties", "discriminator"}


def _openapi(node: Any, defs: dict[str, Any]) -> Any:
    """pydantic JSON Schema (draft 2020-12) → Kubernetes structural OpenAPI v3."""
    if isinstance(node, list):
        return [_openapi(n, defs) for n in node]
    if not isinstance(node, dict):
        return node
    if "$ref" in node:
        target = defs[node["$ref"].split("/")[-1]]
        merged = {**target, **{k: v for k, v in node.items() if k != "$ref"}}
        return _openapi(merged, defs)
    if "anyOf" in node:
        options = [o for o in node["anyOf"] if o.get("type") != "null"]
        nullable = len(options) < len(node["anyOf"])
        rest = {k: v for k, v in node.items() if k != "anyOf"}
        if len(options) != 1:
            raise ValueError(f"cannot express anyOf {node['anyOf']} structurally")
        merged = dict(_openapi({**options[0], **rest}, defs))
        if nullable:
            merged["nullable"] = True
            if merged.get("default", 0) is None:
                del merged["default"]
        return merged
    if "patternProperties" in node:
        return _openapi(_map_keys_by_cel(node), defs)
    out: dict[str, Any] = {}
    for key, value in node.items():
        if key in _DROP and not (key == "additionalProperties" and isinstance(value, dict)):
            continue
        if key == "properties":
            out[key] = {name: _openapi(v, defs) for name, v in value.items()}
        elif key in ("items", "additionalProperties"):
            out[key] = _openapi(value, defs)
        elif key == "exclusiveMinimum":
            out["minimum"], out["exclusiveMinimum"] = value, True
        elif key == "exclusiveMaximum":
            out["maximum"], out["exclusiveMaximum"] = value, True
        elif key == "const":
            out["enum"] = [value]
        else:
            out[key] = copy.deepcopy(value)
    if out.get("type") == "string" and "enum" not in out:
        out.setdefault("maxLength", MAX_STRING)
    if "default" in out and out["default"] is None:
        del out["default"]
    return out


def _map_keys_by_cel(node: dict[str, Any]) -> dict[str, Any]:
    """A map with a key pattern: structural schemas have no `patternProperties`, so the value
    schema becomes `additionalProperties` and the key pattern a CEL rule."""
    rest = {k: v for k, v in node.items() if k not in ("patternProperties", "propertyNames")}
    ((pattern, value),) = node["patternProperties"].items()
    longest = int((node.get("propertyNames") or {}).get("maxLength", 317))
    rule = {
        "rule": f"self.all(k, size(k) <= {longest} && k.matches(r'{pattern}'))",
        "message": f"every key must be a label key (at most {longest} characters, {pattern})",
        "reason": "FieldValueInvalid",
    }
    return {**rest, "additionalProperties": value, "x-kubernetes-validations": [rule]}


def model_schema(model: type[BaseModel]) -> dict[str, Any]:
    """One model's structural schema (camelCase, $refs inlined)."""
    raw = model.model_json_schema(by_alias=True, mode="validation")
    return dict(_openapi(raw, raw.get("$defs", {})))


def spec_schema() -> dict[str, Any]:
    """spec: the job model, with list semantics the API server enforces."""
    schema = model_schema(PowerAwareTrainingJobSpec)
    props = schema["properties"]
    # Unique batch sizes: a `set` list rejects duplicates with "Duplicate value".
    props["batchSizes"]["x-kubernetes-list-type"] = "set"
    props["batchSizes"]["maxItems"] = 64
    props["batchSizes"]["default"] = list(
        PowerAwareTrainingJobSpec.model_fields["batch_sizes"].get_default(call_default_factory=True)
    )
    props["gpuFrequenciesHz"]["x-kubernetes-list-type"] = "set"
    props["gpuFrequenciesHz"]["maxItems"] = 128
    budget = props["budget"]["properties"]
    budget["seeds"]["default"] = [0]
    budget["seeds"]["maxItems"] = 16
    props["placement"]["properties"]["nodeSelector"]["default"] = {}
    props["placement"]["properties"]["nodeSelector"]["maxProperties"] = 32
    return schema


def immutability_rule() -> dict[str, str]:
    """CEL at the root: identity fields may not change once status.phase left Pending."""
    same = " && ".join(
        f"((has(self.spec.{f}) == has(oldSelf.spec.{f})) &&"
        f" (!has(self.spec.{f}) || self.spec.{f} == oldSelf.spec.{f}))"
        for f in IMMUTABLE_ONCE_STARTED
    )
    started = (
        "has(oldSelf.status) && has(oldSelf.status.phase) && oldSelf.status.phase != 'Pending'"
    )
    return {
        "rule": f"!({started}) || ({same})",
        "message": (
            "spec." + ", spec.".join(IMMUTABLE_ONCE_STARTED) + " are immutable once the job has"
            " started (status.phase is past Pending); create a new PowerAwareTrainingJob instead"
        ),
        "reason": "FieldValueForbidden",
    }


PRINTER_COLUMNS: list[dict[str, Any]] = [
    {"name": "Phase", "type": "string", "jsonPath": ".status.phase"},
    {"name": "Node", "type": "string", "jsonPath": ".status.selection.node", "priority": 1},
    {"name": "Batch", "type": "integer", "jsonPath": ".status.selection.batchSize"},
    {"name": "GPU MHz", "type": "integer", "jsonPath": ".status.selection.gpuFrequencyMHz"},
    {"name": "Limit W", "type": "number", "jsonPath": ".spec.powerLimitWatts"},
    {
        "name": "Predicted s",
        "type": "number",
        "format": "float",
        "jsonPath": ".status.selection.predictedSeconds",
    },
    {
        "name": "Actual s",
        "type": "number",
        "format": "float",
        "jsonPath": ".status.training.deviceSeconds",
    },
    {"name": "Accuracy", "type": "number", "jsonPath": ".status.training.accuracy", "priority": 1},
    {"name": "Age", "type": "date", "jsonPath": ".metadata.creationTimestamp"},
]


def crd() -> dict[str, Any]:
    """The whole CustomResourceDefinition object."""
    status = model_schema(PowerAwareTrainingJobStatus)
    root = {
        "type": "object",
        "description": "Fine-tune a model on the Jetson node and (batch size, GPU frequency) that"
        " reach the target accuracy fastest under a power limit.",
        "required": ["spec"],
        "properties": {
            "apiVersion": {"type": "string"},
            "kind": {"type": "string"},
            "metadata": {"type": "object"},
            "spec": spec_schema(),
            "status": status,
        },
        "x-kubernetes-validations": [immutability_rule()],
    }
    return {
        "apiVersion": "apiextensions.k8s.io/v1",
        "kind": "CustomResourceDefinition",
        "metadata": {"name": CRD_NAME, "labels": {"app.kubernetes.io/part-of": "edgetrain"}},
        "spec": {
            "group": GROUP,
            "scope": "Namespaced",
            "names": {
                "kind": KIND,
                "listKind": f"{KIND}List",
                "plural": PLURAL,
                "singular": SINGULAR,
                "shortNames": SHORT_NAMES,
                "categories": ["edgetrain"],
            },
            "versions": [
                {
                    "name": VERSION,
                    "served": True,
                    "storage": True,
                    "schema": {"openAPIV3Schema": root},
                    "subresources": {"status": {}},
                    "additionalPrinterColumns": PRINTER_COLUMNS,
                }
            ],
        },
    }


HEADER = "# Generated by `edgetrain crds` from edgetrain/api/{job,job_status}.py; do not edit.\n"


def crd_yaml() -> str:
    """The CRD as committed YAML text."""
    return HEADER + yaml.safe_dump(crd(), sort_keys=False, width=100)
