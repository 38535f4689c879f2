package main

import (
	"bytes"
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"

	"github.com/morph-dev/morph/internal/engine"
	"github.com/morph-dev/morph/internal/objects"
	"github.com/morph-dev/morph/internal/policy"

	"k8s.io/apimachinery/pkg/util/validation/field"
)

// serveTestDialect compiles "test.morph.dev/v1 Label" documents (spec.key, spec.value,
// optional spec.operations and spec.failClose) into mutators setting a label on Pods.
type serveTestDialect struct{}

func (serveTestDialect) Name() string { return "test" }
func (serveTestDialect) Handles(apiVersion, kind string) bool {
	return apiVersion == "test.morph.dev/v1" && kind == "Label"
}

func (serveTestDialect) Compile(docs []policy.Document) (*policy.Bundle, error) {
	b := &policy.Bundle{}
	var errs []error
	for _, d := range docs {
		spec, _ := d.Object["spec"].(map[string]any)
		key, _ := spec["key"].(string)
		value, _ := spec["value"].(string)
		if key == "" {
			errs = append(errs, d.Err(field.Required(field.NewPath("spec", "key"), "name the label to set")))
			continue
		}
		ops := []string{"*"}
		if list, ok := spec["operations"].([]any); ok {
			ops = ops[:0]
			for _, o := range list {
				s, _ := o.(string)
				ops = append(ops, s)
			}
		}
		opSet, err := engine.OperationsOf(ops...)
		if err != nil {
			errs = append(errs, d.Wrap(field.NewPath("spec", "operations"), nil, err))
			continue
		}
		failClose, _ := spec["failClose"].(bool)
		m := &serveTestMutator{name: d.Name(), key: key, value: value, ops: opSet, failClose: failClose}
		b.Mutators = append(b.Mutators, engine.Mutator{
			Descriptor: engine.Descriptor{ID: m.ID(), Targets: m.Targets(), Reinvocation: m.Reinvocation(), FailurePolicy: m.FailurePolicy()},
			Mutate:     m.Mutate,
		})
	}
	return b, errors.Join(errs...)
}

type serveTestMutator struct {
	name, key, value string
	ops              engine.OperationSet
	failClose        bool
}

func (m *serveTestMutator) ID() engine.ID {
	return engine.ID{Dialect: "test", Kind: "Label", Name: m.name}
}
func (m *serveTestMutator) Targets() []engine.Target {
	return []engine.Target{{Group: "", Version: "v1", Kind: "Pod", Operations: m.ops}}
}
func (m *serveTestMutator) Reinvocation() engine.Reinvocation { return engine.ReinvokeIfNeeded }
func (m *serveTestMutator) FailurePolicy() engine.FailurePolicy {
	if m.failClose {
		return engine.FailClose
	}
	return engine.FailIgnore
}

func (m *serveTestMutator) Mutate(_ context.Context, _ *engine.Request, obj map[string]any, w *engine.Writer) (map[string]any, error) {
	md, _ := obj["metadata"].(map[string]any)
	labels, _ := md["labels"].(map[string]any)
	if labels[m.key] == m.value {
		return obj, nil
	}
	out, md, labels := w.Map(obj), w.Map(md), w.Map(labels)
	labels[m.key] = m.value
	md["labels"], out["metadata"] = labels, md
	w.Changed(engine.Pointer("metadata", "labels", m.key))
	return out, nil
}

func serveTestLoader(*objects.Store) *policy.Loader { return policy.NewLoader(serveTestDialect{}) }

const serveTestPolicy = `apiVersion: test.morph.dev/v1
kind: Label
metadata: {name: team}
spec: {key: team, value: payments}
`

func writeServeFile(t *testing.T, path, content string) {
	t.Helper()
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, []byte(content), 0o644); err != nil {
		t.Fatal(err)
	}
}

// executeServe runs "serve" with args under ctx and returns its error.
func executeServe(ctx context.Context, stderr io.Writer, args ...string) error {
	root := &cobra.Command{Use: "morph", SilenceUsage: true, SilenceErrors: true}
	root.AddCommand(newServeCommand(serveTestLoader, nil, io.Discard, stderr))
	root.SetArgs(append([]string{"serve"}, args...))
	return root.ExecuteContext(ctx)
}

