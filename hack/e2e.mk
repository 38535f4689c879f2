# hack/e2e.mk: end-to-end test targets, included from the main Makefile.
# See docs/e2e.md.
#
#   make kube-binaries   build (or reuse) kube-apiserver, etcd and kubectl
#   make e2e             run ./test/e2e/... against a real control plane
#   make cluster         run that control plane for interactive use
#   make gatekeeper-oracle  build (or reuse) the Gatekeeper v3.23.1 oracle of
#                        test/gatekeeper (make unit builds it first)
#   make kyverno-jmespath-oracle  build (or reuse) Kyverno 1.19.1's JMESPath, the oracle
#                        of internal/dialect/cel's differential test (make unit too)
#   make helm            build (or reuse) the helm of hack/helm (the install tests'),
#                        cached next to the kube binaries
#   make image-test      build the OCI image twice and check it (hack/image)
#
# MORPH_E2E=0 skips the e2e tests and the Gatekeeper differential test (and the
# binary builds for `make e2e` and `make unit`).

GO ?= go
KUBE_VERSION ?= v1.37.1
E2E_CACHE ?= $(HOME)/.cache/morph-e2e
E2E_TIMEOUT ?= 20m

# The repository root, wherever the including Makefile lives.
MORPH_E2E_ROOT := $(abspath $(dir $(lastword $(MAKEFILE_LIST)))/..)
KUBE_ASSETS_DIR = $(E2E_CACHE)/$(KUBE_VERSION)

.PHONY: kube-binaries e2e cluster gatekeeper-oracle kyverno-jmespath-oracle helm image-test

kube-binaries:
	cd $(MORPH_E2E_ROOT) && MORPH_E2E_CACHE=$(E2E_CACHE) KUBE_VERSION=$(KUBE_VERSION) hack/build-kube.sh

gatekeeper-oracle:
	cd $(MORPH_E2E_ROOT) && MORPH_E2E_CACHE=$(E2E_CACHE) hack/build-gatekeeper.sh

kyverno-jmespath-oracle:
	cd $(MORPH_E2E_ROOT) && MORPH_E2E_CACHE=$(E2E_CACHE) hack/build-kyverno-jmespath.sh

helm:
	cd $(MORPH_E2E_ROOT) && MORPH_E2E_CACHE=$(E2E_CACHE) hack/build-helm.sh

e2e: $(if $(filter 0,$(MORPH_E2E)),,kube-binaries helm image-test)
	cd $(MORPH_E2E_ROOT) && KUBE_ASSETS=$(KUBE_ASSETS_DIR) $(if $(filter 0,$(MORPH_E2E)),,HELM=$$(MORPH_E2E_CACHE=$(E2E_CACHE) hack/build-helm.sh)) $(GO) test -v -count=1 -timeout $(E2E_TIMEOUT) ./test/e2e/...

# The image module is its own (hack/image/go.mod): go test ./... of the root skips it.
image-test:
	cd $(MORPH_E2E_ROOT)/hack/image && GOWORK=off $(GO) test -count=1 ./...

# Built and run rather than `go run`, which exits 1 on Ctrl-C.
cluster: kube-binaries
	cd $(MORPH_E2E_ROOT) && $(GO) build -o $(E2E_CACHE)/bin/morph-cluster ./hack/cluster
	cd $(MORPH_E2E_ROOT) && KUBE_ASSETS=$(KUBE_ASSETS_DIR) exec $(E2E_CACHE)/bin/morph-cluster
