package e2e

import (
	"bufio"
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
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	admissionv1 "k8s.io/api/admission/v1"
	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	k8sruntime "k8s.io/apimachinery/pkg/runtime"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
	"sigs.k8s.io/yaml"

	"github.com/morph-dev/morph/test/e2e/controlplane"
)

// Bounds of the morph serve process test.
const (
	serveBuildTimeout = 5 * time.Minute
	serveReadyTimeout = 30 * time.Second
	serveExitTimeout  = 15 * time.Second
	serveStartTries   = 3
)

// TestServeProcessStopped runs the morph binary as a process (morph serve --cert-dir),
// registers the configuration morph generate webhooks prints for its Gatekeeper
// policies (failurePolicy Ignore), and checks that
//
//   - an object created while morph runs is stored mutated;
//   - on SIGTERM morph stops accepting connections but finishes a request that is in
//     flight (its handler waits for the body when the signal arrives), then exits 0;
//   - an object created once morph is gone is admitted unmutated (failurePolicy Ignore).
func TestServeProcessStopped(t *testing.T) {
	c := Current(t)
	ns := CreateNamespace(t, "e2e-serve-process-", nil)
	bin := serveBuildMorph(t)
	policies, err := filepath.Abs(filepath.Join(serveTestdata, "process"))
	if err != nil {
		t.Fatal(err)
	}
	certDir := t.TempDir()
	p, addr, client := serveStartMorphProcess(t, bin, policies, certDir)

	// morph generate webhooks, with the ca.crt morph serve wrote.
	out := serveRunMorph(t, bin, "generate", "webhooks", "--policies", policies,
		"--url", "https://"+addr, "--ca-file", filepath.Join(certDir, "ca.crt"), "--name", "e2e-serve-process")
	mutating := serveDecodeMutating(t, out)
	for i := range mutating.Webhooks {
		w := &mutating.Webhooks[i]
		if w.FailurePolicy == nil || *w.FailurePolicy != admissionregistrationv1.Ignore {
			t.Errorf("webhook %s: failurePolicy %v, want Ignore (Gatekeeper's)", w.Name, w.FailurePolicy)
		}
		if w.ClientConfig.URL == nil || !strings.HasPrefix(*w.ClientConfig.URL, "https://"+addr+"/mutate/") {
			t.Errorf("webhook %s calls %v, want https://%s/mutate/<group>", w.Name, w.ClientConfig.URL, addr)
		}
		w.NamespaceSelector = serveNarrow(w.NamespaceSelector, ns.Name)
	}
	CreateMutatingWebhookConfiguration(t, mutating)

	configMaps := c.Kube.CoreV1().ConfigMaps(ns.Name)
	newConfigMap := func(name string) *corev1.ConfigMap {
		return &corev1.ConfigMap{
			ObjectMeta: metav1.ObjectMeta{Name: name, Labels: map[string]string{"app": "e2e"}},
			Data:       map[string]string{"k": "v"},
		}
	}
	if _, err := configMaps.Create(t.Context(), newConfigMap("while-serving"), metav1.CreateOptions{}); err != nil {
		t.Fatalf("create ConfigMap while morph serves: %v", err)
	}
	stored, err := configMaps.Get(t.Context(), "while-serving", metav1.GetOptions{})
	if err != nil {
		t.Fatalf("get ConfigMap: %v", err)
	}
	if stored.Labels["e2e.morph.dev/served-by"] != "morph-process" || stored.Data["mutated"] != "yes" {
		t.Errorf("ConfigMap created while morph serves: labels %v, data %v; want the policies' label and data", stored.Labels, stored.Data)
	}

	// A request in flight when SIGTERM arrives. Go's HTTP server drops a request
	// whose head it reads after shutdown began, so the head goes first, with
	// "Expect: 100-continue": the "100 Continue" answer proves that morph's handler
	// runs and waits for the body, which is sent only once shutdown is under way.
	body := serveAdmissionReview(t, ns.Name, newConfigMap("in-flight"))
	conn, err := tls.Dial("tcp", addr, client.tls)
	if err != nil {
		t.Fatalf("connect to morph: %v", err)
	}
	defer func() { _ = conn.Close() }()
	if err := conn.SetDeadline(time.Now().Add(serveReadyTimeout)); err != nil {
		t.Fatal(err)
	}
	head := fmt.Sprintf("POST /mutate?timeout=10s HTTP/1.1\r\nHost: %s\r\nContent-Type: application/json\r\nContent-Length: %d\r\nExpect: 100-continue\r\n\r\n", addr, len(body))
	if _, err := io.WriteString(conn, head); err != nil {
		t.Fatalf("send the request head: %v", err)
	}
	replies := bufio.NewReader(conn)
	if resp, err := http.ReadResponse(replies, nil); err != nil || resp.StatusCode != http.StatusContinue {
		t.Fatalf("the request head got %v, %v; want 100 Continue", resp, err)
	}

	if err := p.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatalf("SIGTERM morph: %v", err)
	}
	Eventually(t, 10*time.Second, func() error {
		if !p.log.contains("shutting down") {
			return errors.New(`morph has not logged "shutting down" yet`)
		}
		return nil
	})
	// Shutting down: no new connections.
	Eventually(t, 5*time.Second, func() error {
		dialed, err := net.DialTimeout("tcp", addr, time.Second)
		if err != nil {
			return nil //nolint:nilerr // a refused connection is what we wait for
		}
		_ = dialed.Close()
		return errors.New("morph still accepts connections after SIGTERM")
	})
	select {
	case <-p.done:
		t.Fatalf("morph exited with a request in flight: %v\n%s", p.waitErr, p.log)
	default:
	}

	// The body, after SIGTERM: the request is answered in full.
	if _, err := conn.Write(body); err != nil {
		t.Fatalf("send the body after SIGTERM: %v", err)
	}
	resp, err := http.ReadResponse(replies, nil)
	if err != nil {
		t.Fatalf("the request in flight during SIGTERM got no answer: %v", err)
	}
	answer, err := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
	_ = resp.Body.Close()
	if err != nil || resp.StatusCode != http.StatusOK {
		t.Fatalf("the request in flight during SIGTERM: %s, %v: %s", resp.Status, err, answer)
	}
	serveCheckPatched(t, answer)

	select {
	case <-p.done:
	case <-time.After(serveExitTimeout):
		t.Fatalf("morph did not exit within %v of SIGTERM", serveExitTimeout)
	}
	if p.waitErr != nil {
		t.Fatalf("morph serve after SIGTERM: %v, want exit status 0\n%s", p.waitErr, p.log)
	}
	if p.cmd.ProcessState.ExitCode() != 0 {
		t.Fatalf("morph serve exit status %d, want 0", p.cmd.ProcessState.ExitCode())
	}

	// morph is gone: failurePolicy Ignore admits the object unmutated.
	if _, err := configMaps.Create(t.Context(), newConfigMap("after-stop"), metav1.CreateOptions{}); err != nil {
		t.Fatalf("create ConfigMap after morph stopped: %v (failurePolicy Ignore should admit it)", err)
	}
	after, err := configMaps.Get(t.Context(), "after-stop", metav1.GetOptions{})
	if err != nil {
		t.Fatalf("get ConfigMap: %v", err)
	}
	if _, ok := after.Labels["e2e.morph.dev/served-by"]; ok || after.Data["mutated"] != "" {
		t.Errorf("ConfigMap created after morph stopped: labels %v, data %v; want it unmutated", after.Labels, after.Data)
	}
	if after.Labels["app"] != "e2e" || after.Data["k"] != "v" {
		t.Errorf("ConfigMap created after morph stopped: labels %v, data %v; want it as sent", after.Labels, after.Data)
	}
}

