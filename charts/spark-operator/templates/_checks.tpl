{{/* Refuses keys of Kubeflow's older charts (values.schema.json lets them through so this can name the key to
use). Included by every workload template, so `helm template` refuses them too. */}}
{{- define "spark-operator.checks" -}}
{{- $renamed := dict
  "sparkJobNamespaces" "sparkJobNamespaces was renamed spark.jobNamespaces in chart 2.0; set spark.jobNamespaces instead"
  "sparkJobNamespace" "sparkJobNamespace was replaced by spark.jobNamespaces (a list) in chart 2.0; set spark.jobNamespaces instead"
  "replicaCount" "replicaCount was renamed controller.replicas in chart 2.0; set controller.replicas instead"
  "imagePullSecrets" "imagePullSecrets was renamed image.pullSecrets in chart 2.0; set image.pullSecrets instead"
  "serviceAccounts" "serviceAccounts.sparkoperator and serviceAccounts.spark were renamed controller.serviceAccount and spark.serviceAccount in chart 2.0; set those instead"
  "rbac" "rbac was split into controller.rbac and spark.rbac in chart 2.0; set those instead"
  "controllerThreads" "controllerThreads was renamed controller.workers in chart 2.0; set controller.workers instead"
  "resyncInterval" "resyncInterval was removed in chart 2.0 (the operator resyncs every 300 s; set --resync-period in controller.extraArgs)"
  "logLevel" "logLevel was renamed controller.logLevel in chart 2.0; set controller.logLevel instead"
  "podLabels" "podLabels was renamed controller.labels in chart 2.0; set controller.labels instead"
  "podAnnotations" "podAnnotations was renamed controller.annotations in chart 2.0; set controller.annotations instead"
  "metrics" "metrics was renamed prometheus.metrics in chart 2.0; set prometheus.metrics instead"
  "podMonitor" "podMonitor was renamed prometheus.podMonitor in chart 2.0 (enable is now create); set prometheus.podMonitor instead"
  "leaderElection" "leaderElection was renamed controller.leaderElection in chart 2.0; set controller.leaderElection instead"
  "uiService" "uiService was renamed controller.uiService in chart 2.0; set controller.uiService instead"
  "ingressUrlFormat" "ingressUrlFormat was renamed controller.uiIngress.urlFormat in chart 2.0; set controller.uiIngress.urlFormat instead"
  "batchScheduler" "batchScheduler was renamed controller.batchScheduler in chart 2.0; set controller.batchScheduler instead"
  "resourceQuotaEnforcement" "resourceQuotaEnforcement was renamed webhook.resourceQuotaEnforcement in chart 2.0; set webhook.resourceQuotaEnforcement instead"
  "labelSelectorFilter" "labelSelectorFilter was removed in chart 2.0; use spark.jobNamespaceSelector to pick namespaces"
  "enableWebhook" "enableWebhook was renamed webhook.enable; set webhook.enable instead"
  "enableMetrics" "enableMetrics was renamed prometheus.metrics.enable; set prometheus.metrics.enable instead"
  "metricsPort" "metricsPort was renamed prometheus.metrics.port; set prometheus.metrics.port instead"
  "webhookPort" "webhookPort was renamed webhook.port; set webhook.port instead"
  "nodeSelector" "nodeSelector was renamed controller.nodeSelector in chart 2.0; set controller.nodeSelector (and agent.nodeSelector) instead"
  "tolerations" "tolerations was renamed controller.tolerations in chart 2.0; set controller.tolerations (and agent.tolerations) instead"
  "affinity" "affinity was renamed controller.affinity in chart 2.0; set controller.affinity instead"
  "resources" "resources was renamed controller.resources in chart 2.0; set controller.resources instead"
  "securityContext" "securityContext was renamed controller.securityContext in chart 2.0; set controller.securityContext instead"
  "podSecurityContext" "podSecurityContext was renamed controller.podSecurityContext in chart 2.0; set controller.podSecurityContext instead"
  "priorityClassName" "priorityClassName was renamed controller.priorityClassName in chart 2.0; set controller.priorityClassName instead"
  "istio" "istio was removed in chart 2.0 and is not supported"
  "volumes" "volumes was renamed controller.volumes in chart 2.0; set controller.volumes instead"
  "volumeMounts" "volumeMounts was renamed controller.volumeMounts in chart 2.0; set controller.volumeMounts instead" }}
{{- range $key := keys $renamed | sortAlpha }}
{{- if hasKey $.Values $key }}{{ fail (get $renamed $key) }}{{ end }}
{{- end }}
{{- if hasKey .Values.webhook "timeout" }}
{{- fail "webhook.timeout was renamed webhook.timeoutSeconds in chart 2.0; set webhook.timeoutSeconds instead" }}
{{- end }}
{{- range $key := list "namespaceSelector" "objectSelector" }}
{{- if kindIs "string" (get $.Values.webhook $key) }}
{{- fail (printf "webhook.%s is a label selector map since chart 2.0 (matchLabels/matchExpressions), not a %q string; e.g. webhook.%s: {matchLabels: {key: value}}" $key (get $.Values.webhook $key) $key) }}
{{- end }}
{{- end }}
{{- $precisions := list "nanos" "micros" "millis" "seconds" "minutes" }}
{{- if not (has .Values.controller.scheduledSparkApplicationTimestampPrecision $precisions) }}
{{- fail (printf "controller.scheduledSparkApplicationTimestampPrecision is %q: set nanos, micros, millis, seconds or minutes" .Values.controller.scheduledSparkApplicationTimestampPrecision) }}
{{- end }}
{{- if not (has .Values.webhook.failurePolicy (list "Fail" "Ignore")) }}
{{- fail (printf "webhook.failurePolicy is %q: set Fail or Ignore" .Values.webhook.failurePolicy) }}
{{- end }}
{{- $t := .Values.webhook.timeoutSeconds | int }}
{{- if or (lt $t 1) (gt $t 30) }}
{{- fail (printf "webhook.timeoutSeconds is %d: the API server accepts 1 to 30" $t) }}
{{- end }}
{{- end }}