func TestServeStartupErrors(t *testing.T) {
	dir := t.TempDir()
	policies := filepath.Join(dir, "policies")
	writeServeFile(t, filepath.Join(policies, "team.yaml"), serveTestPolicy)
	tests := []struct {
		name string
		env  map[string]string
		args []string
		want string
	}{
		{"admission without conversion (environment)", map[string]string{envAdmission: "true", envConversion: "false"}, []string{"--cert-dir", dir},
			"ENABLE_ADMISSION_WEBHOOK requires ENABLE_CONVERSION — set ENABLE_CONVERSION=true"},
		{"admission without conversion (flags)", nil, []string{"--admission", "--conversion=false", "--cert-dir", dir},
			"ENABLE_ADMISSION_WEBHOOK requires ENABLE_CONVERSION — give --conversion=true instead of --conversion=false"},
		{"admission from the environment, conversion off by flag", map[string]string{envAdmission: "true"}, []string{"--conversion=false", "--cert-dir", dir},
			"ENABLE_ADMISSION_WEBHOOK requires ENABLE_CONVERSION — give --conversion=true instead of --conversion=false"},
		{"conversion off alone (environment)", map[string]string{envConversion: "false"}, []string{"--cert-dir", dir},
			"nothing to serve: ENABLE_CONVERSION=false turns off /convert, and with it /mutate and /validate, as admission requires conversion — set ENABLE_CONVERSION=true"},
		{"conversion off alone (flags)", nil, []string{"--conversion=false", "--cert-dir", dir},
			"nothing to serve: --conversion=false turns off /convert, and with it /mutate and /validate, as admission requires conversion — give --conversion=true instead of --conversion=false"},
		{"conversion off and an empty admission variable", map[string]string{envAdmission: "", envConversion: "false"}, []string{"--cert-dir", dir},
			"nothing to serve: ENABLE_CONVERSION=false turns off /convert"},
		{"nothing to serve", map[string]string{envAdmission: "false", envConversion: "false"}, []string{"--cert-dir", dir},
			"nothing to serve: ENABLE_ADMISSION_WEBHOOK=false and ENABLE_CONVERSION=false turn off every webhook — set ENABLE_CONVERSION=true"},
		{"a bad boolean", map[string]string{envConversion: "sure"}, []string{"--cert-dir", dir},
			`ENABLE_CONVERSION="sure" is not a boolean`},
		{"empty ENABLE_ variables count as unset", map[string]string{envAdmission: "", envConversion: ""}, nil,
			"TLS_CERT is required"},
		{"a bad boolean under a flag is not read", map[string]string{envConversion: "sure"}, []string{"--conversion=true"},
			"TLS_CERT is required"},
		{"TLS_CERT without TLS_KEY", map[string]string{envTLSCert: "/x/tls.crt"}, nil,
			"TLS_CERT requires TLS_KEY"},
		{"no certificate at all", nil, nil,
			"TLS_CERT is required — set TLS_CERT and TLS_KEY (--tls-cert, --tls-key), or give --cert-dir DIR"},
		{"a certificate and a folder", nil, []string{"--cert-dir", dir, "--tls-cert", "/x/tls.crt", "--tls-key", "/x/tls.key"},
			"--cert-dir excludes --tls-cert and --tls-key — give --cert-dir DIR, or --tls-cert FILE and --tls-key FILE"},
		{"a key and a folder", nil, []string{"--cert-dir", dir, "--tls-key", "/x/tls.key"},
			"--cert-dir excludes --tls-cert and --tls-key"},
		// Past check(): --cert-dir wins over TLS_CERT and TLS_KEY, the body limit is next.
		{"TLS_CERT and TLS_KEY under a folder", map[string]string{envTLSCert: "/x/tls.crt", envTLSKey: "/x/tls.key"}, []string{"--cert-dir", dir, "--max-body", "lots"},
			`--max-body "lots"`},
		{"TLS_CERT alone under a folder", map[string]string{envTLSCert: "/x/tls.crt"}, []string{"--cert-dir", dir, "--max-body", "lots"},
			`--max-body "lots"`},
		{"no policies", nil, []string{"--policies=", "--cert-dir", dir}, "--policies is required"},
		{"a bad body limit", nil, []string{"--cert-dir", dir, "--max-body", "lots"}, `--max-body "lots"`},
		{"a bad log format", nil, []string{"--cert-dir", dir, "--log-format", "xml"}, `--log-format "xml"`},
		{"a negative heap floor", nil, []string{"--cert-dir", dir, "--gc-heap-floor", "-1Mi"}, `--gc-heap-floor "-1Mi" is not a size`},
		{"a heap floor that is no size", nil, []string{"--cert-dir", dir, "--gc-heap-floor", "big"}, `--gc-heap-floor "big" is not a size`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			for _, k := range []string{envAdmission, envConversion, envTLSCert, envTLSKey} {
				v, ok := tt.env[k]
				if !ok {
					v = ""
				}
				t.Setenv(k, v)
				if !ok {
					os.Unsetenv(k)
				}
			}
			args := append([]string{"--policies", policies}, tt.args...)
			err := executeServe(context.Background(), io.Discard, args...)
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Fatalf("error = %v, want one holding %q", err, tt.want)
			}
			if exitCode(err) != exitUsage {
				t.Errorf("exit code %d, want %d", exitCode(err), exitUsage)
			}
			admissionGiven := tt.env[envAdmission] != "" || slices.ContainsFunc(tt.args, func(a string) bool { return strings.HasPrefix(a, "--admission") })
			if !admissionGiven && (strings.Contains(err.Error(), envAdmission) || strings.Contains(err.Error(), "--admission")) {
				t.Errorf("error %q names the admission setting, which the user did not give", err)
			}
		})
	}
}

