//go:build tools

// Package helm records the helm command built by hack/build-helm.sh so that go.mod
// and go.sum pin its sources. It is never compiled into morph.
package helm

import (
	_ "helm.sh/helm/v4/cmd/helm"
)
