//go:build tools

// Package kube records the commands built by hack/build-kube.sh so that
// go.mod and go.sum pin their sources. It is never compiled into morph.
package kube

import (
	_ "go.etcd.io/etcd/server/v3"
	_ "k8s.io/kubernetes/cmd/kube-apiserver"
	_ "k8s.io/kubernetes/cmd/kubectl"
)
