#!/usr/bin/env bash
# Lint what the chart renders with kube-score (installed by scripts/install-kube-score.sh),
# offline. Fails on any CRITICAL or WARNING finding: every check the chart does not meet on
# purpose is skipped for that object with a `kube-score/ignore` annotation, and the reason is
# written in values.yaml next to the value concerned (tests/observability/test_chart.py checks
# that each ignored check has one).
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
PY="${PYTHON:-$ROOT/.venv/bin/python}"
HELM="${HELM:-$("$PY" -c 'from edgetrain.cluster import binaries; print(binaries.bin_dir())')/helm}"
KUBE_SCORE="${KUBE_SCORE:-${EDGETRAIN_TOOLS_DIR:-${HOME}/.cache/edgetrain/bin/tools}/kube-score}"
KUBE_VERSION="$("$PY" -c 'from edgetrain.cluster import binaries; print(binaries.K8S_VERSION)')"
[[ -x "$KUBE_SCORE" ]] || { echo "lint-chart: $KUBE_SCORE missing: run make setup" >&2; exit 1; }

# Defaults, and the optional parts (ServiceMonitor, jtop, worker namespaces, narrowed policies).
variants=(
  ""
  "--api-versions monitoring.coreos.com/v1/ServiceMonitor --set agent.jtop.enabled=true --set agent.jtop.gid=998 --set worker.namespaces={ml} --set networkPolicy.apiServer.cidrs={10.0.0.1/32}"
)
status=0
for v in "${variants[@]}"; do
  # shellcheck disable=SC2086  # the variant is a list of words
  out="$("$HELM" template edgetrain "$ROOT/charts/edgetrain" -n edgetrain \
      --kube-version "${KUBE_VERSION#v}" $v \
    | "$KUBE_SCORE" score - --output-format ci --exit-one-on-warning \
        --kubernetes-version "$(echo "$KUBE_VERSION" | cut -d. -f1,2)" \
        --enable-optional-test container-seccomp-profile \
        --enable-optional-test container-ports-check)" && rc=0 || rc=$?
  grep -v '^\[\(OK\|SKIPPED\)\]' <<<"$out" || true
  if [[ $rc -ne 0 ]]; then
    echo "lint-chart: kube-score found unjustified findings (variant: ${v:-defaults})" >&2
    status=1
  fi
done
[[ $status -eq 0 ]] && echo "lint-chart: kube-score clean (findings left are justified in values.yaml)"
exit $status
