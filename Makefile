# morph: one mutation engine for Gatekeeper, CEL and Katalog policies.
#
#   make test    unit, suite, race and lint, then end-to-end tests on a real kube-apiserver (CI runs this)
#   make unit    unit tests only (with the Gatekeeper differential test, whose oracle it
#                builds and caches first)
#   make suite   the policy test suites of examples/ (morph test examples/)
#   make race    the packages that run goroutines, under the race detector
#   make e2e     end-to-end tests only (builds and caches kube-apiserver, etcd, kubectl)
#   make lint    gofmt, go vet, golangci-lint (pinned)
#   make bench   benchmarks, written to docs/performance.md
#   make fuzz    every fuzz target for FUZZTIME each
#   make cluster a control plane on 127.0.0.1 for trying morph by hand

GO                    ?= go
BIN                   ?= bin
GOLANGCI_LINT_VERSION ?= v2.15.0
GOLANGCI_LINT         ?= $(shell $(GO) env GOPATH)/bin/golangci-lint
FUZZTIME              ?= 20s
BENCHCOUNT            ?= 6
UNIT_PKGS              = $(shell $(GO) list ./... | grep -v /test/e2e)
# The packages that run goroutines (servers, reloads, pools, deadlines).
RACE_PKGS              = ./internal/engine/... ./internal/heapfloor/... ./internal/webhook/... ./internal/dialect/... ./cmd/morph/...

.PHONY: all build test unit suite race examples lint bench fuzz clean

all: build

build:
	$(GO) build -o $(BIN)/morph ./cmd/morph

test: unit suite race lint e2e

unit: $(if $(filter 0,$(MORPH_E2E)),,gatekeeper-oracle)
	$(GO) mod download
	$(GO) test -count=1 $(UNIT_PKGS)

race:
	$(GO) test -race -count=1 $(RACE_PKGS)

suite: build
	$(BIN)/morph test examples/

examples: build
	$(BIN)/morph apply -p examples/policies -f examples/manifests --context examples/context

lint:
	@test -z "$$(gofmt -l $$(git ls-files '*.go'))" || { echo "gofmt needed:"; gofmt -l $$(git ls-files '*.go'); exit 1; }
	$(GO) vet ./...
	@test -x $(GOLANGCI_LINT) && $(GOLANGCI_LINT) version 2>/dev/null | grep -q "$(GOLANGCI_LINT_VERSION:v%=%)" || \
		GOBIN=$(dir $(GOLANGCI_LINT)) $(GO) install github.com/golangci/golangci-lint/v2/cmd/golangci-lint@$(GOLANGCI_LINT_VERSION)
	$(GOLANGCI_LINT) run ./...

bench:
	$(GO) run ./bench/report -count $(BENCHCOUNT) -out docs/performance.md

fuzz:
	@for pkg in $$($(GO) list ./...); do \
		for f in $$($(GO) test -list '^Fuzz' $$pkg 2>/dev/null | grep '^Fuzz'); do \
			echo "== $$pkg $$f"; $(GO) test -run '^$$' -fuzz "^$$f$$" -fuzztime $(FUZZTIME) $$pkg || exit 1; \
		done; \
	done

clean:
	rm -rf $(BIN)

-include hack/e2e.mk
