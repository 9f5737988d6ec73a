{{/* The names of the release's objects. */}}
{{- define "lc.fullname" -}}
{{- if .Values.fullnameOverride -}}
{{- .Values.fullnameOverride | trunc 52 | trimSuffix "-" -}}
{{- else -}}
{{- $name := default .Chart.Name .Values.nameOverride -}}
{{- if contains $name .Release.Name -}}
{{- .Release.Name | trunc 52 | trimSuffix "-" -}}
{{- else -}}
{{- printf "%s-%s" .Release.Name $name | trunc 52 | trimSuffix "-" -}}
{{- end -}}
{{- end -}}
{{- end -}}

{{- define "lc.peers" -}}{{ include "lc.fullname" . }}-peers{{- end -}}

{{/* Whether the release is a raft cluster; refuses what lcd would. */}}
{{- define "lc.cluster" -}}
{{- $n := int .Values.replicas -}}
{{- if not (has $n (list 1 3 5 7)) -}}
{{- fail (printf "replicas %d: want 1 (one node) or 3, 5 or 7 (a cluster: an odd number keeps a majority)" $n) -}}
{{- end -}}
{{- if gt $n 1 -}}
{{- if not .Values.persistence.enabled -}}
{{- fail "a cluster needs persistence.enabled: its raft log must outlive the pod" -}}
{{- end -}}
{{- if .Values.tls.sourceFromCert -}}
{{- fail "tls.sourceFromCert is refused in a cluster: a forwarded v1 lock would carry the follower's certificate (docs/ha.md)" -}}
{{- end -}}
true
{{- end -}}
{{- end -}}

{{- define "lc.selectorLabels" -}}
app.kubernetes.io/name: {{ default .Chart.Name .Values.nameOverride }}
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end -}}

