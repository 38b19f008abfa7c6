{{- define "delayq.fullname" -}}
{{- printf "%s-delayq-operator" .Release.Name | trunc 63 | trimSuffix "-" -}}
{{- end -}}

{{- define "delayq.serviceAccountName" -}}
{{- default (include "delayq.fullname" .) .Values.serviceAccount.name -}}
{{- end -}}

{{- define "delayq.image" -}}
{{- printf "%s:%s" .Values.image.repository (default .Chart.AppVersion .Values.image.tag) -}}
{{- end -}}

{{- define "delayq.labels" -}}
app.kubernetes.io/name: delayq-operator
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version }}
{{- end -}}

{{- define "delayq.selector" -}}
app.kubernetes.io/name: delayq-operator
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end -}}

{{- /* The selector labels as k=v,k2=v2 (the operator's --pod-labels). */ -}}
{{- define "delayq.selectorList" -}}
{{- $pairs := list -}}
{{- range $k, $v := (include "delayq.selector" . | fromYaml) -}}
{{- $pairs = append $pairs (printf "%s=%s" $k $v) -}}
{{- end -}}
{{- join "," $pairs -}}
{{- end -}}
