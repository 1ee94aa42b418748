{{/* Names and labels, the usual way: <release> when it contains the chart's name, else <release>-diagnosd. */}}
{{- define "diagnosd.name" -}}
{{- default .Chart.Name .Values.nameOverride | trunc 63 | trimSuffix "-" -}}
{{- end -}}

{{- define "diagnosd.fullname" -}}
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

{{- define "diagnosd.selectorLabels" -}}
app.kubernetes.io/name: {{ include "diagnosd.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end -}}

{{- define "diagnosd.labels" -}}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" | trunc 63 | trimSuffix "-" }}
{{ include "diagnosd.selectorLabels" . }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
{{- end -}}

{{- define "diagnosd.serviceAccountName" -}}
{{- if .Values.serviceAccount.create -}}
{{- default (include "diagnosd.fullname" .) .Values.serviceAccount.name -}}
{{- else -}}
{{- default "default" .Values.serviceAccount.name -}}
{{- end -}}
{{- end -}}

{{/* Whether the store is PostgreSQL (a store-url in the Secret): "true" or "". */}}
{{- define "diagnosd.postgres" -}}
{{- if has "store-url" (include "diagnosd.secretKeys" . | fromJsonArray) -}}true{{- end -}}
{{- end -}}

{{/* The Secret the pod reads: the existing one, or the chart's. */}}
{{- define "diagnosd.secretName" -}}
{{- default (include "diagnosd.fullname" .) .Values.secrets.existingSecret -}}
{{- end -}}

{{/*
The keys of that Secret, as a JSON list. For the chart's Secret, one per secret value set; for an
existing one, secrets.existingSecretKeys (checked against the keys the chart knows).
*/}}
{{- define "diagnosd.secretKeys" -}}
{{- $keys := list -}}
{{- if .Values.secrets.existingSecret -}}
{{- $known := list "api-tokens" "webhook-tokens" "webhook-password" "prometheus-bearer-token" "prometheus-password" "alertmanager-bearer-token" "grafana-token" "store-url" "scrape-token" -}}
{{- range .Values.secrets.existingSecretKeys -}}
{{- if not (has . $known) -}}
{{- fail (printf "secrets.existingSecretKeys: unknown key %q (known: %s)" . (join ", " $known)) -}}
{{- end -}}
{{- end -}}
{{- $keys = .Values.secrets.existingSecretKeys -}}
{{- else -}}
{{- if .Values.secrets.apiTokens -}}{{- $keys = concat $keys (list "api-tokens" "scrape-token") -}}{{- end -}}
{{- if .Values.secrets.webhookTokens -}}{{- $keys = append $keys "webhook-tokens" -}}{{- end -}}
{{- if .Values.secrets.webhookPassword -}}{{- $keys = append $keys "webhook-password" -}}{{- end -}}
{{- if .Values.secrets.prometheusBearerToken -}}{{- $keys = append $keys "prometheus-bearer-token" -}}{{- end -}}
{{- if .Values.secrets.prometheusPassword -}}{{- $keys = append $keys "prometheus-password" -}}{{- end -}}
{{- if .Values.secrets.alertmanagerBearerToken -}}{{- $keys = append $keys "alertmanager-bearer-token" -}}{{- end -}}
{{- if .Values.secrets.grafanaToken -}}{{- $keys = append $keys "grafana-token" -}}{{- end -}}
{{- if .Values.secrets.storeUrl -}}{{- $keys = append $keys "store-url" -}}{{- end -}}
{{- end -}}
{{- toJson $keys -}}
{{- end -}}

{{/*
Fail early where diagnosd would refuse to start: no Prometheus URL; no API token on a non-loopback
address without config.auth.allow_anonymous (a webhook credential alone leaves the API and /metrics
open; the webhook falls back to the API tokens); a token shorter than diagnosd accepts.
*/}}
{{- define "diagnosd.check" -}}
{{- $_ := required "config.prometheus.url is required: the Prometheus (or Thanos, Mimir) diagnosd queries" .Values.config.prometheus.url -}}
{{- $keys := include "diagnosd.secretKeys" . | fromJsonArray -}}
{{- $credential := has "api-tokens" $keys -}}
{{- $loopback := has .Values.listen.host (list "127.0.0.1" "localhost" "::1") -}}
{{- if not (or $credential $loopback .Values.config.auth.allow_anonymous) -}}
{{- fail "diagnosd refuses to serve off loopback without credentials: set secrets.apiTokens (e.g. --set \"secrets.apiTokens={$(openssl rand -hex 16)}\") or secrets.existingSecret, or config.auth.allow_anonymous=true if a proxy authenticates" -}}
{{- end -}}
{{- if and (gt (int .Values.replicaCount) 1) (not (has "store-url" $keys)) -}}
{{- fail (printf "replicaCount=%d needs the PostgreSQL store: replicas cannot share a SQLite file. Set secrets.storeUrl (postgresql://user:password@host:5432/database), or list store-url in secrets.existingSecretKeys" (int .Values.replicaCount)) -}}
{{- end -}}
{{- if and .Values.podDisruptionBudget.enabled (ge (int .Values.podDisruptionBudget.minAvailable) (int .Values.replicaCount)) -}}
{{- fail (printf "podDisruptionBudget.minAvailable=%d with replicaCount=%d: no drain could ever take a pod; set replicaCount above it" (int .Values.podDisruptionBudget.minAvailable) (int .Values.replicaCount)) -}}
{{- end -}}
{{- if and (has "store-url" $keys) .Values.persistence.enabled -}}
{{- fail "persistence.enabled is for the SQLite store; with secrets.storeUrl (PostgreSQL) there is no volume to claim: set persistence.enabled=false" -}}
{{- end -}}
{{- range (concat .Values.secrets.apiTokens .Values.secrets.webhookTokens) -}}
{{- if lt (len .) 16 -}}
{{- fail "secrets.apiTokens / secrets.webhookTokens: every token needs at least 16 characters (openssl rand -hex 16)" -}}
{{- end -}}
{{- end -}}
{{- end -}}
