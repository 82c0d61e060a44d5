{{/*
Shared names, labels and RBAC rules. Every per-controller template ranges over the keys
returned by "visitors-operator.controllerKeys" and passes a context built by
"visitors-operator.ctx": (dict "root" $ "key" "backup").
*/}}

{{/* The chart name, overridable. */}}
{{- define "visitors-operator.name" -}}
{{- default .Chart.Name .Values.nameOverride | trunc 63 | trimSuffix "-" }}
{{- end }}

{{/* Prefix of every resource name: the release name, unless it lacks the chart name. */}}
{{- define "visitors-operator.fullname" -}}
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

{{- define "visitors-operator.chart" -}}
{{- printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" | trunc 63 | trimSuffix "-" }}
{{- end }}

{{/* The controllers, in a fixed order; each has a values block of the same name. */}}
{{- define "visitors-operator.controllerKeys" -}}
visitors backup restore
{{- end }}

{{/* "<key>-controller": the binary, the component label and the leader Lease prefix. */}}
{{- define "visitors-operator.component" -}}
{{- printf "%s-controller" .key }}
{{- end }}

{{/* Name of a controller's Deployment, ServiceAccount, Service and RBAC objects. */}}
{{- /* The metrics and health port of one controller: its own metricsPort, else metrics.port. */}}
{{- define "visitors-operator.metricsPort" -}}
{{- $c := index .root.Values .key }}
{{- $c.metricsPort | default .root.Values.metrics.port }}
{{- end }}

{{- define "visitors-operator.controllerName" -}}
{{- printf "%s-%s" (include "visitors-operator.fullname" .root) (include "visitors-operator.component" .) | trunc 63 | trimSuffix "-" }}
{{- end }}

{{/* The image, tag defaulting to appVersion. */}}
{{- define "visitors-operator.image" -}}
{{- printf "%s:%s" .Values.image.repository (default .Chart.AppVersion .Values.image.tag) }}
{{- end }}

{{/* Labels of every object of a controller (context: root, key). */}}
{{- define "visitors-operator.labels" -}}
helm.sh/chart: {{ include "visitors-operator.chart" .root }}
{{ include "visitors-operator.selectorLabels" . }}
app.kubernetes.io/part-of: visitors-operator
app.kubernetes.io/managed-by: {{ .root.Release.Service }}
app.kubernetes.io/version: {{ .root.Chart.AppVersion | quote }}
{{- end }}

{{/* Labels that select a controller's pods (never change them: Deployment selectors are immutable). */}}
{{- define "visitors-operator.selectorLabels" -}}
app.kubernetes.io/name: {{ include "visitors-operator.name" .root }}
app.kubernetes.io/instance: {{ .root.Release.Name }}
app.kubernetes.io/component: {{ include "visitors-operator.component" . }}
{{- end }}

{{/*
RBAC rules a controller needs in every namespace it watches (context: root, key).
Cluster-wide (ClusterRole) when watchNamespace is empty, else a Role in watchNamespace.
Verbs are exactly what the controller uses; no wildcards.
*/}}
{{- define "visitors-operator.rules" -}}
{{- if eq .key "visitors" }}
# patch: the cleanup finalizer is added and removed by patch.
- apiGroups: ["example.com"]
  resources: ["visitorsapps"]
  verbs: ["get", "list", "watch", "patch"]
- apiGroups: ["example.com"]
  resources: ["visitorsapps/status"]
  verbs: ["get", "patch"]
# Children carry owner references with blockOwnerDeletion, which needs this where the
# OwnerReferencesPermissionEnforcement admission plugin is on.
- apiGroups: ["example.com"]
  resources: ["visitorsapps/finalizers"]
  verbs: ["update"]
# Server-side apply of a new object needs create as well as patch.
- apiGroups: ["apps"]
  resources: ["statefulsets", "deployments"]
  verbs: ["get", "list", "watch", "create", "patch"]
# A Service whose clusterIP cannot change in place (the MySQL client Service an earlier
# release gave a virtual IP) is deleted and created again.
- apiGroups: [""]
  resources: ["services"]
  verbs: ["get", "list", "watch", "create", "patch", "delete"]
# The credentials Secret is read, created once, and re-owned by patch; the TLS CA and
# certificate Secrets are read, created and applied (renewal). Secrets are not
# listed or watched, so the controller never reads Secrets it did not ask for by name.
- apiGroups: [""]
  resources: ["secrets"]
  verbs: ["get", "create", "patch"]
# The MySQL volume claim is read (to protect existing data) and grown by patch; a replicated
# app's claim of diverged transactions is applied.
- apiGroups: [""]
  resources: ["persistentvolumeclaims"]
  verbs: ["get", "create", "patch"]
# The MySQL pods of a replicated app are watched (their readiness starts a failover), labelled
# with their role, which the client and replicas Services select on, and deleted to restart or
# re-seed a server.
- apiGroups: [""]
  resources: ["pods"]
  verbs: ["get", "list", "watch", "patch", "delete"]
# A replicated app's seeding tokens.
- apiGroups: [""]
  resources: ["configmaps"]
  verbs: ["get", "create", "patch"]
# The Job that copies a diverged server's transactions to a file, and the one that loads a
# backup run into an empty server to seed it.
- apiGroups: ["batch"]
  resources: ["jobs"]
  verbs: ["get", "create"]
# An empty server that replication cannot seed (the binary logs were purged) is loaded from the
# app's newest verified MySQLBackup run (read-only).
- apiGroups: ["example.com"]
  resources: ["mysqlbackups"]
  verbs: ["get", "list"]
# A MySQLRestore that holds the app's database keeps its backend at 0 replicas: the
# controller watches restores to know when (it never writes them).
- apiGroups: ["example.com"]
  resources: ["mysqlrestores"]
  verbs: ["get", "list", "watch"]
{{- else if eq .key "backup" }}
# Schedules create one MySQLBackup run object per fire time; retention deletes old runs.
- apiGroups: ["example.com"]
  resources: ["mysqlbackups"]
  verbs: ["get", "list", "watch", "create", "patch", "update", "delete"]
- apiGroups: ["example.com"]
  resources: ["mysqlbackups/status"]
  verbs: ["get", "patch", "update"]
- apiGroups: ["example.com"]
  resources: ["mysqlbackups/finalizers"]
  verbs: ["update"]
- apiGroups: ["example.com"]
  resources: ["visitorsapps"]
  verbs: ["get", "list", "watch"]
# The per-database lock reads the run holding it, to tell a stale holder from an active one;
# the holder may be a restore.
- apiGroups: ["example.com"]
  resources: ["mysqlrestores"]
  verbs: ["get"]
# A schedule with pointInTime runs its binary-log archiver: a Job under its own ServiceAccount,
# whose Role lets it read and renew its one Lease (granting that needs the controller to hold
# those Lease verbs itself, which the Job rules below give it).
- apiGroups: [""]
  resources: ["serviceaccounts"]
  verbs: ["get", "create", "patch", "delete"]
- apiGroups: ["rbac.authorization.k8s.io"]
  resources: ["roles", "rolebindings"]
  verbs: ["get", "create", "patch", "delete"]
# A restore drill runs a throwaway MySQL: a pod the run owns, whose root password is in a
# Secret the controller generates; both are deleted when the drill ends.
- apiGroups: [""]
  resources: ["pods", "secrets"]
  verbs: ["create", "delete"]
{{- include "visitors-operator.jobRules" . }}
{{- else if eq .key "restore" }}
- apiGroups: ["example.com"]
  resources: ["mysqlrestores"]
  verbs: ["get", "list", "watch", "patch", "update"]
- apiGroups: ["example.com"]
  resources: ["mysqlrestores/status"]
  verbs: ["get", "patch", "update"]
- apiGroups: ["example.com"]
  resources: ["mysqlrestores/finalizers"]
  verbs: ["update"]
- apiGroups: ["example.com"]
  resources: ["mysqlbackups", "visitorsapps"]
  verbs: ["get", "list", "watch"]
# A quiescing restore waits for its app's backend Deployment to stop (read-only: the
# VisitorsApp controller scales it).
- apiGroups: ["apps"]
  resources: ["deployments"]
  verbs: ["get", "list", "watch"]
{{- include "visitors-operator.jobRules" . }}
{{- end }}
- apiGroups: ["events.k8s.io"]
  resources: ["events"]
  verbs: ["create", "patch"]
{{- end }}

{{/* What the backup and restore controllers share: agent Jobs and the per-database lock. */}}
{{- define "visitors-operator.jobRules" }}
- apiGroups: ["batch"]
  resources: ["jobs"]
  verbs: ["get", "list", "watch", "create", "patch", "delete"]
- apiGroups: [""]
  resources: ["pods"]
  verbs: ["get", "list", "watch"]
# Read-only: the Secrets and PVCs that a backup or restore spec refers to.
- apiGroups: [""]
  resources: ["secrets", "persistentvolumeclaims"]
  verbs: ["get"]
# One Lease per database serialises its backups and restores.
- apiGroups: ["coordination.k8s.io"]
  resources: ["leases"]
  verbs: ["get", "list", "watch", "create", "update", "patch", "delete"]
{{- end }}

{{/*
Labels of an object that belongs to no controller (context: root, component), such as the
PrometheusRule ("alerts") and the Jaeger all-in-one ("jaeger").
*/}}
{{- define "visitors-operator.componentLabels" -}}
helm.sh/chart: {{ include "visitors-operator.chart" .root }}
{{ include "visitors-operator.componentSelectorLabels" . }}
app.kubernetes.io/part-of: visitors-operator
app.kubernetes.io/managed-by: {{ .root.Release.Service }}
app.kubernetes.io/version: {{ .root.Chart.AppVersion | quote }}
{{- end }}

{{- define "visitors-operator.componentSelectorLabels" -}}
app.kubernetes.io/name: {{ include "visitors-operator.name" .root }}
app.kubernetes.io/instance: {{ .root.Release.Name }}
app.kubernetes.io/component: {{ .component }}
{{- end }}

{{/* Where the controllers and agent Jobs send traces: tracing.otlpEndpoint, else the chart's Jaeger. */}}
{{- define "visitors-operator.otlpEndpoint" -}}
{{- if .Values.tracing.otlpEndpoint }}
{{- .Values.tracing.otlpEndpoint }}
{{- else if .Values.tracing.jaeger.enabled }}
{{- printf "http://%s-jaeger.%s.svc:4318" (include "visitors-operator.fullname" .) .Release.Namespace }}
{{- end }}
{{- end }}
