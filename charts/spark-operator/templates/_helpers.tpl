{{/* Names. */}}
{{- define "spark-operator.name" -}}
{{- default .Chart.Name .Values.nameOverride | trunc 63 | trimSuffix "-" }}
{{- end }}

{{- define "spark-operator.fullname" -}}
{{- if .Values.fullnameOverride }}
{{- .Values.fullnameOverride | trunc 63 | trimSuffix "-" }}
{{- else }}
{{- $name := default .Chart.Name .Values.nameOverride }}
{{- if contains $name .Release.Name }}
{{- .Release.Name | trunc 63 | trimSuffix "-" }}
{{- else }}
{{- printf "%s-%s" .Release.Name $name | trunc 63 | trimSuffix "-" }}
{{- end }}
{{- end }}
{{- end }}

{{- define "spark-operator.controller.name" -}}{{ include "spark-operator.fullname" . }}-controller{{- end }}
{{- define "spark-operator.agent.name" -}}{{ include "spark-operator.fullname" . }}-agent{{- end }}
{{- define "spark-operator.cleanup.name" -}}{{ include "spark-operator.fullname" . }}-cleanup{{- end }}
{{- define "spark-operator.webhook.name" -}}{{ include "spark-operator.fullname" . }}-webhook{{- end }}
{{- define "spark-operator.reports.name" -}}{{ include "spark-operator.fullname" . }}-reports{{- end }}
{{- define "spark-operator.caSecret" -}}{{ include "spark-operator.fullname" . }}-webhook-ca{{- end }}
{{- define "spark-operator.caConfigMap" -}}{{ include "spark-operator.fullname" . }}-ca{{- end }}
{{- define "spark-operator.leaderLease" -}}{{ include "spark-operator.fullname" . }}-controller-lock{{- end }}

{{- define "spark-operator.controller.serviceAccountName" -}}
{{- default (include "spark-operator.controller.name" .) .Values.controller.serviceAccount.name }}
{{- end }}
{{- define "spark-operator.agent.serviceAccountName" -}}
{{- default (include "spark-operator.agent.name" .) .Values.agent.serviceAccount.name }}
{{- end }}
{{- define "spark-operator.spark.serviceAccountName" -}}
{{- default (printf "%s-spark" (include "spark-operator.fullname" .)) .Values.spark.serviceAccount.name }}
{{- end }}

{{/* The agent's namespace: agent.namespace, default <release namespace>-agent. */}}
{{- define "spark-operator.agent.namespace" -}}
{{- default (printf "%s-agent" .Release.Namespace) .Values.agent.namespace }}
{{- end }}

{{/* Labels. */}}
{{- define "spark-operator.labels" -}}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" }}
app.kubernetes.io/name: {{ include "spark-operator.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
{{- with .Values.commonLabels }}
{{ toYaml . }}
{{- end }}
{{- end }}

{{/* Selector labels of a component: (dict "ctx" $ "component" "operator"). `spark-operator logs` finds the
agents by app.kubernetes.io/name=spark-operator,app.kubernetes.io/component=agent. */}}
{{- define "spark-operator.selectorLabels" -}}
app.kubernetes.io/name: {{ include "spark-operator.name" .ctx }}
app.kubernetes.io/instance: {{ .ctx.Release.Name }}
app.kubernetes.io/component: {{ .component }}
{{- end }}

{{- define "spark-operator.componentLabels" -}}
{{ include "spark-operator.labels" .ctx }}
app.kubernetes.io/component: {{ .component }}
{{- end }}

{{/* The image: [registry/]repository:tag. Kubeflow's default image is replaced by ours. */}}
{{- define "spark-operator.image" -}}
{{- $repository := .Values.image.repository }}
{{- $registry := .Values.image.registry }}
{{- if eq $repository "kubeflow/spark-operator/controller" }}
{{- $repository = "spark-operator/spark-operator" }}
{{- $registry = "" }}
{{- end }}
{{- $tag := default .Chart.AppVersion .Values.image.tag }}
{{- if $registry }}{{ printf "%s/%s:%s" $registry $repository $tag }}{{ else }}{{ printf "%s:%s" $repository $tag }}{{ end }}
{{- end }}

{{- define "spark-operator.imagePullSecrets" -}}
{{- with .Values.image.pullSecrets }}
imagePullSecrets:
{{- toYaml . | nindent 2 }}
{{- end }}
{{- end }}

{{/* Job namespaces: the list of spark.jobNamespaces, or "all" when it is empty or contains "". */}}
{{- define "spark-operator.jobNamespaces.all" -}}
{{- $ns := .Values.spark.jobNamespaces | default list }}
{{- if or (eq (len $ns) 0) (has "" $ns) }}true{{ end }}
{{- end }}

{{/* Whether job-namespace permissions are cluster-wide: all namespaces, or a selector. */}}
{{- define "spark-operator.jobNamespaces.clusterWide" -}}
{{- if or (include "spark-operator.jobNamespaces.all" .) .Values.spark.jobNamespaceSelector }}true{{ end }}
{{- end }}

{{/* The flag value of --namespaces: comma-separated, empty for all. */}}
{{- define "spark-operator.jobNamespaces.flag" -}}
{{- if not (include "spark-operator.jobNamespaces.all" .) }}{{ join "," (uniq .Values.spark.jobNamespaces) }}{{ end }}
{{- end }}

{{/* Seconds from "15s", "1m", "1m30s", "2h" or a number. */}}
{{- define "spark-operator.seconds" -}}
{{- $v := toString . }}
{{- if regexMatch "^[0-9]+$" $v }}{{ $v }}
{{- else if regexMatch "^([0-9]+h)?([0-9]+m)?([0-9]+s)?$" $v }}
{{- $h := regexFind "[0-9]+h" $v | trimSuffix "h" | default "0" | int }}
{{- $m := regexFind "[0-9]+m" $v | trimSuffix "m" | default "0" | int }}
{{- $s := regexFind "[0-9]+s" $v | trimSuffix "s" | default "0" | int }}
{{- add (mul $h 3600) (mul $m 60) $s }}
{{- else }}
{{- fail (printf "%q is not a duration: write it as 15s, 1m30s, 2h or a number of seconds" $v) }}
{{- end }}
{{- end }}

{{/* RUST_LOG from a Kubeflow log level (debug/info/error) or a filter. */}}
{{- define "spark-operator.rustLog" -}}
{{- $level := toString . }}
{{- if eq $level "warning" }}warn{{ else if eq $level "dpanic" }}error{{ else if eq $level "panic" }}error{{ else if eq $level "fatal" }}error{{ else }}{{ $level }}{{ end }}
{{- end }}
