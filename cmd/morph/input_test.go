package main

import (
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
			`-: document 1 (Assing "a"): kind: "Assing" is not a kind of mutations.gatekeeper.sh: the group has Assign, AssignImage, AssignMetadata, ModifySet`},
		{"misspelled Kyverno kind", []string{"apply", "-p", "-", "-f", examples + "/manifests"}, "apiVersion: policies.kyverno.io/v1\nkind: MutatingPolicyy\nmetadata: {name: a}\nspec: {}\n", exitError,
			`kind: "MutatingPolicyy" is not a kind of policies.kyverno.io: the group has MutatingPolicy,`},
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