// serveBuildMorph builds cmd/morph into a temporary folder.
func serveBuildMorph(t *testing.T) string {
	t.Helper()
	root, err := controlplane.RepoRoot()
	if err != nil {
		t.Fatalf("find the repository root: %v", err)
	}
	bin := filepath.Join(t.TempDir(), "morph")
	ctx, cancel := context.WithTimeout(t.Context(), serveBuildTimeout)
	defer cancel()
	cmd := exec.CommandContext(ctx, "go", "build", "-o", bin, "./cmd/morph")
	cmd.Dir = root
	start := time.Now()
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("go build ./cmd/morph in %s: %v\n%s", root, err, out)
	}
	t.Logf("built morph in %v", time.Since(start).Round(time.Millisecond))
	return bin
}

// serveEnv is the environment of morph processes: the test's, without the variables
// morph serve reads as flag defaults.
func serveEnv() []string {
	return slices.DeleteFunc(os.Environ(), func(kv string) bool {
		name, _, _ := strings.Cut(kv, "=")
		switch name {
		case "ENABLE_ADMISSION_WEBHOOK", "ENABLE_CONVERSION", "TLS_CERT", "TLS_KEY":
			return true
		}
		return false
	})
}

// serveRunMorph runs a morph command to completion and returns its standard output.
func serveRunMorph(t *testing.T, bin string, args ...string) []byte {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, bin, args...)
	cmd.Env = serveEnv()
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		t.Fatalf("morph %s: %v\n%s", strings.Join(args, " "), err, stderr.Bytes())
	}
	if stderr.Len() > 0 {
		t.Logf("morph %s: stderr: %s", args[0], stderr.Bytes())
	}
	return stdout.Bytes()
}

