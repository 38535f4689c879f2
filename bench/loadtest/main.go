// Command loadtest measures morph serve's /mutate under load, next to a bare HTTPS
// handler that only decodes the AdmissionReview and allows it, in the same process, with
// the same TLS configuration and the same client.
//
// The load is open loop: request i is scheduled at start + i/rate and its latency is
// measured from that scheduled time, not from when it was actually sent, so that a
// server falling behind is charged for the queue it builds (no coordinated omission).
// Everything runs on 127.0.0.1 and is bounded in count (rate x duration requests per
// step, at most -max-inflight at once) and in time (-deadline for the whole run).
//
// The workload is the 100 Gatekeeper mutators of bench/testdata/gatekeeper-workload,
// with pod.json as the AdmissionReview's object and namespace.json as context.
//
//	go run ./bench/loadtest                         # 250, 500, 2000/s for 15 s, 1000/s for 1 min
//	go run ./bench/loadtest -rates 500,1000 -duration 5s
//	go run ./bench/loadtest -rates 1000 -heap-floor 0  # Go's default GC pacing
//
// It prints a markdown table, morph's p99 over the bare handler's at 1,000/s, and the
// highest rate at which morph's p99 stays under 10 ms.
package main

import (
	"bytes"
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"runtime/metrics"
	"runtime/pprof"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	jsonpatch "github.com/evanphx/json-patch"
	admissionv1 "k8s.io/api/admission/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"

	"github.com/morph-dev/morph/internal/dialect/gatekeeper"
	"github.com/morph-dev/morph/internal/heapfloor"
	"github.com/morph-dev/morph/internal/objects"
	"github.com/morph-dev/morph/internal/policy"
	"github.com/morph-dev/morph/internal/webhook"
)

// newLoader is the policy loader of the workload: the Gatekeeper dialect.
func newLoader(store *objects.Store) *policy.Loader {
	return policy.NewLoader(gatekeeper.New(gatekeeper.Options{Objects: store}))
}

type config struct {
	workload       string
	mutators       string
	rates          []int
	duration       time.Duration
	targetRate     int
	targetDuration time.Duration
	slice          time.Duration
	warmup         time.Duration
	maxInflight    int
	timeout        time.Duration
	deadline       time.Duration
	heapFloor      uint64
	cpuProfile     string
	title          string
}

func main() {
	cfg, err := parseFlags(os.Args[1:])
	if err != nil {
		fmt.Fprintln(os.Stderr, "loadtest:", err)
		os.Exit(2)
	}
	ctx, cancel := context.WithTimeout(context.Background(), cfg.deadline)
	defer cancel()
	if cfg.cpuProfile != "" {
		f, err := os.Create(cfg.cpuProfile)
		if err == nil {
			err = pprof.StartCPUProfile(f)
		}
		if err != nil {
			fmt.Fprintln(os.Stderr, "loadtest: -cpuprofile:", err)
			os.Exit(2)
		}
		defer func() { pprof.StopCPUProfile(); _ = f.Close() }()
	}
	if err := run(ctx, cfg, os.Stdout, os.Stderr); err != nil {
		fmt.Fprintln(os.Stderr, "loadtest:", err)
		cancel()
		os.Exit(1) //nolint:gocritic // the profile of a failed run is not worth keeping
	}
}

