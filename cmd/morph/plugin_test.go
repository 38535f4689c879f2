package main

import (
	"bytes"
	"strings"
	"testing"
)

// TestKubectlPluginName: installed as kubectl-morph, usage and help say "kubectl morph".
func TestKubectlPluginName(t *testing.T) {
	for argv0, want := range map[string]string{
		"morph": "morph", "/usr/local/bin/morph": "morph",
		"kubectl-morph": "kubectl morph", "/home/me/.krew/bin/kubectl-morph": "kubectl morph",
	} {
		if got := displayName(argv0); got != want {
			t.Errorf("displayName(%q) = %q, want %q", argv0, got, want)
		}
	}
	var stdout, stderr bytes.Buffer
	if code := runAs("kubectl morph", []string{"apply", "--help"}, strings.NewReader(""), &stdout, &stderr); code != exitOK {
		t.Fatalf("apply --help: exit %d\n%s", code, stderr.String())
	}
	if !strings.Contains(stdout.String(), "\n  kubectl morph apply -p POLICY") {
		t.Errorf("apply --help as a kubectl plugin does not say kubectl morph:\n%s", stdout.String())
	}
	stdout.Reset()
	if code := run([]string{"apply", "--help"}, strings.NewReader(""), &stdout, &stderr); code != exitOK || !strings.Contains(stdout.String(), "\n  morph apply -p POLICY") {
		t.Errorf("apply --help as morph: exit %d\n%s", code, stdout.String())
	}
}
