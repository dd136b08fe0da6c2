{{- define "flashsale.name" -}}
{{- default .Chart.Name .Values.nameOverride | trunc 63 | trimSuffix "-" -}}
{{- end -}}

{{- define "flashsale.fullname" -}}
{{- if .Values.fullnameOverride -}}
{{- .Values.fullnameOverride | trunc 63 | trimSuffix "-" -}}
{{- else -}}
{{- $name := default .Chart.Name .Values.nameOverride -}}
{{- if contains $name .Release.Name -}}
{{- .Release.Name | trunc 63 | trimSuffix "-" -}}
{{- else -}}
{{- printf "%s-%s" .Release.Name $name | trunc 63 | trimSuffix "-" -}}
{{- end -}}
{{- end -}}
{{- end -}}

{{/* The objects' annotations: commonAnnotations, when set. */}}
{{- define "flashsale.annotations" -}}
{{- with .Values.commonAnnotations }}
annotations:
  {{- toYaml . | nindent 2 }}
{{- end }}
{{- end -}}

{{- define "flashsale.labels" -}}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" }}
app.kubernetes.io/name: {{ include "flashsale.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
{{- with .Values.commonLabels }}
{{ toYaml . }}
{{- end }}
{{- end -}}

{{/* selectorLabels: pass (dict "ctx" $ "role" "gateway") */}}
{{- define "flashsale.selectorLabels" -}}
app.kubernetes.io/name: {{ include "flashsale.name" .ctx }}
app.kubernetes.io/instance: {{ .ctx.Release.Name }}
app.kubernetes.io/component: {{ .role }}
{{- end -}}

{{- define "flashsale.image" -}}
{{- if .Values.image.digest -}}
{{ .Values.image.repository }}@{{ .Values.image.digest }}
{{- else -}}
{{ .Values.image.repository }}:{{ .Values.image.tag | default .Chart.AppVersion }}
{{- end -}}
{{- end -}}

{{- define "flashsale.secretName" -}}
{{- .Values.existingSecret | default (printf "%s-secrets" (include "flashsale.fullname" .)) -}}
{{- end -}}

{{- define "flashsale.serviceAccountName" -}}
{{- if .Values.serviceAccount.create -}}
{{- .Values.serviceAccount.name | default (include "flashsale.fullname" .) -}}
{{- else -}}
{{- .Values.serviceAccount.name | default "default" -}}
{{- end -}}
{{- end -}}

{{/* Pods roll when the configuration or the chart-made secret changes. */}}
{{- define "flashsale.checksums" -}}
checksum/config: {{ include (print $.Template.BasePath "/configmap.yaml") . | sha256sum }}
checksum/secret: {{ include (print $.Template.BasePath "/secret.yaml") . | sha256sum }}
{{- end -}}

{{/* The environment every role's container gets: the ConfigMap, and the
     secrets by reference (never inlined). Pass (dict "ctx" $ "v" <the
     role's values, or the migration's>). A role may read its own secret
     keys and Redis ACL user (least privilege, docs/SECURITY.md). */}}
{{- define "flashsale.env" -}}
{{- $v := .v -}}
- name: FLASHSALE_MYSQL_DSN
  valueFrom:
    secretKeyRef: {name: {{ include "flashsale.secretName" .ctx }}, key: {{ $v.mysqlDSNKey | default "mysql-dsn" }}}
- name: FLASHSALE_REDIS_PASSWORD
  valueFrom:
    secretKeyRef: {name: {{ include "flashsale.secretName" .ctx }}, key: {{ $v.redisPasswordKey | default "redis-password" }}, optional: true}
{{- with $v.redisUsername }}
- {name: FLASHSALE_REDIS_USERNAME, value: {{ . | quote }}}
{{- end }}
{{- if .ctx.Values.config.redisSentinelMaster }}
- name: FLASHSALE_REDIS_SENTINEL_PASSWORD
  valueFrom:
    secretKeyRef: {name: {{ include "flashsale.secretName" .ctx }}, key: redis-sentinel-password, optional: true}
{{- end }}
{{- end -}}

{{- define "flashsale.envFrom" -}}
- configMapRef:
    name: {{ include "flashsale.fullname" . }}-config
{{- end -}}

{{/* Refuse combinations that cannot work. */}}
{{- define "flashsale.validate" -}}
{{- if and .Values.config.redisCluster .Values.config.redisSentinelMaster -}}
{{- fail "config.redisCluster and config.redisSentinelMaster cannot both be set: a cluster has no sentinels" -}}
{{- end -}}
{{- if and .Values.config.redisCluster (ne (int .Values.config.redisDB) 0) -}}
{{- fail "config.redisDB must be 0 with config.redisCluster: a Redis Cluster has one database" -}}
{{- end -}}
{{- if and (ne .Values.config.redisDurability "none") (ge (int .Values.config.redisReplicas) 0) (lt (int .Values.config.redisReplicas) (int .Values.config.redisMinReplicas)) -}}
{{- fail (printf "config.redisDurability=%s needs config.redisMinReplicas (%d) replicas, and config.redisReplicas says each master has %d: every claim would answer 503" .Values.config.redisDurability (int .Values.config.redisMinReplicas) (int .Values.config.redisReplicas)) -}}
{{- end -}}
{{- if and .Values.worker.autoscaling.enabled .Values.worker.keda.enabled -}}
{{- fail "worker.autoscaling (HPA) and worker.keda (ScaledObject) cannot both be enabled: they would fight over the worker Deployment's replicas. Enable one." -}}
{{- end -}}
{{- if and (not .Values.existingSecret) (or (not .Values.secrets.mysqlDSN) (not .Values.secrets.jwtSecret) (not .Values.secrets.adminToken)) -}}
{{- fail "set existingSecret, or secrets.mysqlDSN, secrets.jwtSecret and secrets.adminToken (with --set or --set-file)" -}}
{{- end -}}
{{- if and .Values.secrets.jwtSecret (lt (len .Values.secrets.jwtSecret) 32) -}}
{{- fail "secrets.jwtSecret must be at least 32 bytes" -}}
{{- end -}}
{{- if and .Values.secrets.adminToken (lt (len .Values.secrets.adminToken) 32) -}}
{{- fail "secrets.adminToken must be at least 32 bytes (openssl rand -hex 32)" -}}
{{- end -}}
{{- end -}}

{{/* probes on the ops port: pass (dict "port" N) */}}
{{- define "flashsale.probes" -}}
startupProbe:
  httpGet: {path: /livez, port: ops}
  periodSeconds: 2
  failureThreshold: 30
livenessProbe:
  httpGet: {path: /livez, port: ops}
  periodSeconds: 10
  failureThreshold: 3
readinessProbe:
  httpGet: {path: /readyz, port: ops}
  periodSeconds: 5
  failureThreshold: 2
{{- end -}}

{{/* flashsale.seconds: a Go duration of whole seconds or minutes ("15s", "2m") as seconds */}}
{{- define "flashsale.seconds" -}}
{{- $d := toString . -}}
{{- if hasSuffix "ms" $d -}}1
{{- else if hasSuffix "s" $d -}}{{ trimSuffix "s" $d | int }}
{{- else if hasSuffix "m" $d -}}{{ mul (trimSuffix "m" $d | int) 60 }}
{{- else -}}{{ fail (printf "duration %q: use whole seconds or minutes, e.g. 15s" $d) }}
{{- end -}}
{{- end -}}
