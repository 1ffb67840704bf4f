{{/* Chart name and fully qualified names. */}}
{{- define "edgetrain.name" -}}
{{- .Chart.Name | trunc 63 | trimSuffix "-" -}}
{{- end -}}

{{- define "edgetrain.fullname" -}}
{{- if contains .Chart.Name .Release.Name -}}
{{- .Release.Name | trunc 63 | trimSuffix "-" -}}
{{- else -}}
{{- printf "%s-%s" .Release.Name .Chart.Name | trunc 63 | trimSuffix "-" -}}
{{- end -}}
{{- end -}}

{{- define "edgetrain.labels" -}}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" }}
app.kubernetes.io/name: {{ include "edgetrain.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
app.kubernetes.io/part-of: edgetrain
{{- end -}}

{{- define "edgetrain.selector" -}}
app.kubernetes.io/name: {{ include "edgetrain.name" .root }}
app.kubernetes.io/instance: {{ .root.Release.Name }}
app.kubernetes.io/component: {{ .component }}
{{- end -}}

{{/* <registry>/<repository>:<tag>; tag falls back to the global tag, then appVersion. */}}
{{- define "edgetrain.image" -}}
{{- $tag := .image.tag | default .root.Values.image.tag | default .root.Chart.AppVersion -}}
{{- if .root.Values.image.registry -}}
{{- printf "%s/%s:%s" .root.Values.image.registry .image.repository $tag -}}
{{- else -}}
{{- printf "%s:%s" .image.repository $tag -}}
{{- end -}}
{{- end -}}

{{- define "edgetrain.operatorServiceAccount" -}}
{{- .Values.serviceAccounts.operator.name | default (printf "%s-operator" (include "edgetrain.fullname" .)) -}}
{{- end -}}

{{- define "edgetrain.agentServiceAccount" -}}
{{- .Values.serviceAccounts.agent.name | default (printf "%s-node-agent" (include "edgetrain.fullname" .)) -}}
{{- end -}}

{{/* k=v,k=v for the operator's selector settings. */}}
{{- define "edgetrain.kv" -}}
{{- $out := list -}}
{{- range $k, $v := . -}}
{{- $out = append $out (printf "%s=%s" $k $v) -}}
{{- end -}}
{{- join "," $out -}}
{{- end -}}

{{/*
Fail when a node selector matches no Node of the cluster (only where the cluster can be read:
`helm template` and --dry-run see no Nodes and skip the check). A selector that matches nothing
would leave a DaemonSet with zero pods and a Deployment Pending, with no error anywhere.
*/}}
{{- define "edgetrain.checkSelector" -}}
{{- $nodes := lookup "v1" "Node" "" "" -}}
{{- if and .root.Values.checkNodeSelectors $nodes .selector -}}
{{- $found := false -}}
{{- range $nodes.items -}}
{{- $labels := .metadata.labels | default dict -}}
{{- $ok := true -}}
{{- range $k, $v := $.selector -}}
{{- if ne (get $labels $k | toString) ($v | toString) -}}{{- $ok = false -}}{{- end -}}
{{- end -}}
{{- if $ok -}}{{- $found = true -}}{{- end -}}
{{- end -}}
{{- if not $found -}}
{{- fail (printf "%s %s matches no Node in this cluster, so nothing would be scheduled: label the nodes it should select (kubectl label node NAME KEY=VALUE) or change %s (checkNodeSelectors=false installs before the nodes join)" .what (toJson .selector) .what) -}}
{{- end -}}
{{- end -}}
{{- end -}}

{{/* The node agent's namespace: its own, so that only it carries the `privileged` level. */}}
{{- define "edgetrain.agentNamespace" -}}
{{- if .Values.agent.namespace.create -}}
{{- .Values.agent.namespace.name | default (printf "%s-node-agent" .Release.Namespace) -}}
{{- else -}}
{{- .Values.agent.namespace.name | default .Release.Namespace -}}
{{- end -}}
{{- end -}}

{{/*
The ServiceAccount token, mounted explicitly (automountServiceAccountToken is off): a bound,
expiring token, the cluster CA and the namespace, at the standard path, in this container only.
*/}}
{{- define "edgetrain.tokenVolume" -}}
- name: sa-token
  projected:
    sources:
      - serviceAccountToken: {path: token, expirationSeconds: 3607}
      - configMap:
          name: kube-root-ca.crt
          items: [{key: ca.crt, path: ca.crt}]
      - downwardAPI:
          items: [{path: namespace, fieldRef: {fieldPath: metadata.namespace}}]
{{- end -}}

{{/* Board name -> a DNS-1123 suffix (jetson-orin-nano -> orin-nano). */}}
{{- define "edgetrain.boardSuffix" -}}
{{- . | trimPrefix "jetson-" | replace "_" "-" | lower | trunc 20 | trimSuffix "-" -}}
{{- end -}}

{{/* NetworkPolicy egress to the API server (networkPolicy.apiServer). */}}
{{- define "edgetrain.apiServerEgress" -}}
- ports:
    {{- range .ports }}
    - {protocol: TCP, port: {{ . }}}
    {{- end }}
  {{- with .cidrs }}
  to:
    {{- range . }}
    - ipBlock: {cidr: {{ . }}}
    {{- end }}
  {{- end }}
{{- end -}}
