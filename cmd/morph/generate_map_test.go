package main

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestGenerateMap(t *testing.T) {
	tests := []struct {
		name       string
		args       []string
		stdin      string
		wantErr    bool
		wantOut    []string
		wantNoOut  []string
		wantStderr []string
	}{
		{
			name: "policy without Kyverno-only features",
			args: []string{"-p", filepath.Join("testdata", "generate-map", "simple.yaml")},
			wantOut: []string{
				"kind: MutatingAdmissionPolicy", "name: add-labels-jsonpatch", "failurePolicy: Fail",
				"reinvocationPolicy: Never", "jsonpatch.escapeKey", "---", "kind: MutatingAdmissionPolicyBinding",
				"policyName: add-labels-jsonpatch",
			},
			wantStderr: []string{"timeoutSeconds is left out", "note: testdata/generate-map/simple.yaml: document 1 (MutatingPolicy \"add-labels-jsonpatch\"): Kyverno 1.19 also applies this Pod policy to the pod templates of cronjobs, daemonsets, deployments, jobs, replicasets, statefulsets (autogen is on by default"},
		},
		{
			name: "Kyverno's default autogen is said in the map",
			args: []string{"-p", filepath.Join("testdata", "generate-map", "simple.yaml")},
			wantOut: []string{
				"# note: testdata/generate-map/simple.yaml: document 1 (MutatingPolicy \"add-labels-jsonpatch\"): Kyverno 1.19 also applies this Pod policy",
				"Set spec.autogen.podControllers.controllers: [] in the MutatingPolicy for Kyverno to do the same",
			},
		},
		{
			name:       "no autogen note when autogen is off",
			args:       []string{"-p", filepath.Join("testdata", "generate-map", "autogen-off.yaml")},
			wantOut:    []string{"kind: MutatingAdmissionPolicy"},
			wantNoOut:  []string{"autogen is on by default"},
			wantStderr: []string{},
		},
		{
			name:    "Kyverno-only features are named",
			args:    []string{"-p", filepath.Join("testdata", "generate-map", "kyverno-only.yaml")},
			wantErr: true,
			wantStderr: []string{
				`spec.variables[0].expression: Forbidden: the CEL library function image() exists only in Kyverno; a MutatingAdmissionPolicy cannot express it`,
				`(MutatingPolicy "existing"): spec.evaluation.mutateExisting: Forbidden: mutating existing objects exists only in Kyverno`,
			},
		},
		{
			name:    "standard input",
			args:    []string{"-p", "-"},
			stdin:   mustRead(t, filepath.Join("testdata", "generate-map", "simple.yaml")),
			wantOut: []string{"kind: MutatingAdmissionPolicy"},
		},
		{name: "no policy flag", wantErr: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var stdout, stderr bytes.Buffer
			cmd := newGenerateMapCommand(strings.NewReader(tt.stdin), &stdout, &stderr)
			cmd.SetArgs(tt.args)
			err := cmd.Execute()
			if (err != nil) != tt.wantErr {
				t.Fatalf("error = %v, want error %v; stderr:\n%s", err, tt.wantErr, stderr.String())
			}
			for _, w := range tt.wantOut {
				if !strings.Contains(stdout.String(), w) {
					t.Errorf("stdout lacks %q:\n%s", w, stdout.String())
				}
			}
			for _, w := range tt.wantNoOut {
				if strings.Contains(stdout.String()+stderr.String(), w) {
					t.Errorf("output has %q:\n%s%s", w, stdout.String(), stderr.String())
				}
			}
			for _, w := range tt.wantStderr {
				if !strings.Contains(stderr.String(), w) {
					t.Errorf("stderr lacks %q:\n%s", w, stderr.String())
				}
			}
		})
	}
}

func mustRead(t *testing.T, path string) string {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}
