{{/* Labels of every object; the DaemonSet's selector uses only the name. */}}
{{- define "neuron-dra.labels" -}}
app.kubernetes.io/name: neuron-dra
{{- end }}

{{/* The plugin's service account, as the API server names its requests. */}}
{{- define "neuron-dra.serviceAccountUser" -}}
system:serviceaccount:{{ .Values.namespace }}:neuron-dra
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
