//go:build tools

// Package tools pins helm.sh/helm/v4/cmd/helm (built by ../build.sh for the chart
// tests) so that `go mod tidy` keeps its dependencies in go.mod / go.sum.
package tools

import (
	_ "helm.sh/helm/v4/cmd/helm"
)
