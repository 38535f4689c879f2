// Package hostile runs the morph binary as a server and sends it the hostile inputs of
// issue 11, checking that it answers each within the request's deadline, keeps
// serving, and keeps its memory bounded (peak RSS, reported).
package hostile

import (
	"bytes"
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
)

// maxRSS bounds the server's peak resident memory over the whole test. Before the
// budgets, one templated request took it past 600 MB and then to an out-of-memory kill.
const maxRSS = 400 << 20

// syncBuffer is the server's log, written by the process and read by the test.
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

func buildMorph(t *testing.T) string {
	t.Helper()
	bin := filepath.Join(t.TempDir(), "morph")
	ctx, cancel := context.WithTimeout(t.Context(), 5*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, "go", "build", "-o", bin, "../../cmd/morph")
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	return bin
}

func freeAddr(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = ln.Close() }()
	return ln.Addr().String()
}

// peakRSS is the process's peak resident set (VmHWM), in bytes.
func peakRSS(t *testing.T, pid int) int64 {
	t.Helper()
	data, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		t.Skip("no /proc here:", err)
	}
	for _, line := range strings.Split(string(data), "\n") {
		if v, ok := strings.CutPrefix(line, "VmHWM:"); ok {
			kb, err := strconv.ParseInt(strings.TrimSpace(strings.TrimSuffix(strings.TrimSpace(v), "kB")), 10, 64)
			if err != nil {
				t.Fatal(err)
			}
			return kb << 10
		}
	}
	t.Fatal("no VmHWM in /proc/status")
	return 0
}

func review(uid, kind, group, version string, obj map[string]any) []byte {
	body, _ := json.Marshal(map[string]any{
		"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview",
		"request": map[string]any{
			"uid": uid, "operation": "CREATE",
			"kind":     map[string]any{"group": group, "version": version, "kind": kind},
			"resource": map[string]any{"group": group, "version": version, "resource": strings.ToLower(kind) + "s"},
			"name":     "x", "namespace": "default", "object": obj,
			"userInfo": map[string]any{"username": "alice"},
		},
	})
	return body
}