func parseFlags(args []string) (*config, error) {
	fs := flag.NewFlagSet("loadtest", flag.ContinueOnError)
	cfg := &config{}
	rates := fs.String("rates", "250,500,1000,2000", "request rates per second, comma separated")
	fs.StringVar(&cfg.workload, "workload", "bench/testdata/gatekeeper-workload", "folder of pod.json, namespace.json and the mutators")
	fs.StringVar(&cfg.mutators, "mutators", "mutators-100.yaml", "mutator file of the workload folder")
	fs.DurationVar(&cfg.duration, "duration", 15*time.Second, "measured time per rate and target")
	fs.IntVar(&cfg.targetRate, "target-rate", 1000, "the rate at which morph's p99 is compared with the bare handler's (1.25x target)")
	fs.DurationVar(&cfg.targetDuration, "target-duration", time.Minute, "measured time per target at -target-rate: long enough that one stall of the machine (100 ms now and then here) is a small part of the 1% a p99 leaves out")
	fs.DurationVar(&cfg.slice, "slice", 500*time.Millisecond, "the targets alternate every slice, so that noise from elsewhere on the machine hits both alike")
	fs.StringVar(&cfg.title, "title", "morph serve /mutate load test", "heading of the report")
	fs.DurationVar(&cfg.warmup, "warmup", time.Second, "unmeasured load before each target's first step")
	fs.IntVar(&cfg.maxInflight, "max-inflight", 1024, "most requests in flight at once")
	fs.DurationVar(&cfg.timeout, "timeout", 5*time.Second, "client timeout of one request")
	fs.DurationVar(&cfg.deadline, "deadline", 10*time.Minute, "bound of the whole run")
	fs.StringVar(&cfg.cpuProfile, "cpuprofile", "", "write a CPU profile of the whole run (servers and client) to this file")
	fs.Uint64Var(&cfg.heapFloor, "heap-floor", heapfloor.DefaultSize, "the process's heap floor in bytes, as morph serve --gc-heap-floor keeps it (0: Go's default pacing); both targets share it")
	if err := fs.Parse(args); err != nil {
		return nil, err
	}
	for _, r := range strings.Split(*rates, ",") {
		n, err := strconv.Atoi(strings.TrimSpace(r))
		if err != nil || n <= 0 || n > 20000 {
			return nil, fmt.Errorf("-rates: %q is not a rate between 1 and 20000", r)
		}
		cfg.rates = append(cfg.rates, n)
	}
	for _, d := range []struct {
		name string
		d    time.Duration
	}{{"-duration", cfg.duration}, {"-target-duration", cfg.targetDuration}} {
		if d.d <= 0 || d.d > 5*time.Minute {
			return nil, fmt.Errorf("%s must be between 0 and 5m", d.name)
		}
		if cfg.slice < 100*time.Millisecond || cfg.slice > d.d {
			return nil, fmt.Errorf("-slice must be at least 100ms and at most %s", d.name)
		}
	}
	if cfg.maxInflight <= 0 {
		return nil, errors.New("-max-inflight must be positive")
	}
	return cfg, nil
}

// durationAt is the measured time per target at rate.
func (cfg *config) durationAt(rate int) time.Duration {
	if rate == cfg.targetRate {
		return cfg.targetDuration
	}
	return cfg.duration
}

// target is one server under test.
type target struct {
	name string
	url  string
}

func run(ctx context.Context, cfg *config, stdout, stderr io.Writer) error {
	log := slog.New(slog.NewTextHandler(stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))
	body, pod, err := reviewBody(cfg.workload)
	if err != nil {
		return err
	}
	tlsConfig, roots, err := selfSignedTLS()
	if err != nil {
		return err
	}

	server, err := webhook.New(webhook.Options{
		Source: &webhook.FolderSource{
			Policies:  filepath.Join(cfg.workload, cfg.mutators),
			Context:   []string{filepath.Join(cfg.workload, "namespace.json")},
			NewLoader: newLoader,
		},
		Admission: true, Conversion: true, Logger: log,
	})
	if err != nil {
		return err
	}
	if err := server.Reload(); err != nil {
		return fmt.Errorf("loading the workload: %w", err)
	}
	morphLn, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return err
	}
	bareLn, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return errors.Join(err, morphLn.Close())
	}
	serveCtx, stopServers := context.WithCancel(context.WithoutCancel(ctx))
	var wg sync.WaitGroup
	wg.Go(func() { heapfloor.Keep(serveCtx, cfg.heapFloor, log) })
	wg.Go(func() {
		if err := server.Serve(serveCtx, morphLn, webhook.ServeOptions{TLS: tlsConfig, ReloadInterval: -1, ShutdownGrace: 5 * time.Second}); err != nil {
			log.Error("morph server", "error", err)
		}
	})
	bare := &http.Server{
		Handler:      http.HandlerFunc(bareHandler),
		TLSConfig:    tlsConfig.Clone(),
		TLSNextProto: map[string]func(*http.Server, *tls.Conn, http.Handler){},
		ErrorLog:     slog.NewLogLogger(log.Handler(), slog.LevelDebug),
	}
	wg.Go(func() {
		if err := bare.ServeTLS(bareLn, "", ""); err != nil && !errors.Is(err, http.ErrServerClosed) {
			log.Error("bare server", "error", err)
		}
	})
	defer func() {
		stopServers()
		shutdownCtx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		if err := bare.Shutdown(shutdownCtx); err != nil {
			log.Error("bare server shutdown", "error", err)
		}
		wg.Wait()
	}()

	var dialer net.Dialer
	client := &loadClient{}
	client.Client = &http.Client{Timeout: cfg.timeout, Transport: &http.Transport{
		DialContext: func(ctx context.Context, network, addr string) (net.Conn, error) {
			client.dials.Add(1)
			return dialer.DialContext(ctx, network, addr)
		},
		TLSClientConfig:     &tls.Config{RootCAs: roots, MinVersion: tls.VersionTLS12},
		MaxIdleConns:        cfg.maxInflight,
		MaxIdleConnsPerHost: cfg.maxInflight,
		IdleConnTimeout:     time.Minute,
	}}
	targets := []target{{"bare", "https://" + bareLn.Addr().String() + "/mutate"}, {"morph", "https://" + morphLn.Addr().String() + "/mutate?timeout=10s"}}

	verified, err := verifyMorph(ctx, client, targets[1].url, body, pod, filepath.Join(cfg.workload, "expected-pod.json"))
	if err != nil {
		return err
	}
	for _, t := range targets {
		step(ctx, client, t, body, 200, cfg.warmup, cfg.maxInflight)
	}
	var results []result
	for _, rate := range cfg.rates {
		got := make([]samples, len(targets))
		d := cfg.durationAt(rate)
		for range int(d / cfg.slice) {
			for i, t := range targets {
				if ctx.Err() != nil {
					return fmt.Errorf("the run passed its -deadline %s", cfg.deadline)
				}
				got[i].add(step(ctx, client, t, body, rate, cfg.slice, cfg.maxInflight))
			}
		}
		for i, t := range targets {
			r := got[i].result(t.name, rate)
			fmt.Fprintf(stderr, "%-5s %5d/s: p50 %s p90 %s p99 %s p99.9 %s max %s, %d errors, %d GC cycles (%s GC CPU), %d new connections\n", t.name, rate, ms(r.p50), ms(r.p90), ms(r.p99), ms(r.p999), ms(r.max), r.errors, r.gc.cycles, ms(r.gc.cpu), got[i].dials)
			results = append(results, r)
		}
	}
	report(stdout, cfg, verified, results)
	return nil
}

