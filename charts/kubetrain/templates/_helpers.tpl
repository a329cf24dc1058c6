{{/* The chart's name (nameOverride wins). */}}
{{- define "kubetrain.name" -}}
{{- default .Chart.Name .Values.nameOverride | trunc 63 | trimSuffix "-" }}
{{- end }}

{{/* The release's base name: fullnameOverride, the release name when it contains the chart's, or both. */}}
{{- define "kubetrain.fullname" -}}
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

{{/* Name of the operator's Deployment, Service, ServiceAccount and ClusterRole. */}}
{{- define "kubetrain.operator" -}}
{{- printf "%s-operator" (include "kubetrain.fullname" .) | trunc 63 | trimSuffix "-" }}
{{- end }}

{{/* The Secret with the webhook (and status server) serving certificate. */}}
{{- define "kubetrain.certSecret" -}}
{{- .Values.manager.config.certManagement.webhookSecretName | default (printf "%s-webhook-cert" (include "kubetrain.fullname" .)) }}
{{- end }}

{{/* The Service named in the certificate. */}}
{{- define "kubetrain.certService" -}}
{{- .Values.manager.config.certManagement.webhookServiceName | default (include "kubetrain.operator" .) }}
{{- end }}

{{/* The Configuration ConfigMap. */}}
{{- define "kubetrain.configMap" -}}
{{- printf "%s-config" (include "kubetrain.fullname" .) }}
{{- end }}

{{/* Labels of every object. */}}
{{- define "kubetrain.labels" -}}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" | trunc 63 | trimSuffix "-" }}
app.kubernetes.io/name: {{ include "kubetrain.operator" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/part-of: kubetrain
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
{{- with .Values.commonLabels }}
{{ toYaml . }}
{{- end }}
{{- end }}

{{/* Labels of the operator's objects (manager.labels added). */}}
{{- define "kubetrain.managerLabels" -}}
{{ include "kubetrain.labels" . }}
app.kubernetes.io/component: manager
{{- with .Values.manager.labels }}
{{ toYaml . }}
{{- end }}
{{- end }}

{{/* Selector of the operator's pods (the same as examples/manifests/deploy, plus manager.selectorLabels). */}}
{{- define "kubetrain.selectorLabels" -}}
app.kubernetes.io/name: {{ include "kubetrain.operator" . }}
app.kubernetes.io/component: manager
{{- with .Values.manager.selectorLabels }}
{{ toYaml . }}
{{- end }}
{{- end }}

{{/* The operator image: registry/repository:tag, no registry prefix for docker.io, tag defaults to appVersion. */}}
{{- define "kubetrain.image" -}}
{{- $tag := .Values.image.tag | default .Chart.AppVersion }}
{{- $registry := .Values.image.registry | default "docker.io" }}
{{- if eq $registry "docker.io" }}
{{- printf "%s:%s" .Values.image.repository $tag }}
{{- else }}
{{- printf "%s/%s:%s" $registry .Values.image.repository $tag }}
{{- end }}
{{- end }}

{{/* The port of a Go-style bind address (":8443", "0.0.0.0:8080"); empty when off ("0" or ""). */}}
{{- define "kubetrain.port" -}}
{{- $addr := toString . }}
{{- if and $addr (ne $addr "0") }}
{{- last (splitList ":" $addr) }}
{{- end }}
{{- end }}

{{/*
A runtime's text with one image replaced: (list TEXT DEFAULT IMAGE) where DEFAULT is the image the built-in
runtime names (registry/repository, without tag) and IMAGE a {registry, repository, tag} value. An empty tag
keeps the tag the runtime has.
*/}}
{{- define "kubetrain.replaceImage" -}}
{{- $text := index . 0 }}
{{- $default := index . 1 }}
{{- $image := index . 2 }}
{{- $repo := printf "%s/%s" ($image.registry | default "docker.io") $image.repository }}
{{- if eq ($image.registry | default "docker.io") "docker.io" }}{{ $repo = $image.repository }}{{ end }}
{{- $tag := ternary (printf ":%s" $image.tag) "${1}" (not (empty $image.tag)) }}
{{- regexReplaceAll (printf "%s(:[A-Za-z0-9._-]+)?" (regexQuoteMeta $default)) $text (printf "%s%s" $repo $tag) }}
{{- end }}
