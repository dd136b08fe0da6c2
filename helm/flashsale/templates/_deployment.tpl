{{/*
flashsale.deployment renders one role's Deployment.
  ctx:       the root context
  role:      gateway | worker | reaper
  v:         the role's values
  scaled:    true when an HPA or ScaledObject owns the replica count
  grace:     terminationGracePeriodSeconds
  env:       extra role env (a list)
  ports:     extra container ports (a list), besides ops
*/}}
{{- define "flashsale.deployment" -}}
{{- $ := .ctx -}}
{{- $sel := dict "ctx" $ "role" .role -}}
apiVersion: apps/v1
kind: Deployment
metadata:
  name: {{ include "flashsale.fullname" $ }}-{{ .role }}
  {{- include "flashsale.annotations" $ | nindent 2 }}
  labels:
    {{- include "flashsale.labels" $ | nindent 4 }}
    app.kubernetes.io/component: {{ .role }}
spec:
  {{- if not .scaled }}
  replicas: {{ .v.replicaCount }}
  {{- end }}
  revisionHistoryLimit: 5
  selector:
    matchLabels:
      {{- include "flashsale.selectorLabels" $sel | nindent 6 }}
  template:
    metadata:
      labels:
        {{- include "flashsale.labels" $ | nindent 8 }}
        app.kubernetes.io/component: {{ .role }}
      annotations:
        {{- include "flashsale.checksums" $ | nindent 8 }}
        {{- with .v.podAnnotations }}
        {{- toYaml . | nindent 8 }}
        {{- end }}
    spec:
      serviceAccountName: {{ include "flashsale.serviceAccountName" $ }}
      automountServiceAccountToken: false
      terminationGracePeriodSeconds: {{ .grace }}
      securityContext:
        {{- toYaml $.Values.podSecurityContext | nindent 8 }}
      {{- with $.Values.imagePullSecrets }}
      imagePullSecrets:
        {{- toYaml . | nindent 8 }}
      {{- end }}
      {{- with $.Values.priorityClassName }}
      priorityClassName: {{ . }}
      {{- end }}
      {{- if $.Values.migration.enabled }}
      # Every pod migrates before it starts: idempotent, serialised by a
      # MySQL lock, a few reads when nothing is left to apply. No hook Job,
      # so the ConfigMap and Secret are ordinary release objects (rolled
      # back and uninstalled with the release).
      initContainers:
        - name: migrate
          image: {{ include "flashsale.image" $ }}
          imagePullPolicy: {{ $.Values.image.pullPolicy }}
          command: ["/usr/local/bin/worker", "migrate"]
          envFrom:
            {{- include "flashsale.envFrom" $ | nindent 12 }}
          env:
            {{- include "flashsale.env" (dict "ctx" $ "v" .v) | nindent 12 }}
            # A DDL user of its own when the Secret has migrate-dsn.
            - name: FLASHSALE_MIGRATE_DSN
              valueFrom:
                secretKeyRef: {name: {{ include "flashsale.secretName" $ }}, key: migrate-dsn, optional: true}
          resources:
            {{- toYaml $.Values.migration.resources | nindent 12 }}
          securityContext:
            {{- toYaml $.Values.securityContext | nindent 12 }}
      {{- end }}
      containers:
        - name: {{ .role }}
          image: {{ include "flashsale.image" $ }}
          imagePullPolicy: {{ $.Values.image.pullPolicy }}
          command: ["/usr/local/bin/{{ .role }}"]
          ports:
            - {name: ops, containerPort: {{ .v.opsPort }}, protocol: TCP}
            {{- with .ports }}
            {{- toYaml . | nindent 12 }}
            {{- end }}
          envFrom:
            {{- include "flashsale.envFrom" $ | nindent 12 }}
          env:
            {{- include "flashsale.env" (dict "ctx" $ "v" .v) | nindent 12 }}
            - {name: FLASHSALE_OPS_ADDR, value: ":{{ .v.opsPort }}"}
            # The container's memory limit, in bytes: the process keeps its
            # Go heap under 80 % of it (GOMEMLIMIT, set in extraEnv, wins).
            - name: FLASHSALE_MEMORY_LIMIT
              valueFrom:
                resourceFieldRef: {containerName: {{ .role }}, resource: limits.memory}
            - name: FLASHSALE_CONSUMER_NAME
              valueFrom:
                fieldRef: {fieldPath: metadata.name}
            {{- with .env }}
            {{- toYaml . | nindent 12 }}
            {{- end }}
            {{- with .v.extraEnv }}
            {{- toYaml . | nindent 12 }}
            {{- end }}
          {{- include "flashsale.probes" . | nindent 10 }}
          resources:
            {{- toYaml .v.resources | nindent 12 }}
          securityContext:
            {{- toYaml $.Values.securityContext | nindent 12 }}
          {{- with $.Values.extraVolumeMounts }}
          volumeMounts:
            {{- toYaml . | nindent 12 }}
          {{- end }}
      {{- with $.Values.extraVolumes }}
      volumes:
        {{- toYaml . | nindent 8 }}
      {{- end }}
      {{- if $.Values.topologySpread.enabled }}
      topologySpreadConstraints:
        - maxSkew: 1
          topologyKey: {{ $.Values.topologySpread.topologyKey }}
          whenUnsatisfiable: ScheduleAnyway
          labelSelector:
            matchLabels:
              {{- include "flashsale.selectorLabels" $sel | nindent 14 }}
      {{- end }}
      {{- with .v.nodeSelector }}
      nodeSelector:
        {{- toYaml . | nindent 8 }}
      {{- end }}
      {{- with .v.tolerations }}
      tolerations:
        {{- toYaml . | nindent 8 }}
      {{- end }}
      {{- with .v.affinity }}
      affinity:
        {{- toYaml . | nindent 8 }}
      {{- end }}
{{- end -}}

