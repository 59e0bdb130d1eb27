//go:build tools

// Package tools pins the helm command built for the simulator.
package tools

import _ "helm.sh/helm/v3/cmd/helm"