// reviewBody builds the AdmissionReview of the workload's Pod.
func reviewBody(dir string) (body, pod []byte, err error) {
	raw, err := os.ReadFile(filepath.Join(dir, "pod.json"))
	if err != nil {
		return nil, nil, err
	}
	var compact bytes.Buffer
	if err := json.Compact(&compact, raw); err != nil {
		return nil, nil, fmt.Errorf("pod.json: %w", err)
	}
	review := admissionv1.AdmissionReview{
		TypeMeta: metav1.TypeMeta{APIVersion: "admission.k8s.io/v1", Kind: "AdmissionReview"},
		Request: &admissionv1.AdmissionRequest{
			UID:       "loadtest",
			Kind:      metav1.GroupVersionKind{Version: "v1", Kind: "Pod"},
			Resource:  metav1.GroupVersionResource{Version: "v1", Resource: "pods"},
			Operation: admissionv1.Create,
			Namespace: "apps",
			Name:      "checkout-7d9f8b6c4-x2lqp",
			Object:    runtime.RawExtension{Raw: compact.Bytes()},
		},
	}
	body, err = json.Marshal(review)
	return body, compact.Bytes(), err
}

// bareHandler decodes the review and allows it: the floor of any webhook's latency.
func bareHandler(w http.ResponseWriter, r *http.Request) {
	var review admissionv1.AdmissionReview
	if err := json.NewDecoder(http.MaxBytesReader(w, r.Body, 7<<20)).Decode(&review); err != nil || review.Request == nil {
		http.Error(w, "malformed review", http.StatusBadRequest)
		return
	}
	answer := admissionv1.AdmissionReview{TypeMeta: review.TypeMeta, Response: &admissionv1.AdmissionResponse{UID: review.Request.UID, Allowed: true}}
	w.Header().Set("Content-Type", "application/json")
	_ = json.NewEncoder(w).Encode(answer) // the client sees a broken answer as an error
}

// verifyMorph checks once that morph's patch turns pod.json into expected-pod.json.
func verifyMorph(ctx context.Context, client *loadClient, url string, body, pod []byte, expectedFile string) (string, error) {
	status, answer, err := send(ctx, client, url, body)
	if err != nil || status != http.StatusOK {
		return "", fmt.Errorf("first request to morph: status %d: %v", status, err)
	}
	var review admissionv1.AdmissionReview
	if err := json.Unmarshal(answer, &review); err != nil || review.Response == nil {
		return "", fmt.Errorf("morph's answer is not an AdmissionReview: %s", answer)
	}
	expected, err := os.ReadFile(expectedFile)
	if err != nil {
		return "", err
	}
	patch, err := jsonpatch.DecodePatch(review.Response.Patch)
	if err != nil {
		return fmt.Sprintf("no: the patch does not decode (%v)", err), nil
	}
	got, err := patch.Apply(pod)
	if err != nil {
		return fmt.Sprintf("no: the patch does not apply (%v)", err), nil
	}
	if !jsonpatch.Equal(got, expected) {
		return "no: the patched Pod differs from expected-pod.json", nil
	}
	return fmt.Sprintf("yes: %d patch operations turn pod.json into expected-pod.json", bytes.Count(review.Response.Patch, []byte(`"op"`))), nil
}

