#!/usr/bin/env bash
# Install kube-score, the chart linter `make lint` runs (scripts/lint-chart.sh), with
# `go install` into the cached bin dir beside helm and kwok. It runs offline once installed.
# Idempotent: a warm run only checks the binary's version.
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
KUBE_SCORE_VERSION="v1.20.0"
BIN_DIR="${EDGETRAIN_TOOLS_DIR:-${HOME}/.cache/edgetrain/bin/tools}"
BIN="$BIN_DIR/kube-score"

# The output is captured, then matched: `cmd | grep -q` under pipefail fails whenever grep exits
# at its first match before cmd has written everything (cmd dies of SIGPIPE).
if [[ -x "$BIN" ]] && [[ "$("$BIN" version 2>/dev/null || true)" == *"${KUBE_SCORE_VERSION#v}"* ]]; then
  exit 0
fi
GO="$(bash "$ROOT/scripts/build-k8s.sh" --print-go-path)"
echo "install-kube-score: go install github.com/zegl/kube-score/cmd/kube-score@${KUBE_SCORE_VERSION}"
mkdir -p "$BIN_DIR"
# The version is stamped as kube-score's release builds do, so the check above can read it.
GOTOOLCHAIN=local CGO_ENABLED=0 GOBIN="$BIN_DIR" GOFLAGS=-trimpath "$GO" install \
  -ldflags "-s -w -X main.version=${KUBE_SCORE_VERSION#v}" \
  "github.com/zegl/kube-score/cmd/kube-score@${KUBE_SCORE_VERSION}"
"$BIN" version
