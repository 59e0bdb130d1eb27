{{- define "cd.image" -}}
{{ .Values.image.repository }}:{{ .Values.image.tag | default .Chart.AppVersion }}
{{- end -}}

{{- define "cd.labels" -}}
app.kubernetes.io/name: {{ include "cd.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
{{- end -}}

{{- /*
Names (docs/upgrade.md "Names NVIDIA's tooling expects").
cd.name: the app.kubernetes.io/name label (nameOverride, else nvidia-dra-driver-gpu as NVIDIA's,
or compute-domains with compat.nvidiaNames=false).
cd.fullname: the prefix of every object the chart creates: fullnameOverride, else nameOverride
(NVIDIA names its objects <nameOverride>-controller), else nvidia-dra-driver-gpu (NVIDIA's
object names, the default), else with compat.nvidiaNames=false the release name.
cd.namespace: namespaceOverride, else the release namespace.
*/ -}}
{{- define "cd.name" -}}
{{- $compat := (.Values.compat).nvidiaNames | default false -}}
{{- .Values.nameOverride | default (ternary "nvidia-dra-driver-gpu" "compute-domains" $compat) | trunc 63 | trimSuffix "-" -}}
{{- end -}}

{{- define "cd.fullname" -}}
{{- $compat := (.Values.compat).nvidiaNames | default false -}}
{{- $fallback := ternary "nvidia-dra-driver-gpu" .Release.Name $compat -}}
{{- .Values.fullnameOverride | default .Values.nameOverride | default $fallback | trunc 63 | trimSuffix "-" -}}
{{- end -}}

{{- /*
The controllers' Lease: <release>-controller (or the override's prefix), whatever
compat.nvidiaNames says. Switching the names renames the Deployment, and helm starts the new
pods while the old ones still run: a Lease named after the Deployment would let both lead.
*/ -}}
{{- define "cd.leaseName" -}}
{{- .Values.fullnameOverride | default .Values.nameOverride | default .Release.Name | trunc 52 | trimSuffix "-" -}}-controller
{{- end -}}

{{- define "cd.namespace" -}}
{{- .Values.namespaceOverride | default .Release.Namespace -}}
{{- end -}}

{{- /* Container names: NVIDIA's, or ours with compat.nvidiaNames=false. Argument: (list . component). */ -}}
{{- define "cd.containerName" -}}
{{- $ctx := index . 0 -}}
{{- $compat := ($ctx.Values.compat).nvidiaNames | default false -}}
{{- if eq (index . 1) "controller" -}}
{{- ternary "compute-domain" "controller" $compat -}}
{{- else -}}
{{- ternary "compute-domains" "plugin" $compat -}}
{{- end -}}
{{- end -}}

{{- /*
The pod label NVIDIA's tooling selects controller and plugin pods by
(nvidia-dra-driver-gpu-component: controller|kubelet-plugin; <nameOverride>-component with a
nameOverride), or selectorLabelsOverride's labels instead, as NVIDIA's chart does. On pods only:
our selectors stay ours (a Deployment's selector cannot change on upgrade).
Argument: (list . component).
*/ -}}
{{- define "cd.nvidiaPodLabels" -}}
{{- $ctx := index . 0 -}}
{{- if $ctx.Values.selectorLabelsOverride -}}
{{ toYaml $ctx.Values.selectorLabelsOverride }}
{{- else -}}
{{ $ctx.Values.nameOverride | default "nvidia-dra-driver-gpu" }}-component: {{ index . 1 }}
{{- end -}}
{{- end -}}

{{- /* ServiceAccount names (serviceAccount.name gives NVIDIA's <name>-controller/-kubeletplugin). */ -}}
{{- define "cd.controllerServiceAccount" -}}
{{- if .Values.serviceAccount.name -}}
{{ .Values.serviceAccount.name }}-controller
{{- else -}}
{{ include "cd.fullname" . }}-controller
{{- end -}}
{{- end -}}

{{- define "cd.pluginServiceAccount" -}}
{{- if .Values.serviceAccount.name -}}
{{ .Values.serviceAccount.name }}-kubeletplugin
{{- else -}}
{{ include "cd.fullname" . }}-kubelet-plugin
{{- end -}}
{{- end -}}

{{- /* logVerbosity as the components take it: a level name or a klog verbosity, as text. */ -}}
{{- define "cd.logVerbosity" -}}
{{- toString .Values.logVerbosity | lower -}}
{{- end -}}

{{- /*
kubeletPlugin.strictFabric, or featureGates.CrashOnNVLinkFabricErrors (NVIDIA's name for the
same switch) when that is set: "true" or "false".
*/ -}}
{{- define "cd.strictFabric" -}}
{{- $gates := .Values.featureGates | default dict -}}
{{- if hasKey $gates "CrashOnNVLinkFabricErrors" -}}
{{- toString (index $gates "CrashOnNVLinkFabricErrors") | lower -}}
{{- else -}}
{{- toString .Values.kubeletPlugin.strictFabric | lower -}}
{{- end -}}
{{- end -}}

{{- /*
A container's env: ours, then the user's (controller.containers.computeDomain.env,
kubeletPlugin.containers.computeDomains.env); a user entry replaces ours of the same name
(NVIDIA appends them, and the last one of a name wins); a value set as a number or boolean
(`--set ...env[0].value=0`) becomes the string Kubernetes wants. Argument: (list ours users).
*/ -}}
{{- define "cd.mergeEnv" -}}
{{- $users := index . 1 | default list -}}
{{- $named := dict -}}
{{- range $users }}{{- $_ := set $named .name true }}{{- end -}}
{{- $out := list -}}
{{- range index . 0 }}{{- if not (hasKey $named .name) }}{{- $out = append $out . }}{{- end }}{{- end -}}
{{- range $users }}
{{- $entry := deepCopy . }}
{{- if hasKey $entry "value" }}{{- $_ := set $entry "value" (toString $entry.value) }}{{- end }}
{{- $out = append $out $entry }}
{{- end -}}
{{- toYaml $out -}}
{{- end -}}

{{- /*
The host's driver root: nvidiaDriverRoot (NVIDIA's key), or the older kubeletPlugin.nvidiaDriverRoot
while the top-level key is left at "/" (validation.yaml refuses two different roots).
*/ -}}
{{- define "cd.driverRoot" -}}
{{- $top := .Values.nvidiaDriverRoot | default "/" -}}
{{- $alias := .Values.kubeletPlugin.nvidiaDriverRoot | default "" -}}
{{- if and $alias (eq $top "/") }}{{ $alias }}{{ else }}{{ $top }}{{ end -}}
{{- end -}}

{{- /* PriorityClass of the daemon pods: the chart's own (default <fullname>-daemon), a named
existing one, or "" for none. */ -}}
{{- define "cd.daemonPriorityClass" -}}
{{- $pc := (.Values.daemon).priorityClass | default dict -}}
{{- if $pc.create -}}
{{- $pc.name | default (printf "%s-daemon" (include "cd.fullname" .)) -}}
{{- else -}}
{{- $pc.name | default "" -}}
{{- end -}}
{{- end -}}