func send(ctx context.Context, client *loadClient, url string, body []byte) (int, []byte, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, url, bytes.NewReader(body))
	if err != nil {
		return 0, nil, err
	}
	req.Header.Set("Content-Type", "application/json")
	resp, err := client.Do(req)
	if err != nil {
		return 0, nil, err
	}
	data, err := io.ReadAll(resp.Body)
	return resp.StatusCode, data, errors.Join(err, resp.Body.Close())
}

// samples are the latencies of the successful requests of one or more steps.
type samples struct {
	ok      []time.Duration
	sent    int
	errors  int
	elapsed time.Duration
	gc      gcCost
	dials   int
}

func (s *samples) add(o samples) {
	s.ok = append(s.ok, o.ok...)
	s.sent += o.sent
	s.errors += o.errors
	s.elapsed += o.elapsed
	s.gc.cycles += o.gc.cycles
	s.gc.cpu += o.gc.cpu
	s.dials += o.dials
}

// gcCost is the garbage collector's work during a step: the process's, so client and
// server alike, read between steps when no request is in flight.
type gcCost struct {
	cycles uint64
	cpu    time.Duration
}

var gcMetrics = []string{"/gc/cycles/total:gc-cycles", "/cpu/classes/gc/total:cpu-seconds"}

// loadClient is the client of both targets; dials counts its new connections (each one
// a TLS handshake).
type loadClient struct {
	*http.Client
	dials atomic.Int64
}

func readGC() gcCost {
	s := make([]metrics.Sample, len(gcMetrics))
	for i, name := range gcMetrics {
		s[i].Name = name
	}
	metrics.Read(s)
	var c gcCost
	if s[0].Value.Kind() == metrics.KindUint64 {
		c.cycles = s[0].Value.Uint64()
	}
	if s[1].Value.Kind() == metrics.KindFloat64 {
		c.cpu = time.Duration(s[1].Value.Float64() * float64(time.Second))
	}
	return c
}

func (s *samples) result(target string, rate int) result {
	r := result{target: target, rate: rate, sent: s.sent, ok: len(s.ok), errors: s.errors, elapsed: s.elapsed, gc: s.gc}
	if len(s.ok) > 0 {
		sorted := slices.Sorted(slices.Values(s.ok))
		r.p50, r.p99, r.max = percentile(sorted, 0.50), percentile(sorted, 0.99), sorted[len(sorted)-1]
		r.p90, r.p999 = percentile(sorted, 0.90), percentile(sorted, 0.999)
		r.throughput = float64(len(sorted)) / s.elapsed.Seconds()
	}
	return r
}

// result is one measured rate of one target.
type result struct {
	target     string
	rate       int
	sent, ok   int
	errors     int
	elapsed    time.Duration
	p50, p99   time.Duration
	p90, p999  time.Duration
	max        time.Duration
	throughput float64
	gc         gcCost
}

// step sends rate requests per second for d, open loop, and measures each request from
// its scheduled time.
func step(ctx context.Context, client *loadClient, t target, body []byte, rate int, d time.Duration, maxInflight int) samples {
	n := int(int64(rate) * int64(d) / int64(time.Second))
	interval := time.Second / time.Duration(rate)
	latencies := make([]time.Duration, n)
	failed := make([]bool, n)
	slots := make(chan struct{}, maxInflight)
	var wg sync.WaitGroup
	gcBefore := readGC()
	dialsBefore := client.dials.Load()
	start := time.Now().Add(10 * time.Millisecond)
	sent := 0
	for i := range n {
		scheduled := start.Add(time.Duration(i) * interval)
		if wait := time.Until(scheduled); wait > 0 {
			select {
			case <-time.After(wait):
			case <-ctx.Done():
			}
		}
		if ctx.Err() != nil {
			break
		}
		select {
		case slots <- struct{}{}:
		case <-ctx.Done():
		}
		if ctx.Err() != nil {
			break
		}
		sent++
		wg.Go(func() {
			defer func() { <-slots }()
			status, answer, err := send(ctx, client, t.url, body)
			latencies[i] = time.Since(scheduled)
			failed[i] = err != nil || status != http.StatusOK || !bytes.Contains(answer, []byte(`"allowed":true`))
		})
	}
	wg.Wait()
	out := samples{sent: sent, elapsed: time.Since(start)}
	gcAfter := readGC()
	out.gc = gcCost{cycles: gcAfter.cycles - gcBefore.cycles, cpu: gcAfter.cpu - gcBefore.cpu}
	out.dials = int(client.dials.Load() - dialsBefore)
	for i := range sent {
		if failed[i] {
			out.errors++
			continue
		}
		out.ok = append(out.ok, latencies[i])
	}
	return out
}

