package webhook

import (
	"bytes"
	"flag"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/runtime/schema"

	"github.com/morph-dev/morph/internal/engine"
	"github.com/morph-dev/morph/internal/policy"
)

var update = flag.Bool("update", false, "rewrite the golden files of testdata/")

// resourceMutator names its resources itself.
type resourceMutator struct {
	*labelMutator
}

func (m resourceMutator) mutator() engine.Mutator {
	d := m.descriptor()
	d.Resources = []schema.GroupVersionResource{{Group: "demo.morph.dev", Version: "v1", Resource: "websites"}}
	return engine.Mutator{Descriptor: d, Mutate: m.mutate}
}

// ignoringValidator's webhook may be skipped when the server is down.
type ignoringValidator struct{ *labelValidator }

func (v ignoringValidator) validator() engine.Validator {
	val := v.labelValidator.validator()
	val.FailurePolicy, val.Timeout = engine.FailIgnore, 1500*time.Millisecond
	return val
}

func configBundle() *policy.Bundle {
	deploy := engine.Target{Group: "apps", Version: "v1", Kind: "Deployment", Operations: mustOps("CREATE", "UPDATE")}
	sts := engine.Target{Group: "apps", Version: "v1", Kind: "StatefulSet", Operations: mustOps("CREATE", "UPDATE")}
	website := engine.Target{Group: "demo.morph.dev", Version: "v1", Kind: "Website", Operations: mustOps("CREATE")}
	return &policy.Bundle{
		Mutators: mutators(
			&labelMutator{name: "pods"},
			&labelMutator{name: "ingresses", targets: []engine.Target{{Group: "networking.k8s.io", Version: "v1", Kind: "Ingress", Operations: mustOps("CREATE")}}},
			&labelMutator{name: "workloads", targets: []engine.Target{deploy, sts}, failure: engine.FailClose},
			&timedMutator{labelMutator: &labelMutator{name: "slow", targets: []engine.Target{deploy}, failure: engine.FailClose}, timeout: 45 * time.Second},
			resourceMutator{&labelMutator{name: "website-defaults", targets: []engine.Target{website}, reinvoke: engine.ReinvokeNever}},
			&labelMutator{name: "everything", targets: []engine.Target{{Group: "*", Version: "*", Kind: "*", Operations: engine.AllOperations}}},
			&labelMutator{name: "no-operations", targets: []engine.Target{{Group: "", Version: "v1", Kind: "Secret"}}},
		),
		Validators: validators(
			&labelValidator{name: "pods"},
			ignoringValidator{&labelValidator{name: "soft"}},
		),
	}
}

func mustOps(ops ...string) engine.OperationSet {
	s, err := engine.OperationsOf(ops...)
	if err != nil {
		panic(err)
	}
	return s
}

func TestConfigurationsGolden(t *testing.T) {
	tests := []struct {
		golden string
		bundle *policy.Bundle
		opts   ConfigOptions
	}{
		{"configs-url.yaml", configBundle(), ConfigOptions{Name: "morph", Namespace: "morph-system", URL: "https://127.0.0.1:8443/", CABundle: []byte("-----BEGIN CERTIFICATE-----\nMIIB\n-----END CERTIFICATE-----\n")}},
		{"configs-service.yaml", &policy.Bundle{Mutators: mutators(&labelMutator{name: "pods"})}, ConfigOptions{Name: "morph", Namespace: "kube-system", Service: &ServiceRef{Namespace: "morph-system", Name: "morph"}}},
	}
	for _, tt := range tests {
		t.Run(tt.golden, func(t *testing.T) {
			got, err := ConfigurationsYAML(tt.bundle, tt.opts)
			if err != nil {
				t.Fatal(err)
			}
			path := filepath.Join("testdata", tt.golden)
			if *update {
				if err := os.WriteFile(path, got, 0o644); err != nil {
					t.Fatal(err)
				}
			}
			want, err := os.ReadFile(path)
			if err != nil {
				t.Fatalf("%v (run go test -update to create it)", err)
			}
			if !bytes.Equal(got, want) {
				t.Errorf("configurations differ from %s (go test -update rewrites it):\n%s", path, got)
			}
		})
	}
}

func TestConfigurationsOptions(t *testing.T) {
	only := &policy.Bundle{Converters: converters(&versionConverter{})}
	if m, v, err := Configurations(only, ConfigOptions{Name: "morph", Namespace: "morph-system", URL: "https://x:1"}); err != nil || m != nil || v != nil {
		t.Errorf("a bundle without admission policies gave %v %v %v", m, v, err)
	}
	tests := []struct {
		opts ConfigOptions
		want string
	}{
		{ConfigOptions{Name: "morph", Namespace: "morph-system"}, "give --url"},
		{ConfigOptions{Name: "morph", Namespace: "morph-system", URL: "https://a:1", Service: &ServiceRef{Name: "x", Namespace: "y"}}, "not both"},
		{ConfigOptions{Name: "morph", Namespace: "morph-system", URL: "http://a:1"}, "use https://HOST:PORT"},
		{ConfigOptions{Name: "Morph!", Namespace: "morph-system", URL: "https://a:1"}, `--name "Morph!"`},
		{ConfigOptions{Name: "morph", Namespace: "", URL: "https://a:1"}, `--namespace ""`},
	}
	for _, tt := range tests {
		if _, _, err := Configurations(configBundle(), tt.opts); err == nil || !strings.Contains(err.Error(), tt.want) {
			t.Errorf("Configurations(%+v) = %v, want an error holding %q", tt.opts, err, tt.want)
		}
	}
}
