//go:build tools

// Package tools pins sigs.k8s.io/kwok/cmd/kwok (built by ../build.sh) so that
// `go mod tidy` keeps its dependencies in go.mod / go.sum.
package tools

import (
	_ "sigs.k8s.io/kwok/cmd/kwok"
)
