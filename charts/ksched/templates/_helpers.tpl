{{/* The operator's name: its ServiceAccount, Deployment, RBAC objects. */}}
{{- define "ksched.name" -}}
ksched-operator
{{- end }}

{{/* Labels that select the operator's pods. No app.kubernetes.io/instance: rendered schedulers use
it for their profile's name, and a profile named like the release must not select the operator. */}}
{{- define "ksched.selectorLabels" -}}
app.kubernetes.io/name: ksched
app.kubernetes.io/component: operator
{{- end }}

{{- define "ksched.labels" -}}
{{ include "ksched.selectorLabels" . }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
{{- end }}

{{- define "ksched.image" -}}
{{ .Values.image.repository }}:{{ .Values.image.tag | default .Chart.AppVersion }}
{{- end }}

{{/* The annotations of the uninstall hook's objects: Helm deletes them when the hook ends. */}}
{{- define "ksched.uninstallHook" -}}
helm.sh/hook: pre-delete
helm.sh/hook-delete-policy: before-hook-creation,hook-succeeded,hook-failed
{{- end }}

{{/* A Go duration (1m30s, 500ms) in seconds, as a float. */}}
{{- define "ksched.durationSeconds" -}}
{{- $units := dict "ns" 0.000000001 "us" 0.000001 "µs" 0.000001 "ms" 0.001 "s" 1.0 "m" 60.0 "h" 3600.0 -}}
{{- $total := 0.0 -}}
{{- range regexFindAll "[0-9]+(\\.[0-9]+)?(ns|us|µs|ms|s|m|h)" . -1 -}}
{{- $number := regexFind "^[0-9]+(\\.[0-9]+)?" . -}}
{{- $total = addf $total (mulf ($number | float64) (get $units (trimPrefix $number .))) -}}
{{- end -}}
{{- $total -}}
{{- end }}