// TestServeSettings checks how flags and environment variables combine: a flag on the
// command line wins, an empty variable counts as unset, admission follows conversion
// unless set, and --cert-dir hides TLS_CERT and TLS_KEY.
func TestServeSettings(t *testing.T) {
	const specError = "ENABLE_ADMISSION_WEBHOOK requires ENABLE_CONVERSION — set ENABLE_CONVERSION=true" // spec 000, error reference
	tests := []struct {
		name                       string
		env                        map[string]string
		args                       []string
		wantAdmission, wantConv    bool
		wantCert, wantKey, wantErr string
	}{
		{name: "defaults", args: []string{"--cert-dir", "d"}, wantAdmission: true, wantConv: true},
		{name: "admission off serves conversion", env: map[string]string{envAdmission: "false"}, args: []string{"--cert-dir", "d"},
			wantConv: true},
		{name: "conversion off alone turns admission off", env: map[string]string{envConversion: "false"}, args: []string{"--cert-dir", "d"},
			wantErr: "nothing to serve: ENABLE_CONVERSION=false turns off /convert, and with it /mutate and /validate, as admission requires conversion — set ENABLE_CONVERSION=true"},
		{name: "admission set with conversion off (environment)", env: map[string]string{envAdmission: "true", envConversion: "false"}, args: []string{"--cert-dir", "d"},
			wantAdmission: true, wantErr: specError},
		{name: "admission set with conversion off (1, environment)", env: map[string]string{envAdmission: "1", envConversion: "0"}, args: []string{"--cert-dir", "d"},
			wantAdmission: true, wantErr: specError},
		{name: "admission flag with conversion off (environment)", env: map[string]string{envConversion: "false"}, args: []string{"--admission", "--cert-dir", "d"},
			wantAdmission: true, wantErr: specError},
		{name: "admission set with conversion off (flags)", args: []string{"--admission=true", "--conversion=false", "--cert-dir", "d"},
			wantAdmission: true, wantErr: "ENABLE_ADMISSION_WEBHOOK requires ENABLE_CONVERSION — give --conversion=true instead of --conversion=false"},
		{name: "both off", args: []string{"--admission=false", "--cert-dir", "d"}, env: map[string]string{envConversion: "false"},
			wantErr: "nothing to serve: --admission=false and ENABLE_CONVERSION=false turn off every webhook — set ENABLE_CONVERSION=true (admission requires conversion)"},
		{name: "a flag wins over the environment", env: map[string]string{envAdmission: "false", envConversion: "false"}, args: []string{"--admission", "--conversion", "--cert-dir", "d"},
			wantAdmission: true, wantConv: true},
		{name: "a flag wins over a bad value", env: map[string]string{envConversion: "sure"}, args: []string{"--conversion=true", "--cert-dir", "d"},
			wantAdmission: true, wantConv: true},
		{name: "a bad value", env: map[string]string{envAdmission: "yes please"}, args: []string{"--cert-dir", "d"},
			wantAdmission: true, wantConv: true, wantErr: `ENABLE_ADMISSION_WEBHOOK="yes please" is not a boolean — set ENABLE_ADMISSION_WEBHOOK=true or ENABLE_ADMISSION_WEBHOOK=false`},
		{name: "empty variables are unset", env: map[string]string{envAdmission: "", envConversion: ""}, args: []string{"--cert-dir", "d"},
			wantAdmission: true, wantConv: true},
		{name: "blank variables are unset", env: map[string]string{envAdmission: " ", envConversion: "\t"}, args: []string{"--cert-dir", "d"},
			wantAdmission: true, wantConv: true},
		{name: "an empty admission variable follows conversion", env: map[string]string{envAdmission: "", envConversion: "false"}, args: []string{"--cert-dir", "d"},
			wantErr: "nothing to serve: ENABLE_CONVERSION=false turns off /convert, and with it /mutate and /validate, as admission requires conversion — set ENABLE_CONVERSION=true"},
		{name: "certificate from the environment", env: map[string]string{envTLSCert: "/env/tls.crt", envTLSKey: "/env/tls.key"},
			wantAdmission: true, wantConv: true, wantCert: "/env/tls.crt", wantKey: "/env/tls.key"},
		{name: "certificate flags win over the environment", env: map[string]string{envTLSCert: "/env/tls.crt", envTLSKey: "/env/tls.key"}, args: []string{"--tls-cert", "/flag/tls.crt", "--tls-key", "/flag/tls.key"},
			wantAdmission: true, wantConv: true, wantCert: "/flag/tls.crt", wantKey: "/flag/tls.key"},
		{name: "--cert-dir wins over TLS_CERT and TLS_KEY", env: map[string]string{envTLSCert: "/env/tls.crt", envTLSKey: "/env/tls.key"}, args: []string{"--cert-dir", "d"},
			wantAdmission: true, wantConv: true},
		{name: "--cert-dir wins over TLS_CERT alone", env: map[string]string{envTLSCert: "/env/tls.crt"}, args: []string{"--cert-dir", "d"},
			wantAdmission: true, wantConv: true},
		{name: "an empty --cert-dir leaves TLS_CERT and TLS_KEY", env: map[string]string{envTLSCert: "/env/tls.crt", envTLSKey: "/env/tls.key"}, args: []string{"--cert-dir="},
			wantAdmission: true, wantConv: true, wantCert: "/env/tls.crt", wantKey: "/env/tls.key"},
		{name: "an empty TLS_CERT is unset", env: map[string]string{envTLSCert: "", envTLSKey: ""}, args: []string{"--cert-dir", "d"},
			wantAdmission: true, wantConv: true},
		{name: "--cert-dir and --tls-cert", args: []string{"--cert-dir", "d", "--tls-cert", "/flag/tls.crt", "--tls-key", "/flag/tls.key"},
			wantAdmission: true, wantConv: true, wantCert: "/flag/tls.crt", wantKey: "/flag/tls.key",
			wantErr: "--cert-dir excludes --tls-cert and --tls-key — give --cert-dir DIR, or --tls-cert FILE and --tls-key FILE"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			o := &serveOptions{}
			flags := pflag.NewFlagSet("serve", pflag.ContinueOnError)
			o.addFlags(flags)
			if err := flags.Parse(append([]string{"--policies", "p"}, tt.args...)); err != nil {
				t.Fatal(err)
			}
			err := o.fromEnvironment(flags, func(k string) (string, bool) { v, ok := tt.env[k]; return v, ok })
			if err == nil {
				err = o.check()
			}
			if got := fmt.Sprint(err); (tt.wantErr == "" && err != nil) || (tt.wantErr != "" && got != tt.wantErr) {
				t.Errorf("error = %v, want %q", err, tt.wantErr)
			}
			if err != nil && exitCode(err) != exitUsage {
				t.Errorf("exit code %d, want %d", exitCode(err), exitUsage)
			}
			if o.admission != tt.wantAdmission || o.conversion != tt.wantConv {
				t.Errorf("admission, conversion = %t, %t, want %t, %t", o.admission, o.conversion, tt.wantAdmission, tt.wantConv)
			}
			if o.tlsCert != tt.wantCert || o.tlsKey != tt.wantKey {
				t.Errorf("tls-cert, tls-key = %q, %q, want %q, %q", o.tlsCert, o.tlsKey, tt.wantCert, tt.wantKey)
			}
		})
	}
}

