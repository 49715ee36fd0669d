{{- /*
capstan.sidecar: the capstan-sidecar container of an assistant pod, for charts that depend on
this one. It is a native sidecar (a list item for `initContainers:`, restartPolicy: Always,
Kubernetes >= 1.29) unless `native` is false (then a list item for `containers:`, and the
assistant must retry until the socket exists). examples/assistant/assistant.yaml is this
template's output for the parameters below, and a test keeps the two equal.

  spec:
    volumes:
    - name: capstan-socket
      emptyDir: {}
    - name: capstan-state
      emptyDir: {}
    initContainers:
    {{- include "capstan.sidecar" (dict
          "image" "capstan-sidecar:0.1.0"
          "planTokenSecret" "capstan-plan-token"
          "mcpEndpointHosts" (list "*.providers.example" "10.96.0.0/12")
          "fetchHosts" (list "*.providers.example")) | nindent 4 }}

Parameters:
  image             the image `make image` builds as capstan-sidecar (required)
  planTokenSecret   the Secret whose `key` signs plan tokens (required)
  mcpEndpointHosts  hosts provider MCP endpoints may be on (CAPABILITY_MCP_ENDPOINT_HOSTS)
  fetchHosts        hosts knowledge may be fetched from (CAPABILITY_FETCH_HOSTS)
  socketDir         where the socket volume is mounted (default /var/run/capstan)
  volume            the emptyDir volume shared with the assistant (default capstan-socket)
  stateVolume       an emptyDir of the sidecar's alone (default capstan-state), mounted at
                    /var/lib/capstan: the ledger of applied plan tokens (CAPSTAN_PLAN_LEDGER)
                    lives there, so a restarted sidecar still applies each earlier plan once
  logFormat         json (default) or text
  metricsPort       the port of /metrics, /healthz and /readyz (default 9090): kubelet's
                    probes ask it — startup and readiness /readyz (the bindings are listed),
                    liveness /healthz (a wedged sidecar is restarted)
  toolAuthorization off (default) or rbac: each caller's tools, prompts and resources
                    decided by the project's RBAC (CAPSTAN_TOOL_AUTHORIZATION,
                    docs/authorization.md); bind <release>-tools-user to whoever keeps all
                    of them first
  callLimits        the platform's say over every provider server's call limits
                    (docs/limits.md): a dict with `defaults` (where a binding declares
                    none) and `ceilings` (the most any server gets), each a dict of
                    `callsPerMinutePerCaller`, `concurrentCallsPerCaller` and
                    `callsPerMinute` (CAPSTAN_DEFAULT_* and CAPSTAN_MAX_*); unset: none
  audit             the audit trail (docs/audit.md), off by default: a dict with `sink`
                    (stdout, stderr or a file; CAPSTAN_AUDIT_SINK) and optional `names`
                    (names, digest or off; CAPSTAN_AUDIT_NAMES)
  credentials       upstream credentials (docs/upstream-auth.md), off by default: a dict with
                    `namespace` (where Secrets are read; CAPSTAN_CREDENTIALS_NAMESPACE),
                    `workloadIdentity` (true: the pod's own ServiceAccount, bound to the pod,
                    from the downward API; CAPSTAN_WORKLOAD_SERVICE_ACCOUNT), `workloadAudiences`
                    (audience=host; CAPSTAN_WORKLOAD_AUDIENCES) and `tokenEndpointHosts`
                    (CAPSTAN_TOKEN_ENDPOINT_HOSTS); list the pod's ServiceAccount in the chart's
                    credentials.sidecarServiceAccounts for the RBAC each needs
  toolSearch        tool search (docs/tool-search.md): a dict with `minTools` (find_tools is
                    offered from this many tools a caller may call, default 20;
                    CAPSTAN_TOOL_SEARCH_MIN_TOOLS) and `threshold` (above this many, tools/list
                    shows the built-in and cap.* tools and find_tools only, default 40, 0 never;
                    CAPSTAN_TOOL_SEARCH_THRESHOLD). The platform's choice: a project cannot set it
  gapSink           where capability-gap reports go (CAPSTAN_GAP_SINK): default the file
                    capability-gaps.jsonl in the state volume; stdout, stderr, off, or a path
  tracing           traces over OTLP/HTTP (README "Observe"), off by default: a dict with
                    `endpoint` (the collector's OTLP/HTTP URL), optional `sampler` and
                    `samplerArg` (OTEL_TRACES_SAMPLER/_ARG) and `serviceName` (default
                    capstan-sidecar)
  resources         the container's resources (default below)
  native            false for a plain container (default true)
The pod's ServiceAccount needs the `<release>-sidecar` ClusterRole (sidecarRBAC.create) bound.
*/ -}}
{{- define "capstan.sidecar" -}}
{{- $socketDir := .socketDir | default "/var/run/capstan" -}}
{{- $metricsPort := .metricsPort | default 9090 | int -}}
{{- $resources := .resources | default (dict "requests" (dict "cpu" "50m" "memory" "64Mi") "limits" (dict "memory" "512Mi")) -}}
- name: capstan-sidecar
  image: {{ required "capstan.sidecar: image is required" .image | quote }}
  {{- if or (not (hasKey . "native")) .native }}
  restartPolicy: Always
  {{- end }}
  command: [/usr/local/bin/capstan-sidecar]
  env:
  - name: CAPSTAN_SOCKET
    value: {{ printf "%s/composer.sock" $socketDir | quote }}
  - name: CAPABILITY_SOURCE
    value: crd
  - name: CAPABILITY_MCP_ENDPOINT_HOSTS
    value: {{ join "," (.mcpEndpointHosts | default list) | quote }}
  - name: CAPABILITY_FETCH_HOSTS
    value: {{ join "," (.fetchHosts | default list) | quote }}
  - name: PLAN_TOKEN_KEY
    valueFrom:
      secretKeyRef:
        name: {{ required "capstan.sidecar: planTokenSecret is required" .planTokenSecret | quote }}
        key: key
  - name: CAPSTAN_PLAN_LEDGER
    value: /var/lib/capstan/plan-ledger
  - name: CAPSTAN_LOG_FORMAT
    value: {{ .logFormat | default "json" | quote }}
  - name: CAPSTAN_METRICS_ADDRESS
    value: {{ printf "0.0.0.0:%d" $metricsPort | quote }}
  {{- if .toolAuthorization }}
  - name: CAPSTAN_TOOL_AUTHORIZATION
    value: {{ .toolAuthorization | quote }}
  {{- end }}
  {{- with .audit }}
  {{- if .sink }}
  - name: CAPSTAN_AUDIT_SINK
    value: {{ .sink | quote }}
  {{- end }}
  {{- if .names }}
  - name: CAPSTAN_AUDIT_NAMES
    value: {{ .names | quote }}
  {{- end }}
  {{- end }}
  {{- with .credentials }}
  {{- if .namespace }}
  - name: CAPSTAN_CREDENTIALS_NAMESPACE
    value: {{ .namespace | quote }}
  {{- end }}
  {{- if .workloadIdentity }}
  - name: CAPSTAN_POD_NAMESPACE
    valueFrom:
      fieldRef:
        fieldPath: metadata.namespace
  - name: CAPSTAN_POD_SERVICE_ACCOUNT
    valueFrom:
      fieldRef:
        fieldPath: spec.serviceAccountName
  - name: CAPSTAN_WORKLOAD_SERVICE_ACCOUNT
    value: "$(CAPSTAN_POD_NAMESPACE)/$(CAPSTAN_POD_SERVICE_ACCOUNT)"
  - name: CAPSTAN_POD_NAME
    valueFrom:
      fieldRef:
        fieldPath: metadata.name
  - name: CAPSTAN_POD_UID
    valueFrom:
      fieldRef:
        fieldPath: metadata.uid
  {{- end }}
  {{- if .workloadAudiences }}
  - name: CAPSTAN_WORKLOAD_AUDIENCES
    value: {{ join "," .workloadAudiences | quote }}
  {{- end }}
  {{- if .tokenEndpointHosts }}
  - name: CAPSTAN_TOKEN_ENDPOINT_HOSTS
    value: {{ join "," .tokenEndpointHosts | quote }}
  {{- end }}
  {{- end }}
  {{- with .gapSink }}
  - name: CAPSTAN_GAP_SINK
    value: {{ . | quote }}
  {{- end }}
  {{- with .toolSearch }}
  {{- if hasKey . "minTools" }}
  - name: CAPSTAN_TOOL_SEARCH_MIN_TOOLS
    value: {{ .minTools | toString | quote }}
  {{- end }}
  {{- if hasKey . "threshold" }}
  - name: CAPSTAN_TOOL_SEARCH_THRESHOLD
    value: {{ .threshold | toString | quote }}
  {{- end }}
  {{- end }}
  {{- with .callLimits }}
  {{- $limits := . }}
  {{- range $scope, $prefix := dict "defaults" "CAPSTAN_DEFAULT_" "ceilings" "CAPSTAN_MAX_" }}
  {{- $set := get $limits $scope | default dict }}
  {{- range $field, $suffix := dict "callsPerMinutePerCaller" "CALLS_PER_MINUTE_PER_CALLER" "concurrentCallsPerCaller" "CONCURRENT_CALLS_PER_CALLER" "callsPerMinute" "CALLS_PER_MINUTE" }}
  {{- with get $set $field }}
  - name: {{ printf "%s%s" $prefix $suffix }}
    value: {{ . | toString | quote }}
  {{- end }}
  {{- end }}
  {{- end }}
  {{- end }}
  {{- with .tracing }}
  {{- if .endpoint }}
  - name: OTEL_EXPORTER_OTLP_ENDPOINT
    value: {{ .endpoint | quote }}
  - name: OTEL_SERVICE_NAME
    value: {{ .serviceName | default "capstan-sidecar" | quote }}
  {{- if .sampler }}
  - name: OTEL_TRACES_SAMPLER
    value: {{ .sampler | quote }}
  {{- end }}
  {{- if .samplerArg }}
  - name: OTEL_TRACES_SAMPLER_ARG
    value: {{ .samplerArg | quote }}
  {{- end }}
  {{- end }}
  {{- end }}
  ports:
  - name: capstan-metrics
    containerPort: {{ $metricsPort }}
    protocol: TCP
  # A native sidecar's startup probe holds the assistant back until the sidecar serves what
  # the cluster's bindings compose (/readyz: the bindings are listed).
  startupProbe:
    httpGet:
      path: /readyz
      port: capstan-metrics
    periodSeconds: 1
    failureThreshold: 120
  readinessProbe:
    httpGet:
      path: /readyz
      port: capstan-metrics
    periodSeconds: 5
  # A sidecar that stops answering is restarted; the assistant's next session reaches the
  # new one.
  livenessProbe:
    httpGet:
      path: /healthz
      port: capstan-metrics
    periodSeconds: 5
    timeoutSeconds: 2
    failureThreshold: 3
  volumeMounts:
  - name: {{ .volume | default "capstan-socket" }}
    mountPath: {{ $socketDir | quote }}
  - name: {{ .stateVolume | default "capstan-state" }}
    mountPath: /var/lib/capstan
  securityContext:
    allowPrivilegeEscalation: false
    readOnlyRootFilesystem: true
    capabilities:
      drop: [ALL]
  resources:
    {{- toYaml $resources | nindent 4 }}
{{- end -}}