{{- define "lc.labels" -}}
{{ include "lc.selectorLabels" . }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
helm.sh/chart: {{ .Chart.Name }}-{{ .Chart.Version }}
{{- end -}}

{{- define "lc.scheme" -}}{{ if .Values.tls.enabled }}HTTPS{{ else }}HTTP{{ end }}{{- end -}}

{{/* The pod template of lcd, for the Deployment and the StatefulSet. */}}
{{- define "lc.pod" -}}
{{- $cluster := include "lc.cluster" . -}}
{{- $full := include "lc.fullname" . -}}
{{- if and .Values.tls.enabled (not .Values.tls.secretName) -}}
{{- fail "tls.enabled needs tls.secretName: a kubernetes.io/tls Secret with tls.crt, tls.key and ca.crt" -}}
{{- end -}}
{{- if and .Values.tls.sourceFromCert (not .Values.tls.clientCASecretName) -}}
{{- fail "tls.sourceFromCert needs tls.clientCASecretName: the name comes from a verified client certificate" -}}
{{- end -}}
{{- if and .Values.tls.clientCASecretName (not .Values.tls.enabled) -}}
{{- fail "tls.clientCASecretName needs tls.enabled" -}}
{{- end -}}
metadata:
  labels:
    {{- include "lc.selectorLabels" . | nindent 4 }}
  {{- if .Values.metrics.podAnnotations }}
  annotations:
    prometheus.io/scrape: "true"
    prometheus.io/port: "22121"
    prometheus.io/path: /metrics
    {{- if .Values.tls.enabled }}
    prometheus.io/scheme: https
    {{- end }}
  {{- end }}
spec:
  # Above the 30 s the metrics endpoint may drain after SIGTERM.
  terminationGracePeriodSeconds: 45
  automountServiceAccountToken: false
  enableServiceLinks: false
  {{- if $cluster }}
  # One node per host where the cluster has the hosts.
  affinity:
    podAntiAffinity:
      preferredDuringSchedulingIgnoredDuringExecution:
        - weight: 100
          podAffinityTerm:
            topologyKey: kubernetes.io/hostname
            labelSelector:
              matchLabels:
                {{- include "lc.selectorLabels" . | nindent 16 }}
  {{- end }}
  {{- with .Values.nodeSelector }}
  nodeSelector:
    {{- toYaml . | nindent 4 }}
  {{- end }}
  {{- with .Values.tolerations }}
  tolerations:
    {{- toYaml . | nindent 4 }}
  {{- end }}
  securityContext:
    runAsNonRoot: true
    runAsUser: 22119
    runAsGroup: 22119
    fsGroup: 22119
    seccompProfile:
      type: RuntimeDefault
  containers:
    - name: locking-center
      image: "{{ .Values.image.repository }}:{{ .Values.image.tag }}"
      imagePullPolicy: {{ .Values.image.pullPolicy }}
      env:
        {{- if $cluster }}
        - name: POD_NAME
          valueFrom:
            fieldRef: { fieldPath: metadata.name }
        - name: POD_NAMESPACE
          valueFrom:
            fieldRef: { fieldPath: metadata.namespace }
        - { name: NODE_ID, value: "$(POD_NAME)" }
        - { name: BIND_ADDRESS, value: ":22119" }
        - { name: RAFT_ADDRESS, value: ":22123" }
        - { name: ADVERTISE_ADDRESS, value: "$(POD_NAME).{{ include "lc.peers" . }}.$(POD_NAMESPACE).svc:22119" }
        - { name: RAFT_DIR, value: /data/raft }
        {{- $peers := list -}}
        {{- range $i := until (int .Values.replicas) }}
        {{- $peers = append $peers (printf "%s-%d=%s-%d.%s:22123" $full $i $full $i (include "lc.peers" $)) -}}
        {{- end }}
        - { name: RAFT_PEERS, value: "{{ join "," $peers }}" }
        {{- else if .Values.persistence.enabled }}
        - { name: DATA_PATH, value: /data/locks.wal }
        {{- end }}
        {{- if .Values.tls.enabled }}
        - { name: TLS_CERT_FILE, value: /etc/locking-center/tls/tls.crt }
        - { name: TLS_KEY_FILE, value: /etc/locking-center/tls/tls.key }
        {{- if $cluster }}
        - { name: TLS_PEER_CA_FILE, value: /etc/locking-center/tls/ca.crt }
        {{- end }}
        {{- if .Values.tls.clientCASecretName }}
        - { name: TLS_CLIENT_CA_FILE, value: /etc/locking-center/client-ca/ca.crt }
        {{- end }}
        {{- if .Values.tls.sourceFromCert }}
        - { name: TLS_SOURCE_FROM_CERT, value: "true" }
        {{- end }}
        {{- end }}
        {{- if .Values.tokens.secretName }}
        - { name: AUTH_TOKENS_FILE, value: /etc/locking-center/tokens/{{ .Values.tokens.key }} }
        {{- end }}
        {{- range $k, $v := .Values.env }}
        - { name: {{ $k }}, value: {{ $v | toString | quote }} }
        {{- end }}
      ports:
        - { name: mutex, containerPort: 22119 }
        - { name: manager, containerPort: 22120 }
        - { name: metrics, containerPort: 22121 }
        - { name: http, containerPort: 22122 }
        {{- if $cluster }}
        - { name: raft, containerPort: 22123 }
        {{- end }}
      {{- if $cluster }}
      # Ready: it leads, or it follows a leader it knows. Alive: it serves
      # HTTP; never restarted for want of a leader.
      readinessProbe:
        httpGet: { path: /readyz, port: metrics, scheme: {{ include "lc.scheme" . }} }
        periodSeconds: 5
        timeoutSeconds: 5
      livenessProbe:
        httpGet: { path: /healthz, port: metrics, scheme: {{ include "lc.scheme" . }} }
        periodSeconds: 10
        timeoutSeconds: 5
        failureThreshold: 6
      {{- else }}
      # /metrics waits on a volume whose syncs hang: a stuck disk fails
      # the liveness probe.
      readinessProbe:
        httpGet: { path: /metrics, port: metrics, scheme: {{ include "lc.scheme" . }} }
        periodSeconds: 5
        timeoutSeconds: 5
      livenessProbe:
        httpGet: { path: /metrics, port: metrics, scheme: {{ include "lc.scheme" . }} }
        periodSeconds: 10
        timeoutSeconds: 5
        failureThreshold: 6
      {{- end }}
      resources:
        {{- if .Values.resources }}
        {{- toYaml .Values.resources | nindent 8 }}
        {{- else if $cluster }}
        requests: { cpu: 100m, memory: 64Mi }
        limits: { memory: 512Mi }
        {{- else }}
        requests: { cpu: 50m, memory: 32Mi }
        limits: { memory: 256Mi }
        {{- end }}
      securityContext:
        allowPrivilegeEscalation: false
        readOnlyRootFilesystem: true
        capabilities:
          drop: [ALL]
      volumeMounts:
        {{- if .Values.persistence.enabled }}
        - { name: data, mountPath: /data }
        {{- end }}
        {{- if .Values.tls.enabled }}
        - { name: tls, mountPath: /etc/locking-center/tls, readOnly: true }
        {{- end }}
        {{- if .Values.tls.clientCASecretName }}
        - { name: client-ca, mountPath: /etc/locking-center/client-ca, readOnly: true }
        {{- end }}
        {{- if .Values.tokens.secretName }}
        - { name: tokens, mountPath: /etc/locking-center/tokens, readOnly: true }
        {{- end }}
  volumes:
    {{- if and .Values.persistence.enabled (not $cluster) }}
    - name: data
      persistentVolumeClaim:
        claimName: {{ $full }}-data
    {{- end }}
    {{- if .Values.tls.enabled }}
    - name: tls
      secret: { secretName: {{ .Values.tls.secretName }}, defaultMode: 0440 }
    {{- end }}
    {{- if .Values.tls.clientCASecretName }}
    - name: client-ca
      secret: { secretName: {{ .Values.tls.clientCASecretName }}, defaultMode: 0440 }
    {{- end }}
    {{- if .Values.tokens.secretName }}
    - name: tokens
      secret: { secretName: {{ .Values.tokens.secretName }}, defaultMode: 0440 }
    {{- end }}
{{- end -}}