{{/* The value at a dotted path, as JSON ("null" when absent). */}}
{{- define "spark-operator.valueAt" -}}
{{- $v := .root }}
{{- range splitList "." .path }}
{{- if kindIs "map" $v }}{{ $v = get $v . }}{{ else }}{{ $v = nil }}{{ end }}
{{- end }}
{{- toJson $v }}
{{- end }}

{{/* Warnings, one per line, for Kubeflow keys accepted but not honoured and set away from their defaults
(Kubeflow's or this chart's). */}}
{{- define "spark-operator.warnings" -}}
{{- $root := .Values | toJson | fromJson }}
{{- /* path, what happens, JSON defaults that need no warning */ -}}
{{- $ignored := list
  (list "controller.leaderElection.renewDeadline" "ignored: the leader renews every retryPeriod" (list "\"10s\""))
  (list "controller.kubeAPIQPS" "ignored" (list "20"))
  (list "controller.kubeAPIBurst" "ignored" (list "30"))
  (list "controller.pprof.enable" "ignored (no pprof in this operator)" (list "false"))
  (list "controller.workqueueRateLimiter" "ignored" (list "{\"bucketQPS\":50,\"bucketSize\":500,\"maxDelay\":{\"duration\":\"6h\",\"enable\":true}}"))
  (list "submitter" "reserved for later (the operator submits natively)" (list "{\"initialBackoff\":\"2s\",\"maxRetries\":3,\"requestTimeout\":\"2m\",\"serviceUrl\":\"http://spark-operator-submitter-svc:8080/api/v1/spark-submit\",\"startupProbe\":{\"failureThreshold\":60,\"periodSeconds\":5},\"startupTimeout\":\"5m\"}"))
  (list "webhook.revisionHistoryLimit" "ignored: controller.revisionHistoryLimit applies" (list "10"))
  (list "webhook.leaderElection.enable" "ignored: every replica serves the webhook" (list "true"))
  (list "webhook.kubeAPIQPS" "ignored" (list "20"))
  (list "webhook.kubeAPIBurst" "ignored" (list "30"))
  (list "webhook.resourceQuotaEnforcement.enable" "reserved for later: no ResourceQuota checks at admission" (list "false"))
  (list "webhook.serviceAccount.name" "ignored: the webhook runs as controller.serviceAccount" (list "\"\""))
  (list "webhook.serviceAccount.annotations" "ignored: the webhook runs as controller.serviceAccount" (list "{}"))
  (list "webhook.nodeSelector" "ignored: the webhook runs in the operator pods (controller.nodeSelector)" (list "{}"))
  (list "webhook.affinity" "ignored: the webhook runs in the operator pods (controller.affinity)" (list "{}"))
  (list "webhook.tolerations" "ignored: the webhook runs in the operator pods (controller.tolerations)" (list "[]"))
  (list "webhook.priorityClassName" "ignored: the webhook runs in the operator pods (controller.priorityClassName)" (list "\"\""))
  (list "webhook.topologySpreadConstraints" "ignored: the webhook runs in the operator pods" (list "[]"))
  (list "webhook.resources" "ignored: the webhook runs in the operator pods (controller.resources)" (list "{}"))
  (list "webhook.volumes" "ignored: the webhook keeps its certificate in memory" (list "[]" "[{\"emptyDir\":{\"sizeLimit\":\"500Mi\"},\"name\":\"serving-certs\"}]"))
  (list "webhook.volumeMounts" "ignored" (list "[]" "[{\"mountPath\":\"/etc/k8s-webhook-server/serving-certs\",\"name\":\"serving-certs\",\"readOnly\":false,\"subPath\":\"serving-certs\"}]"))
  (list "prometheus.metrics.endpoint" "ignored: metrics are served at /metrics" (list "\"/metrics\""))
  (list "prometheus.metrics.prefix" "ignored: metric names are fixed" (list "\"\""))
  (list "prometheus.metrics.jobSubmitLatencyBuckets" "ignored" (list "\"0.5,1,2,4,8,16,32,64,128,256\""))
  (list "prometheus.metrics.jobStartLatencyBuckets" "ignored" (list "\"30,60,90,120,150,180,210,240,270,300\""))
  (list "prometheus.metrics.labels" "ignored" (list "\"\""))
  (list "certManager.enable" "reserved for later: the operator makes and rotates its own certificates" (list "false"))
  (list "hook.upgradeCrd" "reserved: upgrade the CRDs with kubectl apply --server-side -f charts/spark-operator/crds/" (list "false"))
  (list "hook.image" "ignored: hook Jobs use image" (list "{\"registry\":\"ghcr.io\",\"repository\":\"kubeflow/spark-operator/kubectl\",\"tag\":\"\"}")) }}
{{- range $entry := $ignored }}
{{- $value := include "spark-operator.valueAt" (dict "root" $root "path" (index $entry 0)) }}
{{- if not (has $value (index $entry 2)) }}
- {{ index $entry 0 }} = {{ $value }}: {{ index $entry 1 }}.
{{- end }}
{{- end }}
{{- range .Values.controller.featureGates }}
{{- if and .enabled (ne .name "DefaultTimeToLive") }}
- controller.featureGates {{ .name }} is enabled: not implemented by this operator, ignored.
{{- end }}
{{- end }}
{{- if ne (toString .Values.webhook.logLevel) (toString .Values.controller.logLevel) }}
- webhook.logLevel = {{ .Values.webhook.logLevel }}: the webhook runs in the operator process, which logs at controller.logLevel = {{ .Values.controller.logLevel }}.
{{- end }}
{{- if ne .Values.webhook.logEncoder .Values.controller.logEncoder }}
- webhook.logEncoder = {{ .Values.webhook.logEncoder }}: the operator process uses controller.logEncoder = {{ .Values.controller.logEncoder }}.
{{- end }}
{{- $ui := .Values.controller.uiIngress }}
{{- if and $ui.enable (not $ui.urlFormat) }}
- controller.uiIngress.enable is true without controller.uiIngress.urlFormat: no Spark UI Ingresses are made (as Kubeflow's chart).
{{- else if and $ui.enable (not .Values.controller.uiService.enable) }}
- controller.uiIngress.enable is true with controller.uiService.enable false: no Spark UI Ingresses are made (they route to the UI Service).
{{- end }}
{{- if eq .Values.image.repository "kubeflow/spark-operator/controller" }}
- image = {{ .Values.image.registry }}/{{ .Values.image.repository }} is Kubeflow's image: this chart runs {{ include "spark-operator.image" . }} instead.
{{- end }}
{{- if and .Values.spark.jobNamespaceSelector (not (include "spark-operator.jobNamespaces.all" .)) }}
- spark.jobNamespaceSelector is set: the operator watches the namespaces it selects; spark.jobNamespaces ({{ join "," .Values.spark.jobNamespaces }}) only get the Spark ServiceAccount and RBAC (label them to have them watched).
{{- end }}
{{- end }}
