{{- define "node-csr-approver.name" -}}
{{- default .Chart.Name .Values.nameOverride | trunc 63 | trimSuffix "-" }}
{{- end }}

{{- define "node-csr-approver.fullname" -}}
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

{{- define "node-csr-approver.namespace" -}}
{{- default .Release.Namespace .Values.namespace }}
{{- end }}

{{- define "node-csr-approver.selectorLabels" -}}
app.kubernetes.io/name: {{ include "node-csr-approver.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end }}

{{- define "node-csr-approver.labels" -}}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" | trunc 63 | trimSuffix "-" }}
{{ include "node-csr-approver.selectorLabels" . }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
{{- end }}

{{- define "node-csr-approver.serviceAccountName" -}}
{{- if .Values.serviceAccount.create }}
{{- default (include "node-csr-approver.fullname" .) .Values.serviceAccount.name }}
{{- else }}
{{- default "default" .Values.serviceAccount.name }}
{{- end }}
{{- end }}

{{/* The RBAC subject: the controller's ServiceAccount. */}}
{{- define "node-csr-approver.subjects" -}}
subjects:
  - kind: ServiceAccount
    name: {{ include "node-csr-approver.serviceAccountName" . }}
    namespace: {{ include "node-csr-approver.namespace" . }}
{{- end }}

{{/* The controller's configuration as environment variables; unset values are left out. */}}
{{/* "true" when a rule mentions the word node (read from the text: conservative, so a rule with
node in a string literal counts too): the controller then reads Nodes. */}}
{{- define "node-csr-approver.rulesReadNode" -}}
{{- range .Values.rules }}{{- if regexMatch "\\bnode\\b" .expression }}true{{- end }}{{- end }}
{{- end }}

{{- define "node-csr-approver.env" -}}
- name: POD_NAME
  valueFrom:
    fieldRef:
      fieldPath: metadata.name
- name: POD_NAMESPACE
  valueFrom:
    fieldRef:
      fieldPath: metadata.namespace
- name: PROVIDER_REGEX
  value: {{ .Values.providerRegex | toJson }}
{{- with .Values.providerIpPrefixes }}
- name: PROVIDER_IP_PREFIXES
  value: {{ join "," . | quote }}
{{- end }}
{{- $optional := list
  (list "MAX_EXPIRATION_SEC" .Values.maxExpirationSeconds)
  (list "ALLOWED_DNS_NAMES" .Values.allowedDnsNames)
  (list "ALLOWED_IP_ADDRESSES" .Values.allowedIpAddresses)
  (list "HOSTNAME_MATCH" .Values.hostnameMatch)
  (list "DNS_TIMEOUT" .Values.dnsTimeout)
  (list "DNS_GRACE_PERIOD" .Values.dnsGracePeriod)
  (list "CLUSTER_DOMAIN" .Values.clusterDomain)
  (list "KUBE_API_BURST" .Values.kubeApiBurst)
  (list "CONCURRENCY" .Values.concurrency)
  (list "EVENTS" .Values.events)
  (list "RESYNC_PERIOD" .Values.resyncPeriod)
  (list "CACHE_REQUESTS_BELOW" .Values.cacheRequestsBelow)
  (list "CACHE_REQUEST_BYTES" .Values.cacheRequestBytes)
  (list "AUDIT_PERIOD" .Values.audit.period)
  (list "AUDIT_EXPIRING_WITHIN" .Values.audit.expiringWithin)
  (list "AUDIT_DIAL_TIMEOUT" .Values.audit.dialTimeout)
  (list "AUDIT_DIAL_CONCURRENCY" .Values.audit.dialConcurrency) }}
{{- with .Values.kubeApiQps }}
- name: KUBE_API_QPS
  value: {{ toString . | quote }}
{{- end }}
{{- range $optional }}
{{- $value := index . 1 }}
{{- if or (kindIs "float64" $value) (kindIs "int64" $value) (kindIs "int" $value) }}
{{- $value = int64 $value | toString }}
{{- end }}
{{- if $value }}
- name: {{ index . 0 }}
  value: {{ $value | quote }}
{{- end }}
{{- end }}
{{- $flags := list
  (list "BYPASS_DNS_RESOLUTION" .Values.bypassDnsResolution)
  (list "BYPASS_HOSTNAME_CHECK" .Values.bypassHostnameCheck)
  (list "IGNORE_NON_SYSTEM_NODE" .Values.ignoreNonSystemNode)
  (list "SKIP_DENY_STEP" .Values.skipDenyStep)
  (list "VERIFY_NODE_ADDRESSES" .Values.verifyNodeAddresses)
  (list "DRY_RUN" .Values.dryRun)
  (list "AUDIT_NODE_METRICS" .Values.audit.nodeMetrics) }}
{{- if .Values.rules }}
- name: RULES_FILE
  value: /etc/node-csr-approver/rules/rules.yaml
{{- end }}
{{- range $flags }}
{{- if index . 1 }}
- name: {{ index . 0 }}
  value: "true"
{{- end }}
{{- end }}
{{- with .Values.dnsServers }}
- name: DNS_SERVERS
  value: {{ join "," . | quote }}
{{- end }}
{{- if .Values.leaderElection }}
- name: LEADER_ELECTION
  value: "true"
{{- $lease := list
  (list "LEADER_ELECTION_ID" .Values.leaderElectionId)
  (list "LEASE_DURATION" .Values.leaseDuration)
  (list "RENEW_DEADLINE" .Values.renewDeadline)
  (list "RETRY_PERIOD" .Values.retryPeriod) }}
{{- range $lease }}
{{- if index . 1 }}
- name: {{ index . 0 }}
  value: {{ index . 1 | quote }}
{{- end }}
{{- end }}
{{- end }}
{{- with .Values.machineMode.apis }}
- name: MACHINE_API
  value: {{ join "," . | quote }}
{{- with $.Values.machineMode.namespace }}
- name: MACHINE_NAMESPACE
  value: {{ . | quote }}
{{- end }}
- name: NODE_CLIENT_APPROVAL
  value: {{ $.Values.machineMode.nodeClientApproval | toString | quote }}
{{- with $.Values.machineMode.bootstrapperUsername }}
- name: BOOTSTRAPPER_USERNAME
  value: {{ . | quote }}
{{- end }}
{{- with $.Values.machineMode.bootstrapperGroups }}
- name: BOOTSTRAPPER_GROUPS
  value: {{ join "," . | quote }}
{{- end }}
{{- if ne (toString $.Values.machineMode.maxPendingDelta) "" }}
- name: MAX_PENDING_DELTA
  value: {{ int64 $.Values.machineMode.maxPendingDelta | toString | quote }}
{{- end }}
{{- end }}
{{- /* The kubelet-serving CA and port: renewals in machine mode, and the periodic audit. */}}
{{- if or .Values.machineMode.apis .Values.audit.period }}
{{- with $.Values.machineMode.kubeletServingCA.configMap }}
- name: KUBELET_SERVING_CA_FILE
  value: {{ printf "/etc/node-csr-approver/kubelet-serving-ca/%s" $.Values.machineMode.kubeletServingCA.key | quote }}
{{- end }}
{{- if ne (toString $.Values.machineMode.kubeletServingCA.kubeletPort) "" }}
- name: KUBELET_PORT
  value: {{ int64 $.Values.machineMode.kubeletServingCA.kubeletPort | toString | quote }}
{{- end }}
{{- end }}
- name: HEALTH_PROBE_BIND_ADDRESS
  value: {{ printf ":%d" (int .Values.healthProbe.port) | quote }}
- name: METRICS_BIND_ADDRESS
  value: {{ ternary (printf ":%d" (int .Values.metrics.port)) "0" .Values.metrics.enable | quote }}
- name: LOG_FORMAT
  value: {{ .Values.logFormat | quote }}
{{- /* loggingLevel: a string is an EnvFilter directive (LOG_LEVEL); a number is the Go tool's
  -level (LEVEL), which the binary maps. */}}
{{- if kindIs "string" .Values.loggingLevel }}
- name: LOG_LEVEL
  value: {{ .Values.loggingLevel | quote }}
{{- else }}
- name: LEVEL
  value: {{ int .Values.loggingLevel | quote }}
{{- end }}
{{- with .Values.env }}
{{ toYaml . }}
{{- end }}
{{- end }}

{{/* The container securityContext; capability names uppercased, so the Go chart's drop: [all]
passes the restricted Pod Security Standard, which asks for ALL. */}}
{{- define "node-csr-approver.securityContext" -}}
{{- $context := deepCopy .Values.securityContext }}
{{- with $context.capabilities }}
{{- range $key := list "add" "drop" }}
{{- if hasKey $.Values.securityContext.capabilities $key }}
{{- $names := list }}
{{- range index $.Values.securityContext.capabilities $key }}
{{- $names = append $names (upper .) }}
{{- end }}
{{- $_ := set $context.capabilities $key $names }}
{{- end }}
{{- end }}
{{- end }}
{{- toYaml $context }}
{{- end }}
