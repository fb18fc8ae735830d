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
system:serviceaccount:{{ .Release.Namespace }}:neuron-dra
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
