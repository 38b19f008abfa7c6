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

{{- /* Monitoring objects' name: <release>-delayq. */ -}}
{{- define "delayq.monitorName" -}}
{{- printf "%s-delayq" .Release.Name | trunc 63 | trimSuffix "-" -}}
{{- end -}}

{{- /* The chart's labels and the extra ones given (list $ extra): extra wins. */ -}}
{{- define "delayq.labelsWith" -}}
{{- $root := index . 0 -}}
{{- toYaml (merge (dict) (index . 1) (include "delayq.labels" $root | fromYaml)) -}}
{{- end -}}

{{- /* Where the shard pods are: the namespaces the operator watches, or any. */ -}}
{{- define "delayq.monitorNamespaces" -}}
{{- if .Values.operator.namespaces -}}
matchNames:
{{- toYaml .Values.operator.namespaces | nindent 2 }}
{{- else -}}
any: true
{{- end -}}
{{- end -}}

{{- /* The labels of what the operator makes for a shard
(operator/delayq_operator/desired.py), with the labels of the dict given. */ -}}
{{- define "delayq.shardSelector" -}}
matchLabels:
  app.kubernetes.io/name: delayq
  app.kubernetes.io/managed-by: delayq-operator
  {{- range $k, $v := . }}
  {{ $k }}: {{ $v }}
  {{- end }}
matchExpressions:
- {key: delayq.io/topic, operator: Exists}
- {key: delayq.io/shard, operator: Exists}
{{- end -}}

{{- /* The target labels every delayq series carries (the dashboard and alert rules
select by them): delaytopic, shard and node from the pod, job "delayq";
the Prometheus Operator adds namespace. */ -}}
{{- define "delayq.relabelings" -}}
- {action: replace, sourceLabels: [__meta_kubernetes_pod_label_delayq_io_topic], targetLabel: delaytopic}
- {action: replace, sourceLabels: [__meta_kubernetes_pod_label_delayq_io_shard], targetLabel: shard}
- {action: replace, sourceLabels: [__meta_kubernetes_pod_name], targetLabel: node}
- {action: replace, targetLabel: job, replacement: delayq}
{{- end -}}
