{{/* The release's full name, at most 63 characters. */}}
{{- define "capstan.fullname" -}}
{{- if contains .Chart.Name .Release.Name -}}
{{- .Release.Name | trunc 63 | trimSuffix "-" -}}
{{- else -}}
{{- printf "%s-%s" .Release.Name .Chart.Name | trunc 63 | trimSuffix "-" -}}
{{- end -}}
{{- end -}}

{{/* Labels on every object. */}}
{{- define "capstan.labels" -}}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version }}
app.kubernetes.io/part-of: capstan
app.kubernetes.io/managed-by: {{ .Release.Service }}
{{ include "capstan.selectorLabels" . }}
{{- end -}}

{{/* Labels selecting the controller's pods. */}}
{{- define "capstan.selectorLabels" -}}
app.kubernetes.io/name: capstan-controller
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end -}}

{{/* The controller's ServiceAccount. */}}
{{- define "capstan.serviceAccountName" -}}
{{- if .Values.serviceAccount.create -}}
{{- default (include "capstan.fullname" .) .Values.serviceAccount.name -}}
{{- else -}}
{{- required "serviceAccount.name is required when serviceAccount.create is false" .Values.serviceAccount.name -}}
{{- end -}}
{{- end -}}
