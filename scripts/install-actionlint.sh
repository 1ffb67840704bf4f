#!/usr/bin/env bash
# Install actionlint, the offline checker `make lint` runs on .github/workflows/, with
# `go install` into the cached tools dir beside kube-score. Idempotent: a warm run only checks
# the binary's version.
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
ACTIONLINT_VERSION="v1.7.12"
BIN_DIR="${EDGETRAIN_TOOLS_DIR:-${HOME}/.cache/edgetrain/bin/tools}"
BIN="$BIN_DIR/actionlint"

# Captured, then matched (no `cmd | grep -q` under pipefail: cmd can die of SIGPIPE).
if [[ -x "$BIN" ]] && [[ "$("$BIN" -version 2>/dev/null || true)" == "${ACTIONLINT_VERSION#v}"* ]]; then
  exit 0
fi
GO="$(bash "$ROOT/scripts/build-k8s.sh" --print-go-path)"
echo "install-actionlint: go install github.com/rhysd/actionlint/cmd/actionlint@${ACTIONLINT_VERSION}"
mkdir -p "$BIN_DIR"
GOTOOLCHAIN=local CGO_ENABLED=0 GOBIN="$BIN_DIR" GOFLAGS=-trimpath "$GO" install \
  -ldflags "-s -w -X github.com/rhysd/actionlint.version=${ACTIONLINT_VERSION#v}" \
  "github.com/rhysd/actionlint/cmd/actionlint@${ACTIONLINT_VERSION}"
"$BIN" -version