func TestServerSurvivesHostileInput(t *testing.T) {
	if testing.Short() {
		t.Skip("builds and runs the morph binary")
	}
	bin := buildMorph(t)
	policies := t.TempDir()
	for _, f := range []string{"katalog.yaml", "gatekeeper.yaml"} {
		data, err := os.ReadFile(filepath.Join("testdata", f))
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(policies, f), data, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	// A FIFO among the policies: it used to block the reload loop and SIGTERM forever.
	if err := syscall.Mkfifo(filepath.Join(policies, "fifo.yaml"), 0o644); err != nil {
		t.Fatal(err)
	}
	certs := t.TempDir()
	addr := freeAddr(t)
	var log syncBuffer
	cmd := exec.Command(bin, "serve", "--policies", policies, "--cert-dir", certs, "--addr", addr, "--conversion", "--log-level", "info")
	cmd.Stdout, cmd.Stderr = &log, &log
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }()
	defer func() {
		if cmd.ProcessState == nil {
			_ = cmd.Process.Kill()
			<-exited
		}
	}()

	client := readyClient(t, addr, certs, &log)
	base := "https://" + addr
	post := func(path string, body []byte) (int, string) {
		t.Helper()
		resp, err := client.Post(base+path, "application/json", bytes.NewReader(body))
		if err != nil {
			t.Fatalf("POST %s: no answer: %v\n%s", path, err, log.String())
		}
		defer func() { _ = resp.Body.Close() }()
		data, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(data)
	}
	good := func() {
		t.Helper()
		pod := map[string]any{"apiVersion": "v1", "kind": "Pod", "metadata": map[string]any{"name": "x", "namespace": "default"},
			"spec": map[string]any{"containers": []any{map[string]any{"name": "a", "image": "nginx"}}}}
		status, body := post("/mutate?timeout=5s", review("good", "Pod", "", "v1", pod))
		if status != http.StatusOK || !strings.Contains(body, `"patch"`) {
			t.Fatalf("a good review after hostile input: %d %s", status, body)
		}
	}
	good()

	widget := func(spec map[string]any) map[string]any {
		return map[string]any{"apiVersion": "demo.morph.dev/v1", "kind": "Widget", "metadata": map[string]any{"name": "x", "namespace": "default"}, "spec": spec}
	}
	containers := make([]any, 60000)
	for i := range containers {
		containers[i] = map[string]any{"name": fmt.Sprintf("c%d", i), "image": "nginx"}
	}
	bigPod := map[string]any{"apiVersion": "v1", "kind": "Pod", "metadata": map[string]any{"name": "big", "namespace": "default"}, "spec": map[string]any{"containers": containers}}
	conversion, _ := json.Marshal(map[string]any{
		"apiVersion": "apiextensions.k8s.io/v1", "kind": "ConversionReview",
		"request": map[string]any{"uid": "c", "desiredAPIVersion": "demo.morph.dev/v2", "objects": []any{widget(map[string]any{"range": "a"})}},
	})
	cases := []struct {
		name, path string
		body       []byte
		// want is a status the answer may have (the deadline or the budget ends it).
		want []int
	}{
		{"range over a huge field", "/mutate?timeout=3s", review("r", "Widget", "demo.morph.dev", "v1", widget(map[string]any{"replicas": int64(1) << 62, "seed": "ab"})), []int{200, 504}},
		{"conversion path ranging forever", "/convert?timeout=3s", conversion, []int{200, 504}},
		{"60,000 containers, ?timeout=1s", "/mutate?timeout=1s", review("big", "Pod", "", "v1", bigPod), []int{200, 504}},
		{"a body over --max-body", "/mutate", bytes.Repeat([]byte(" "), 8<<20), []int{413}},
		{"not JSON", "/mutate", []byte("{{{"), []int{400}},
	}
	for _, c := range cases {
		start := time.Now()
		status, body := post(c.path, c.body)
		t.Logf("%s: %d after %v: %.200s", c.name, status, time.Since(start).Round(time.Millisecond), body)
		ok := false
		for _, w := range c.want {
			ok = ok || status == w
		}
		if !ok {
			t.Errorf("%s: status %d, want one of %v", c.name, status, c.want)
		}
		good()
	}

	// A body that trickles in is cut off at the deadline.
	pr, pw := io.Pipe()
	go func() { _, _ = pw.Write([]byte("{")) }()
	req, _ := http.NewRequest(http.MethodPost, base+"/mutate?timeout=1s", pr)
	req.Header.Set("Content-Type", "application/json")
	if resp, err := client.Do(req); err != nil {
		t.Errorf("slow body: no answer: %v", err)
	} else {
		t.Logf("slow body: %d", resp.StatusCode)
		_ = resp.Body.Close()
	}
	_ = pw.Close()
	good()

	// An alias "string bomb" dropped into the policy folder: the reload fails (the
	// last good policies keep serving) instead of expanding 1 MiB 4,096 times.
	bomb := "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: bomb}\ndata:\n  a: &a " + strings.Repeat("x", 1<<20) +
		"\n  b: &b [*a, *a, *a, *a, *a, *a, *a, *a, *a, *a, *a, *a, *a, *a, *a, *a]\n  c: &c [*b, *b, *b, *b, *b, *b, *b, *b, *b, *b, *b, *b, *b, *b, *b, *b]\n  d: [*c, *c, *c, *c, *c, *c, *c, *c, *c, *c, *c, *c, *c, *c, *c, *c]\n"
	if err := os.WriteFile(filepath.Join(policies, "bomb.yaml"), []byte(bomb), 0o644); err != nil {
		t.Fatal(err)
	}
	for waited := 0; !strings.Contains(log.String(), "YAML aliases expand to more than"); waited++ {
		if waited > 300 {
			t.Fatalf("the alias bomb was not refused\n%s", log.String())
		}
		time.Sleep(100 * time.Millisecond)
	}
	good()

	rss := peakRSS(t, cmd.Process.Pid)
	t.Logf("peak RSS of morph serve: %d MiB (bound %d MiB)", rss>>20, maxRSS>>20)
	if rss > maxRSS {
		t.Errorf("peak RSS %d MiB over %d MiB", rss>>20, maxRSS>>20)
	}
	if !strings.Contains(log.String(), "fifo.yaml: not a regular file") {
		t.Errorf("the FIFO was not reported:\n%s", log.String())
	}

	// SIGTERM ends it, FIFO or not.
	if err := cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-exited:
		if err != nil {
			t.Errorf("morph serve exited with %v\n%s", err, log.String())
		}
	case <-time.After(30 * time.Second):
		t.Fatalf("morph serve did not stop on SIGTERM\n%s", log.String())
	}
}

// readyClient waits for /readyz and returns a client that trusts the generated CA,
// each request bounded by its timeout.
func readyClient(t *testing.T, addr, certs string, log *syncBuffer) *http.Client {
	t.Helper()
	deadline := time.Now().Add(60 * time.Second)
	for {
		caPEM, err := os.ReadFile(filepath.Join(certs, "ca.crt"))
		if err == nil {
			pool := x509.NewCertPool()
			pool.AppendCertsFromPEM(caPEM)
			client := &http.Client{Timeout: 20 * time.Second, Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: pool, MinVersion: tls.VersionTLS12}}}
			if resp, err := client.Get("https://" + addr + "/readyz"); err == nil {
				_ = resp.Body.Close()
				if resp.StatusCode == http.StatusOK {
					return client
				}
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("morph serve not ready\n%s", log.String())
		}
		time.Sleep(200 * time.Millisecond)
	}
}
