{{/* The labels every object carries (the Kubernetes and Helm recommended set). */}}
{{- define "neuron-dra.labels" -}}
{{ include "neuron-dra.selectorLabels" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/part-of: neuron-dra
app.kubernetes.io/managed-by: {{ .Release.Service }}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" }}
{{- end }}

{{/* What the DaemonSet and the metrics Service select on: the name alone. A
DaemonSet's selector cannot change after creation, so it holds nothing that an
upgrade, a second release name or the install script would change. */}}
{{- define "neuron-dra.selectorLabels" -}}
app.kubernetes.io/name: neuron-dra
{{- end }}

{{/* The plugin's service account, as the API server names its requests. */}}
{{- define "neuron-dra.serviceAccountUser" -}}
system:serviceaccount:{{ include "neuron-dra.namespace" . }}:{{ include "neuron-dra.serviceAccountName" . }}
{{- end }}

{{/* Names, as charts conventionally take them: the objects are named after the chart
(nameOverride) unless fullnameOverride names them. The release name is not in them,
so an upgrade never renames the DaemonSet; the labels the DaemonSet selects on, and
that the CLI and dashboards find the plugin by, stay app.kubernetes.io/name=neuron-dra. */}}
{{- define "neuron-dra.name" -}}
{{ .Values.nameOverride | default .Chart.Name | trunc 63 | trimSuffix "-" }}
{{- end }}

{{- define "neuron-dra.fullname" -}}
{{- /* 48: room for the longest suffix, "-resourceslices", in 63 */ -}}
{{ .Values.fullnameOverride | default (include "neuron-dra.name" .) | trunc 48 | trimSuffix "-" }}
{{- end }}

{{/* The namespace of the namespaced objects: the release's unless namespaceOverride
(a chart used as a subchart, or applied with `helm template` into another one). Never
`default` unless allowDefaultNamespace: the plugin pods need Pod Security "privileged"
there, which every other pod of the namespace would get too. */}}
{{- define "neuron-dra.namespace" -}}
{{- $namespace := .Values.namespaceOverride | default .Release.Namespace -}}
{{- if and (eq $namespace "default") (not .Values.allowDefaultNamespace) -}}
{{- fail "namespace default is refused: the plugin pods need Pod Security \"privileged\" in their namespace, which every other pod there would get too. Install into a namespace of the driver's own: -n neuron-dra --create-namespace (or set namespaceOverride); allowDefaultNamespace=true installs into default anyway" }}
{{- end -}}
{{ $namespace }}
{{- end }}

{{/* The Secret of an imagePullSecrets entry: a name, or {name: ...} as other charts take it. */}}
{{- define "neuron-dra.pullSecretName" -}}
{{- if kindIs "map" . }}{{ .name }}{{ else }}{{ . }}{{ end }}
{{- end }}

{{/* Never the namespace's `default` account: every pod of the namespace that names no
account runs as it, and would get the plugin's grants. */}}
{{- define "neuron-dra.serviceAccountName" -}}
{{- if eq .Values.serviceAccount.name "default" -}}
{{- fail "serviceAccount.name: default is refused: every pod of the namespace that names no account runs as it and would get the plugin's permissions (ResourceSlices, claim status, Node labels, Events); name an account of the plugin's own" }}
{{- end -}}
{{- if .Values.serviceAccount.create -}}
{{ .Values.serviceAccount.name | default (include "neuron-dra.fullname" .) }}
{{- else -}}
{{ required "serviceAccount.name is required when serviceAccount.create is false: the account the plugin runs as" .Values.serviceAccount.name }}
{{- end -}}
{{- end }}

{{/* The image reference: repository@digest, else repository:tag (default appVersion). */}}
{{- define "neuron-dra.image" -}}
{{- $repository := required "image.repository is required: the registry/repository the plugin image was pushed to, e.g. --set image.repository=123456789012.dkr.ecr.us-west-2.amazonaws.com/neuron-dra" .Values.image.repository -}}
{{- if .Values.image.digest -}}
{{ $repository }}@{{ .Values.image.digest }}
{{- else -}}
{{ $repository }}:{{ .Values.image.tag | default .Chart.AppVersion }}
{{- end -}}
{{- end }}

{{/* The DeviceClass of the `helm test` claim; empty: no test pod (tests.enabled=false, or
the chart's classes left out and tests.deviceClassName not naming one). */}}
{{- define "neuron-dra.testDeviceClass" -}}
{{- if .Values.tests.enabled -}}
{{ .Values.tests.deviceClassName | default (.Values.deviceClasses.enabled | ternary "neuron.aws.com" "") }}
{{- end -}}
{{- end }}
