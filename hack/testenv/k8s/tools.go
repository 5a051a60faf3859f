//go:build tools

// Package tools pins the Kubernetes commands built by ../build.sh so that
// `go mod tidy` keeps every dependency they need in go.mod / go.sum.
package tools

import (
	_ "k8s.io/kubernetes/cmd/kube-apiserver"
	_ "k8s.io/kubernetes/cmd/kube-controller-manager"
	_ "k8s.io/kubernetes/cmd/kube-scheduler"
	_ "k8s.io/kubernetes/cmd/kubectl"
)
