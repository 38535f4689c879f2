package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// Hostile and careless inputs fail cleanly, and numbers no policy touches come out as
// they went in.
func TestApplyInputBounds(t *testing.T) {
	pol := examples + "/policies"
	tests := []struct {
		name    string
		args    []string
		stdin   string
		code    int
		wantErr string
	}{
		{"policies from /dev/zero", []string{"apply", "--max-input", "1Mi", "-p", "/dev/zero", "-f", "-"}, "", exitError, "/dev/zero: larger than 1048576 bytes: raise --max-input"},
		{"objects from /dev/urandom", []string{"apply", "--max-input", "1Mi", "-p", pol, "-f", "/dev/urandom"}, "", exitError, "/dev/urandom: larger than 1048576 bytes"},
		{"bad --max-input", []string{"apply", "--max-input", "-1", "-p", pol, "-f", "-"}, "", exitUsage, "--max-input"},
		{"duplicate key", []string{"apply", "-p", pol, "-f", "-"}, "apiVersion: v1\nkind: Pod\nmetadata: {name: a}\nspec:\n  hostNetwork: false\n  hostNetwork: true\n", exitError, "-: document 1: duplicate key"},
		{"misspelled Gatekeeper kind", []string{"apply", "-p", "-", "-f", examples + "/manifests"}, "apiVersion: mutations.gatekeeper.sh/v1\nkind: Assing\nmetadata: {name: a}\nspec: {}\n", exitError,
			`-: document 1 (Assing "a"): kind: Invalid value: "Assing": not a kind of mutations.gatekeeper.sh; use one of its kinds: Assign, AssignImage, AssignMetadata, ModifySet`},
		{"misspelled Kyverno kind", []string{"apply", "-p", "-", "-f", examples + "/manifests"}, "apiVersion: policies.kyverno.io/v1\nkind: MutatingPolicyy\nmetadata: {name: a}\nspec: {}\n", exitError,
			`kind: Invalid value: "MutatingPolicyy": not a kind of policies.kyverno.io; use one of its kinds: MutatingPolicy,`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, errOut, code := runMorph(t, tt.stdin, tt.args...)
			if code != tt.code || !strings.Contains(errOut, tt.wantErr) {
				t.Fatalf("exit %d (want %d): %s (want %q)", code, tt.code, errOut, tt.wantErr)
			}
		})
	}
}

func TestApplyKeepsIntegersExact(t *testing.T) {
	in := "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: big, namespace: default}\nspec:\n  runAsUser: 9007199254740993\n  activeDeadlineSeconds: 9223372036854775807\n"
	out, errOut, code := runMorph(t, in, "apply", "-p", examples+"/policies", "--context", examples+"/context", "-f", "-")
	if code != exitOK {
		t.Fatalf("exit %d: %s", code, errOut)
	}
	for _, want := range []string{"runAsUser: 9007199254740993", "activeDeadlineSeconds: 9223372036854775807"} {
		if !strings.Contains(out, want) {
			t.Errorf("output lacks %q:\n%s", want, out)
		}
	}
}

func TestServeRequestTimeoutMustBePositive(t *testing.T) {
	for _, d := range []string{"-1s", "0"} {
		_, errOut, code := runMorph(t, "", "serve", "--policies", examples+"/policies", "--cert-dir", t.TempDir(), "--request-timeout", d)
		if code != exitUsage || !strings.Contains(errOut, "--request-timeout") {
			t.Errorf("--request-timeout %s: exit %d: %s", d, code, errOut)
		}
	}
}

// morph convert bounds a conversion path's template as the server does.
func TestConvertTemplateBudget(t *testing.T) {
	dir := t.TempDir()
	katalog := `apiVersion: orkestra.orkspace.io/v1
kind: Katalog
metadata: {name: hostile}
spec:
  crds:
    widget:
      apiTypes: {group: demo.morph.dev, version: v1, kind: Widget, plural: widgets}
      conversion:
        storageVersion: v1
        paths:
        - {from: v1, to: v2, spec: {range: "{{ range 100000000000 }}{{ end }}"}}
        - {from: v2, to: v1, spec: {range: "{{ .spec.range }}"}}
    widget-v2:
      apiTypes: {group: demo.morph.dev, version: v2, kind: Widget, plural: widgets}
      conversion: {participant: true}
`
	if err := os.WriteFile(filepath.Join(dir, "k.yaml"), []byte(katalog), 0o644); err != nil {
		t.Fatal(err)
	}
	in := "apiVersion: demo.morph.dev/v1\nkind: Widget\nmetadata: {name: w}\nspec: {range: a}\n"
	_, errOut, code := runMorph(t, in, "convert", "-p", filepath.Join(dir, "k.yaml"), "-f", "-", "--to", "demo.morph.dev/v2")
	if code != exitError || !strings.Contains(errOut, "budget of 100000 steps") {
		t.Fatalf("exit %d: %s", code, errOut)
	}
}