// serveDecodeMutating decodes the output of morph generate webhooks, which must hold
// one MutatingWebhookConfiguration and nothing else.
func serveDecodeMutating(t *testing.T, out []byte) *admissionregistrationv1.MutatingWebhookConfiguration {
	t.Helper()
	reader := utilyaml.NewYAMLReader(bufio.NewReader(bytes.NewReader(out)))
	var mutating *admissionregistrationv1.MutatingWebhookConfiguration
	for range 10 {
		doc, err := reader.Read()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			t.Fatalf("reading the output of morph generate webhooks: %v\n%s", err, out)
		}
		if len(bytes.TrimSpace(doc)) == 0 {
			continue
		}
		var meta metav1.TypeMeta
		if err := yaml.Unmarshal(doc, &meta); err != nil {
			t.Fatalf("decoding the output of morph generate webhooks: %v\n%s", err, doc)
		}
		if meta.Kind != "MutatingWebhookConfiguration" || mutating != nil {
			t.Fatalf("morph generate webhooks printed a %s %s; want exactly one MutatingWebhookConfiguration\n%s", meta.APIVersion, meta.Kind, out)
		}
		mutating = &admissionregistrationv1.MutatingWebhookConfiguration{}
		if err := yaml.UnmarshalStrict(doc, mutating); err != nil {
			t.Fatalf("decoding the MutatingWebhookConfiguration: %v\n%s", err, doc)
		}
	}
	if mutating == nil || len(mutating.Webhooks) == 0 {
		t.Fatalf("morph generate webhooks printed no mutating webhook:\n%s", out)
	}
	return mutating
}

// serveAdmissionReview is the AdmissionReview the API server sends for a CREATE of cm in
// namespace.
func serveAdmissionReview(t *testing.T, namespace string, cm *corev1.ConfigMap) []byte {
	t.Helper()
	cm = cm.DeepCopy()
	cm.APIVersion, cm.Kind, cm.Namespace = "v1", "ConfigMap", namespace
	raw, err := json.Marshal(cm)
	if err != nil {
		t.Fatal(err)
	}
	review := admissionv1.AdmissionReview{
		TypeMeta: metav1.TypeMeta{APIVersion: "admission.k8s.io/v1", Kind: "AdmissionReview"},
		Request: &admissionv1.AdmissionRequest{
			UID:         "e2e-in-flight",
			Kind:        metav1.GroupVersionKind{Version: "v1", Kind: "ConfigMap"},
			Resource:    metav1.GroupVersionResource{Version: "v1", Resource: "configmaps"},
			RequestKind: &metav1.GroupVersionKind{Version: "v1", Kind: "ConfigMap"},
			Name:        cm.Name,
			Namespace:   namespace,
			Operation:   admissionv1.Create,
			Object:      k8sruntime.RawExtension{Raw: raw},
		},
	}
	body, err := json.Marshal(review)
	if err != nil {
		t.Fatal(err)
	}
	return body
}

// serveCheckPatched checks that an AdmissionReview answer admits the in-flight
// ConfigMap with the policies' patch.
func serveCheckPatched(t *testing.T, answer []byte) {
	t.Helper()
	var review admissionv1.AdmissionReview
	if err := json.Unmarshal(answer, &review); err != nil || review.Response == nil {
		t.Fatalf("the request in flight during SIGTERM: not an AdmissionReview answer (%v): %s", err, answer)
	}
	r := review.Response
	if r.UID != "e2e-in-flight" || !r.Allowed || r.PatchType == nil || *r.PatchType != admissionv1.PatchTypeJSONPatch {
		t.Fatalf("the request in flight during SIGTERM: answer %s; want uid e2e-in-flight, allowed, a JSONPatch", answer)
	}
	var ops []struct {
		Op    string `json:"op"`
		Path  string `json:"path"`
		Value any    `json:"value"`
	}
	if err := json.Unmarshal(r.Patch, &ops); err != nil {
		t.Fatalf("the request in flight during SIGTERM: patch %s: %v", r.Patch, err)
	}
	want := map[string]any{"/data/mutated": "yes", "/metadata/labels/e2e.morph.dev~1served-by": "morph-process"}
	for _, op := range ops {
		if v, ok := want[op.Path]; ok && op.Op == "add" && op.Value == v {
			delete(want, op.Path)
		}
	}
	if len(want) > 0 {
		t.Errorf("the request in flight during SIGTERM: patch %s lacks %v", r.Patch, want)
	}
}

// serveProcess is a running morph serve.
type serveProcess struct {
	cmd     *exec.Cmd
	log     *serveLog
	done    chan struct{} // closed once the process exited and was reaped
	waitErr error         // valid once done is closed
}

// serveLog collects a process's output.
type serveLog struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (l *serveLog) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.buf.Write(p)
}

func (l *serveLog) contains(s string) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	return strings.Contains(l.buf.String(), s)
}