func freeLoopbackAddr(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	return ln.Addr().String()
}

func TestServeCommandServesAndStops(t *testing.T) {
	for _, k := range []string{envAdmission, envConversion, envTLSCert, envTLSKey} {
		t.Setenv(k, "")
		os.Unsetenv(k)
	}
	dir := t.TempDir()
	policies, certs := filepath.Join(dir, "policies"), filepath.Join(dir, "certs")
	writeServeFile(t, filepath.Join(policies, "team.yaml"), serveTestPolicy)
	addr := freeLoopbackAddr(t)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var logs syncBuffer
	done := make(chan error, 1)
	go func() {
		done <- executeServe(ctx, &logs, "--policies", policies, "--cert-dir", certs, "--addr", addr,
			"--reload-interval", "50ms", "--log-format", "json", "--log-level", "debug")
	}()

	base := "https://" + addr
	client := waitReady(t, filepath.Join(certs, "ca.crt"), base, done)

	review := `{"apiVersion":"admission.k8s.io/v1","kind":"AdmissionReview","request":{"uid":"cli-1","kind":{"group":"","version":"v1","kind":"Pod"},` +
		`"resource":{"group":"","version":"v1","resource":"pods"},"operation":"CREATE","namespace":"apps","name":"p",` +
		`"object":{"apiVersion":"v1","kind":"Pod","metadata":{"name":"p","namespace":"apps"}}}}`
	resp, err := client.Post(base+"/mutate?timeout=10s", "application/json", strings.NewReader(review))
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	var answer struct {
		Response struct {
			UID     string `json:"uid"`
			Allowed bool   `json:"allowed"`
			Patch   []byte `json:"patch"`
		} `json:"response"`
	}
	if err := json.Unmarshal(body, &answer); err != nil || answer.Response.UID != "cli-1" || !answer.Response.Allowed {
		t.Fatalf("answer %s: %v", body, err)
	}
	if want := `[{"op":"add","path":"/metadata/labels","value":{"team":"payments"}}]`; string(answer.Response.Patch) != want {
		t.Errorf("patch = %s, want %s", answer.Response.Patch, want)
	}

	// A broken edit keeps serving; the reason shows in /readyz.
	writeServeFile(t, filepath.Join(policies, "broken.yaml"), "apiVersion: test.morph.dev/v1\nkind: Label\nmetadata: {name: nokey}\nspec: {}\n")
	deadline := time.Now().Add(5 * time.Second)
	for {
		r, err := client.Get(base + "/readyz")
		if err != nil {
			t.Fatal(err)
		}
		text, _ := io.ReadAll(r.Body)
		r.Body.Close()
		if r.StatusCode == http.StatusOK && bytes.Contains(text, []byte("spec.key: Required value: name the label to set")) {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the broken file never showed in /readyz: %d %s", r.StatusCode, text)
		}
		time.Sleep(20 * time.Millisecond)
	}

	cancel()
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("serve returned %v after the stop signal, want nil", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("serve did not stop")
	}
	for _, want := range []string{`"caBundle":"` + filepath.Join(certs, "ca.crt"), `"uid":"cli-1"`, `"msg":"policy reload failed; serving the last good policies"`, `"msg":"stopped"`} {
		if !strings.Contains(logs.String(), want) {
			t.Errorf("logs lack %s:\n%s", want, logs.String())
		}
	}
	if info, err := os.Stat(filepath.Join(certs, "tls.key")); err != nil || info.Mode().Perm() != 0o600 {
		t.Errorf("tls.key: %v %v, want mode 0600", info, err)
	}
}

// syncBuffer is a bytes.Buffer safe for the server's logger and the test.
type syncBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *syncBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *syncBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}

// waitReady waits for the server to write its CA, then for /readyz to answer 200, and
// returns a client trusting that CA.
func waitReady(t *testing.T, caFile, base string, done <-chan error) *http.Client {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	var client *http.Client
	for {
		select {
		case err := <-done:
			t.Fatalf("serve stopped: %v", err)
		default:
		}
		if client == nil {
			if pem, err := os.ReadFile(caFile); err == nil {
				roots := x509.NewCertPool()
				if !roots.AppendCertsFromPEM(pem) {
					t.Fatalf("%s holds no certificate", caFile)
				}
				client = &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: roots}}}
			}
		}
		var err error
		if client != nil {
			var resp *http.Response
			if resp, err = client.Get(base + "/readyz"); err == nil {
				resp.Body.Close()
				if resp.StatusCode == http.StatusOK {
					return client
				}
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("serve never became ready: %v", err)
		}
		time.Sleep(20 * time.Millisecond)
	}
}