{{/* flashsale.pdb: pass (dict "ctx" $ "role" "gateway" "v" .Values.gateway) */}}
{{- define "flashsale.pdb" -}}
{{- if .v.podDisruptionBudget.enabled }}
apiVersion: policy/v1
kind: PodDisruptionBudget
metadata:
  name: {{ include "flashsale.fullname" .ctx }}-{{ .role }}
  {{- include "flashsale.annotations" .ctx | nindent 2 }}
  labels:
    {{- include "flashsale.labels" .ctx | nindent 4 }}
    app.kubernetes.io/component: {{ .role }}
spec:
  maxUnavailable: {{ .v.podDisruptionBudget.maxUnavailable }}
  selector:
    matchLabels:
      {{- include "flashsale.selectorLabels" (dict "ctx" .ctx "role" .role) | nindent 6 }}
{{- end }}
{{- end -}}

{{/* flashsale.hpa: pass (dict "ctx" $ "role" "gateway" "v" .Values.gateway) */}}
{{- define "flashsale.hpa" -}}
{{- if .v.autoscaling.enabled }}
apiVersion: autoscaling/v2
kind: HorizontalPodAutoscaler
metadata:
  name: {{ include "flashsale.fullname" .ctx }}-{{ .role }}
  {{- include "flashsale.annotations" .ctx | nindent 2 }}
  labels:
    {{- include "flashsale.labels" .ctx | nindent 4 }}
    app.kubernetes.io/component: {{ .role }}
spec:
  scaleTargetRef:
    apiVersion: apps/v1
    kind: Deployment
    name: {{ include "flashsale.fullname" .ctx }}-{{ .role }}
  minReplicas: {{ .v.autoscaling.minReplicas }}
  maxReplicas: {{ .v.autoscaling.maxReplicas }}
  metrics:
    - type: Resource
      resource:
        name: cpu
        target:
          type: Utilization
          averageUtilization: {{ .v.autoscaling.targetCPUUtilizationPercentage }}
{{- end }}
{{- end -}}

{{/* flashsale.metricsService: a Service exposing a role's ops port for scraping */}}
{{- define "flashsale.metricsService" -}}
apiVersion: v1
kind: Service
metadata:
  name: {{ include "flashsale.fullname" .ctx }}-{{ .role }}-metrics
  {{- include "flashsale.annotations" .ctx | nindent 2 }}
  labels:
    {{- include "flashsale.labels" .ctx | nindent 4 }}
    app.kubernetes.io/component: {{ .role }}
    flashsale.io/metrics: "true"
spec:
  type: ClusterIP
  selector:
    {{- include "flashsale.selectorLabels" (dict "ctx" .ctx "role" .role) | nindent 4 }}
  ports:
    - {name: ops, port: {{ .v.opsPort }}, targetPort: ops, protocol: TCP}
{{- end -}}
