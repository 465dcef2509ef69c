{{/* The chart's name, the release's full name (both cut to 63 characters). */}}
{{- define "kraft-operator.name" -}}
{{- default .Chart.Name .Values.nameOverride | trunc 63 | trimSuffix "-" }}
{{- end }}

{{- define "kraft-operator.fullname" -}}
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

{{- define "kraft-operator.selectorLabels" -}}
app.kubernetes.io/name: {{ include "kraft-operator.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end }}

{{- define "kraft-operator.labels" -}}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" | trunc 63 | trimSuffix "-" }}
{{ include "kraft-operator.selectorLabels" . }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/component: operator
app.kubernetes.io/part-of: kraft-quorum
app.kubernetes.io/managed-by: {{ .Release.Service }}
{{- end }}

{{- define "kraft-operator.serviceAccountName" -}}
{{- if .Values.serviceAccount.create }}
{{- default (include "kraft-operator.fullname" .) .Values.serviceAccount.name }}
{{- else }}
{{- required "serviceAccount.name is required when serviceAccount.create is false" .Values.serviceAccount.name }}
{{- end }}
{{- end }}

{{/*
The namespaces the operator reconciles, comma-separated; empty when it is every namespace
(watchAllNamespaces with no watchNamespaces). The default is the release namespace alone.
*/}}
{{- define "kraft-operator.namespaces" -}}
{{- if .Values.watchNamespaces }}
{{- join "," .Values.watchNamespaces }}
{{- else if not .Values.watchAllNamespaces }}
{{- .Release.Namespace }}
{{- end }}
{{- end }}

{{/*
The images a KRaftQuorum may run (--allowed-images): quorumPolicy.allowedImages, or by
default the chart's own image repository with any tag or digest.
*/}}
{{- define "kraft-operator.allowedImages" -}}
{{- if .Values.quorumPolicy.allowedImages }}
{{- join "," .Values.quorumPolicy.allowedImages }}
{{- else }}
{{- printf "%s:*,%s@sha256:*" .Values.image.repository .Values.image.repository }}
{{- end }}
{{- end }}

{{- define "kraft-operator.leaseName" -}}
{{- default (include "kraft-operator.fullname" .) .Values.operator.lease.name }}
{{- end }}

{{/* repository:tag, or repository@digest when a digest is given. */}}
{{- define "kraft-operator.image" -}}
{{- if .Values.image.digest }}
{{- printf "%s@%s" .Values.image.repository .Values.image.digest }}
{{- else }}
{{- printf "%s:%s" .Values.image.repository (default .Chart.AppVersion .Values.image.tag) }}
{{- end }}
{{- end }}

{{/*
The rules the operator needs in each namespace it reconciles: the only API calls it makes
there (tests/shipping/test_chart.py compares them with the calls recorded from a running
operator).
*/}}
{{- define "kraft-operator.namespacedRules" -}}
# KRaftQuorums: watched by kopf, read and annotated by each pass (kopf's progress, the
# recovery annotation cleared); status written by each pass.
- apiGroups: ["kraft.dev"]
  resources: ["kraftquorums"]
  verbs: ["get", "list", "watch", "patch"]
- apiGroups: ["kraft.dev"]
  resources: ["kraftquorums/status"]
  verbs: ["patch"]
# One Pod and one PersistentVolumeClaim per node: listed each pass, created, annotated with
# the directory id the node reported, deleted on scale-down and replacement; watched, so that a
# change of one (Ready or not, its Node failed, a claim bound) runs a pass of its quorum at once.
- apiGroups: [""]
  resources: ["pods", "persistentvolumeclaims"]
  verbs: ["get", "list", "watch", "create", "patch", "delete"]
# The standing objects: headless and client Services, the ConfigMap of server.properties.
- apiGroups: [""]
  resources: ["services", "configmaps"]
  verbs: ["get", "create", "patch"]
# The PKI (spec.tls): the CAs, each node's certificate, the operator's client certificate;
# and a user-supplied CA (spec.tls.caSecretName), read only.
- apiGroups: [""]
  resources: ["secrets"]
  verbs: ["get", "create", "patch"]
# The PodDisruptionBudget, deleted when spec.podDisruptionBudget.enabled is false.
- apiGroups: ["policy"]
  resources: ["poddisruptionbudgets"]
  verbs: ["get", "create", "patch", "delete"]
# The quorum's NetworkPolicy, deleted when spec.networkPolicy.enabled is false.
- apiGroups: ["networking.k8s.io"]
  resources: ["networkpolicies"]
  verbs: ["get", "create", "patch", "delete"]
# An Event for every action.
- apiGroups: [""]
  resources: ["events"]
  verbs: ["create"]
# The claim on each KRaftQuorum (a Lease named NAME.kraftquorums.kraft.dev beside it, owned
# by it): one operator acts on a quorum, whatever Lease elected it. Taken and renewed by each
# pass; deleted with the KRaftQuorum by the garbage collector, never by the operator.
- apiGroups: ["coordination.k8s.io"]
  resources: ["leases"]
  verbs: ["get", "create", "patch"]
{{- end }}
