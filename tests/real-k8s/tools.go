//go:build tools

// Package tools only names the upstream command packages that build.sh builds,
// so that `go mod tidy` keeps them (and everything they import) in go.mod and
// go.sum. It is never compiled: the build tag "tools" is never set.
package tools

import (
	_ "go.etcd.io/etcd/server/v3" // etcd's own main package (calls etcdmain.Main)
	_ "k8s.io/kubernetes/cmd/kube-apiserver"
	_ "k8s.io/kubernetes/cmd/kube-controller-manager"
	_ "k8s.io/kubernetes/cmd/kube-scheduler"
	_ "k8s.io/kubernetes/cmd/kubectl"
)
