package main

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/spf13/cobra"
)

func executeGenerateWebhooks(args ...string) (string, string, error) {
	var stdout, stderr bytes.Buffer
	root := &cobra.Command{Use: "morph", SilenceUsage: true, SilenceErrors: true}
	root.AddCommand(newGenerateWebhooksCommand(serveTestLoader, &stdout, &stderr))
	root.SetArgs(append([]string{"webhooks"}, args...))
	err := root.Execute()
	return stdout.String(), stderr.String(), err
}

const generateWebhooksPolicies = `apiVersion: test.morph.dev/v1
kind: Label
metadata: {name: team}
spec: {key: team, value: payments}
---
apiVersion: test.morph.dev/v1
kind: Label
metadata: {name: create-only}
spec: {key: created, value: "yes", operations: [CREATE]}
---
apiVersion: test.morph.dev/v1
kind: Label
metadata: {name: strict}
spec: {key: strict, value: "yes", failClose: true}
`

const testCA = "-----BEGIN CERTIFICATE-----\nMIIBtest\n-----END CERTIFICATE-----\n"

func TestGenerateWebhooks(t *testing.T) {
	dir := t.TempDir()
	policies := filepath.Join(dir, "policies")
	writeServeFile(t, filepath.Join(policies, "labels.yaml"), generateWebhooksPolicies)
	ca := filepath.Join(dir, "ca.crt")
	writeServeFile(t, ca, testCA)
	empty := filepath.Join(dir, "empty")
	writeServeFile(t, filepath.Join(empty, "ns.yaml"), "apiVersion: v1\nkind: Namespace\nmetadata: {name: apps}\n")
	broken := filepath.Join(dir, "broken")
	writeServeFile(t, filepath.Join(broken, "bad.yaml"), "apiVersion: test.morph.dev/v1\nkind: Label\nmetadata: {name: nokey}\nspec: {}\n")

	tests := []struct {
		name     string
		env      map[string]string
		args     []string
		golden   string // file under testdata/generate-webhooks
		stderr   string
		err      string
		exitCode int
	}{
		{name: "url and CA file", args: []string{"--policies", policies, "--url", "https://127.0.0.1:8443", "--ca-file", ca}, golden: "url.yaml"},
		{name: "service with the CA from TLS_CERT", env: map[string]string{envTLSCert: ca}, args: []string{"--policies", policies, "--service", "morph-system/morph:8443", "--namespace", "morph-system", "--name", "morph-webhooks"}, golden: "service.yaml"},
		{name: "service without a CA", args: []string{"--policies", policies, "--service", "morph-system/morph"},
			err: "webhook registration: reading CA bundle: TLS_CERT is required — give --ca-file FILE", exitCode: exitUsage},
		{name: "url without a CA warns", args: []string{"--policies", policies, "--url", "https://127.0.0.1:8443"}, stderr: "warning: no caBundle"},
		{name: "a CA file that is not PEM", args: []string{"--policies", policies, "--url", "https://a:1", "--ca-file", filepath.Join(policies, "labels.yaml")}, err: "holds no PEM certificate", exitCode: exitError},
		{name: "a bad service", args: []string{"--policies", policies, "--service", "morph"}, err: `--service "morph": use NAMESPACE/NAME`, exitCode: exitUsage},
		{name: "a bad url", args: []string{"--policies", policies, "--url", "http://a:1"}, err: "use https://HOST:PORT", exitCode: exitUsage},
		{name: "no policies flag", args: []string{"--url", "https://a:1"}, err: "--policies is required", exitCode: exitUsage},
		{name: "a broken policy", args: []string{"--policies", broken, "--url", "https://a:1", "--ca-file", ca},
			stderr: `bad.yaml: document 1 (Label "nokey"): spec.key: Required value: name the label to set`, err: "the policies did not load", exitCode: exitError},
		{name: "nothing to register", args: []string{"--policies", empty, "--url", "https://a:1", "--ca-file", ca}, stderr: "no webhook configuration to print"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Setenv(envTLSCert, "")
			os.Unsetenv(envTLSCert)
			for k, v := range tt.env {
				t.Setenv(k, v)
			}
			stdout, stderr, err := executeGenerateWebhooks(tt.args...)
			if tt.err != "" {
				if err == nil || !strings.Contains(err.Error(), tt.err) {
					t.Fatalf("error = %v, want one holding %q", err, tt.err)
				}
				if exitCode(err) != tt.exitCode {
					t.Errorf("exit code %d, want %d", exitCode(err), tt.exitCode)
				}
			} else if err != nil {
				t.Fatalf("error = %v\n%s", err, stderr)
			}
			if !strings.Contains(stderr, tt.stderr) {
				t.Errorf("stderr = %q, want it to hold %q", stderr, tt.stderr)
			}
			if tt.golden != "" {
				golden(t, filepath.Join("generate-webhooks", tt.golden), stdout)
			}
		})
	}
}