func (l *serveLog) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.buf.String()
}

// serveClient reaches a morph process over HTTPS, trusting the CA it generated.
type serveClient struct {
	tls  *tls.Config
	http *http.Client
}

// serveStartMorphProcess starts morph serve on a free port of 127.0.0.1 with a
// generated certificate in certDir and waits until /readyz answers 200. A port taken
// between picking and binding is retried with another one.
func serveStartMorphProcess(t *testing.T, bin, policies, certDir string) (*serveProcess, string, *serveClient) {
	t.Helper()
	for try := 1; ; try++ {
		addr := serveFreeAddr(t)
		p := serveStart(t, bin, "serve", "--policies", policies, "--cert-dir", certDir, "--addr", addr, "--log-level", "debug")
		client, err := serveAwaitReady(p, addr, certDir)
		if err == nil {
			t.Logf("morph serve ready at https://%s", addr)
			return p, addr, client
		}
		if try < serveStartTries && p.log.contains("address already in use") {
			t.Logf("morph serve could not bind %s; trying another port", addr)
			continue
		}
		t.Fatalf("morph serve: %v\n%s", err, p.log)
	}
}

// serveFreeAddr picks a free port on 127.0.0.1.
func serveFreeAddr(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatalf("pick a free port: %v", err)
	}
	addr := ln.Addr().String()
	if err := ln.Close(); err != nil {
		t.Fatal(err)
	}
	return addr
}

// serveStart starts bin with args. The process is started from a goroutine locked to
// its OS thread for as long as the process runs, with Pdeathsig SIGKILL, so that it
// dies with the test binary; it is killed at test cleanup if still running.
func serveStart(t *testing.T, bin string, args ...string) *serveProcess {
	t.Helper()
	cmd := exec.Command(bin, args...)
	cmd.Env = serveEnv()
	p := &serveProcess{cmd: cmd, log: &serveLog{}, done: make(chan struct{})}
	cmd.Stdout, cmd.Stderr = p.log, p.log
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	started := make(chan error, 1)
	go func() {
		// Never unlocked: Pdeathsig fires when the thread that forked the child
		// ends, so the thread must outlive the child; the runtime ends it when
		// this goroutine returns, after the child was reaped.
		runtime.LockOSThread()
		if err := cmd.Start(); err != nil {
			started <- err
			return
		}
		started <- nil
		p.waitErr = cmd.Wait()
		close(p.done)
	}()
	if err := <-started; err != nil {
		t.Fatalf("start morph %s: %v", strings.Join(args, " "), err)
	}
	t.Cleanup(func() {
		select {
		case <-p.done:
		default:
			_ = cmd.Process.Kill()
			select {
			case <-p.done:
			case <-time.After(10 * time.Second):
				t.Errorf("cleanup: morph (pid %d) still running 10s after SIGKILL", cmd.Process.Pid)
			}
		}
		if t.Failed() {
			t.Logf("morph %s output:\n%s", args[0], p.log)
		}
	})
	return p
}

// serveAwaitReady waits until the ca.crt morph writes exists and /readyz answers 200,
// failing early when the process exits.
func serveAwaitReady(p *serveProcess, addr, certDir string) (*serveClient, error) {
	deadline := time.Now().Add(serveReadyTimeout)
	var client *serveClient
	last := errors.New("not tried")
	for time.Now().Before(deadline) {
		select {
		case <-p.done:
			return nil, fmt.Errorf("exited before it was ready: %v", p.waitErr)
		case <-time.After(50 * time.Millisecond):
		}
		if client == nil {
			ca, err := os.ReadFile(filepath.Join(certDir, "ca.crt"))
			if err != nil {
				last = err
				continue
			}
			pool := x509.NewCertPool()
			if !pool.AppendCertsFromPEM(ca) {
				last = fmt.Errorf("%s holds no certificate yet", filepath.Join(certDir, "ca.crt"))
				continue
			}
			cfg := &tls.Config{RootCAs: pool, ServerName: "127.0.0.1", MinVersion: tls.VersionTLS12}
			client = &serveClient{tls: cfg, http: &http.Client{
				Timeout:   5 * time.Second,
				Transport: &http.Transport{Proxy: nil, TLSClientConfig: cfg, DisableKeepAlives: true},
			}}
		}
		resp, err := client.http.Get("https://" + addr + "/readyz")
		if err != nil {
			last = err
			continue
		}
		body, _ := io.ReadAll(io.LimitReader(resp.Body, 64<<10))
		_ = resp.Body.Close()
		if resp.StatusCode == http.StatusOK {
			return client, nil
		}
		last = fmt.Errorf("/readyz: %s: %s", resp.Status, body)
	}
	return nil, fmt.Errorf("not ready within %v: %w", serveReadyTimeout, last)
}