// percentile of sorted latencies (nearest rank).
func percentile(sorted []time.Duration, p float64) time.Duration {
	rank := int(p*float64(len(sorted))+0.999999) - 1
	return sorted[min(max(rank, 0), len(sorted)-1)]
}

func ms(d time.Duration) string { return fmt.Sprintf("%.2f ms", float64(d)/float64(time.Millisecond)) }

func report(w io.Writer, cfg *config, verified string, results []result) {
	fmt.Fprintf(w, "## %s\n\n", cfg.title)
	fmt.Fprintf(w, "Workload: %s (%s), open loop, latency from each request's scheduled send time; %s per rate and target (%s at %d/s), the targets alternating every %s. ", cfg.workload, cfg.mutators, cfg.duration, cfg.targetDuration, cfg.targetRate, cfg.slice)
	fmt.Fprintf(w, "Same process, TLS 1.2+ over loopback, HTTP/1.1, the same client for both targets. ")
	if cfg.heapFloor > 0 {
		fmt.Fprintf(w, "The process keeps morph serve's heap floor (--gc-heap-floor) of %d MiB, for both targets; GC columns are the whole process's collections during the rate's steps.\n\n", cfg.heapFloor>>20)
	} else {
		fmt.Fprintf(w, "Go's default GC pacing (-heap-floor 0, as morph serve --gc-heap-floor 0); GC columns are the whole process's collections during the rate's steps.\n\n")
	}
	fmt.Fprintf(w, "Patch verified against expected-pod.json: %s\n\n", verified)
	fmt.Fprintln(w, "| rate (/s) | target | sent | ok | errors | throughput (/s) | p50 | p99 | max | GC cycles | GC CPU |")
	fmt.Fprintln(w, "|---:|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
	for _, r := range results {
		fmt.Fprintf(w, "| %d | %s | %d | %d | %d | %.0f | %s | %s | %s | %d | %s |\n", r.rate, r.target, r.sent, r.ok, r.errors, r.throughput, ms(r.p50), ms(r.p99), ms(r.max), r.gc.cycles, ms(r.gc.cpu))
	}
	fmt.Fprintln(w)
	byKey := map[string]result{}
	for _, r := range results {
		byKey[fmt.Sprint(r.target, r.rate)] = r
	}
	if b, m := byKey[fmt.Sprint("bare", cfg.targetRate)], byKey[fmt.Sprint("morph", cfg.targetRate)]; b.p99 > 0 && m.p99 > 0 {
		ratio := float64(m.p99) / float64(b.p99)
		verdict := "within"
		if ratio > 1.25 {
			verdict = "NOT within"
		}
		fmt.Fprintf(w, "At %d/s morph's p99 is %.2fx the bare handler's (%s vs %s): %s the 1.25x target.\n", cfg.targetRate, ratio, ms(m.p99), ms(b.p99), verdict)
	}
	best := 0
	for _, r := range results {
		if r.target == "morph" && r.errors == 0 && r.p99 > 0 && r.p99 < 10*time.Millisecond && r.rate > best {
			best = r.rate
		}
	}
	if best > 0 {
		fmt.Fprintf(w, "Highest measured rate with morph's p99 under 10 ms (and no errors): %d/s.\n", best)
	} else {
		fmt.Fprintln(w, "At no measured rate did morph's p99 stay under 10 ms without errors.")
	}
}

// selfSignedTLS generates a CA and a loopback certificate in memory.
func selfSignedTLS() (*tls.Config, *x509.CertPool, error) {
	caPEM, certPEM, keyPEM, err := webhook.GenerateCertificates([]string{"127.0.0.1"}, time.Now())
	if err != nil {
		return nil, nil, err
	}
	pair, err := tls.X509KeyPair(certPEM, keyPEM)
	if err != nil {
		return nil, nil, err
	}
	roots := x509.NewCertPool()
	roots.AppendCertsFromPEM(caPEM)
	return &tls.Config{MinVersion: tls.VersionTLS12, Certificates: []tls.Certificate{pair}}, roots, nil
}
