package webhook

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/morph-dev/morph/internal/engine"
)

// Defaults of Options.
const (
	DefaultMaxBody        = 7 << 20
	DefaultReloadInterval = 2 * time.Second
	DefaultRequestTimeout = 10 * time.Second
	DefaultShutdownGrace  = 20 * time.Second
)

// Options configure a Server.
type Options struct {
	// Source loads the policies. Required.
	Source Source
	// Namespaces, when set, finds Namespace objects instead of the snapshot's context
	// store (a cluster's informer cache).
	Namespaces NamespaceLookup
	// Admission serves /mutate and /validate; Conversion serves /convert.
	Admission, Conversion bool
	// MaxBody is the largest request body accepted (DefaultMaxBody when 0).
	MaxBody int64
	// RequestTimeout is the deadline of a request without ?timeout= (DefaultRequestTimeout
	// when 0).
	RequestTimeout time.Duration
	// Logger receives the server's logs (discarded when nil).
	Logger *slog.Logger
	// Now returns the current time (time.Now when nil).
	Now func() time.Time
	// Mutated, when set, is called after /mutate admitted a request that is not a dry
	// run, with the policy set and the engine's result (in a cluster: the Events of
	// Katalog defaults). It runs on the request's goroutine and must not block.
	Mutated func(ctx context.Context, req *engine.Request, res *engine.Result)
	// Admitted, when set, is called after /mutate or /mutate/<group> admitted a request
	// that is not a dry run, DELETE included (res is then nil: nothing ran), with the
	// webhook group of the call ("" for /mutate): in a cluster, the triggers of the
	// policies that mutate existing objects. It runs on the request's goroutine and
	// must not block.
	Admitted func(ctx context.Context, req *engine.Request, group string, res *engine.Result)
	// Loaded, when set, is called with each snapshot right after the server switched to
	// it, on the goroutine that loaded it: the cluster code registers webhooks and
	// caBundles for what the server serves. It must not block.
	Loaded func(*Snapshot)
}

// Server answers admission and conversion reviews with the policies of its Source. Build
// it with New; it is safe for concurrent use.
type Server struct {
	opts    Options
	log     *slog.Logger
	metrics *metrics
	rt      atomic.Pointer[runtime]
	handler http.Handler
	// bodies are reusable request body buffers (*bytes.Buffer; see readBody).
	bodies sync.Pool
	// workers run the review handlers (see answerReview).
	workers *workers

	mu sync.Mutex // guards the fields below
	// fingerprint is the source's fingerprint at the last load attempt.
	fingerprint string
	// loadErr is the last load attempt's error, zero once a load succeeds; readErr is
	// the last failed read of the source's fingerprint, zero once a read succeeds.
	loadErr, readErr sourceError
}

// sourceError is a failure to read or load the policies, as /readyz shows it.
type sourceError struct {
	text string
	at   time.Time
}

// reportedError is the failure /readyz shows, zero when there is none: a failed read
// of the source while it lasts, otherwise the last load's error. Called with mu held.
func (s *Server) reportedError() sourceError {
	if s.readErr.text != "" {
		return s.readErr
	}
	return s.loadErr
}

// New builds a server. It does not load policies: call Reload (or Serve, which does).
func New(opts Options) (*Server, error) {
	if opts.Source == nil {
		return nil, errors.New("webhook server needs a policy source")
	}
	if !opts.Admission && !opts.Conversion {
		return nil, errors.New("webhook server serves neither admission nor conversion: enable one")
	}
	if opts.MaxBody <= 0 {
		opts.MaxBody = DefaultMaxBody
	}
	if opts.RequestTimeout <= 0 {
		opts.RequestTimeout = DefaultRequestTimeout
	}
	if opts.Logger == nil {
		opts.Logger = slog.New(slog.DiscardHandler)
	}
	if opts.Now == nil {
		opts.Now = time.Now
	}
	s := &Server{opts: opts, log: opts.Logger, metrics: newMetrics(), workers: newWorkers()}
	mux := http.NewServeMux()
	if opts.Admission {
		mux.Handle("/mutate", s.review("mutate", s.mutate))
		mux.Handle("/mutate/", s.review("mutate", s.mutate))
		mux.Handle("/validate", s.review("validate", s.validate))
		mux.Handle("/validate/", s.review("validate", s.validate))
	}
	if opts.Conversion {
		mux.Handle("/convert", s.review("convert", s.convert))
	}
	mux.Handle("/healthz", s.get(s.healthz))
	mux.Handle("/readyz", s.get(s.readyz))
	mux.Handle("/metrics", s.get(promhttp.HandlerFor(s.metrics.registry, promhttp.HandlerOpts{ErrorLog: slog.NewLogLogger(opts.Logger.Handler(), slog.LevelError)}).ServeHTTP))
	// Every other path: statistics under the routes the loaded policies name.
	mux.Handle("/", http.HandlerFunc(s.stats))
	s.handler = mux
	return s, nil
}

// Handler returns the server's HTTP handler (all endpoints), for tests and for embedding.
func (s *Server) Handler() http.Handler { return s.handler }

// Registerer is the registry of the server's /metrics, for the metrics of the parts
// that feed it (the cluster policy source) and
// the code around the server (leader election, registration, certificates).
func (s *Server) Registerer() prometheus.Registerer { return s.metrics.registry }

// Ready reports whether a policy set is loaded.
func (s *Server) Ready() bool { return s.rt.Load() != nil }

// Reload loads the policies now. On success the new set replaces the old one atomically;
// on failure the last good set stays, and the error is logged, counted and shown by
// /readyz.
func (s *Server) Reload() error {
	fp, err := s.opts.Source.Fingerprint()
	if err != nil {
		s.readFailed(err, true)
		return err
	}
	return s.load(fp)
}

func (s *Server) load(fp string) error {
	s.mu.Lock()
	s.fingerprint = fp
	s.readErr = sourceError{} // fp was read
	s.mu.Unlock()
	snap, err := s.opts.Source.Load()
	var rt *runtime
	if err == nil {
		rt, err = newRuntime(snap, s.opts.Now())
	}
	if err != nil {
		s.loadFailed(err)
		return err
	}
	if s.opts.Namespaces != nil {
		rt.namespaces = s.opts.Namespaces
	}
	s.rt.Store(rt)
	s.mu.Lock()
	s.loadErr = sourceError{}
	s.mu.Unlock()
	if s.opts.Loaded != nil {
		s.opts.Loaded(snap)
	}
	s.metrics.reloads.WithLabelValues("success").Inc()
	s.metrics.setPolicies(rt.counts)
	s.log.Info("policies loaded", "mutators", rt.counts.Mutators, "finalizers", rt.counts.Finalizers,
		"validators", rt.counts.Validators, "converters", rt.counts.Converters)
	for _, n := range rt.notes {
		s.log.Warn("policy load note", "note", n)
	}
	return nil
}

// loadFailed records a failed load, shown by /readyz until a load succeeds.
func (s *Server) loadFailed(err error) { s.sourceFailed(&s.loadErr, err, true) }

// readFailed records a failure to read the source's fingerprint, shown by /readyz until
// a read succeeds. Reload counts it (counted); a poll counts it only when its error is
// new, so that a missing folder does not count once per poll.
func (s *Server) readFailed(err error, counted bool) { s.sourceFailed(&s.readErr, err, counted) }

// sourceFailed records err in slot (s.loadErr or s.readErr), counts it when counted or
// new, and logs it when new.
func (s *Server) sourceFailed(slot *sourceError, err error, counted bool) {
	now := s.opts.Now()
	s.mu.Lock()
	repeat := s.reportedError().text == err.Error()
	*slot = sourceError{text: err.Error(), at: now}
	s.mu.Unlock()
	if counted || !repeat {
		s.metrics.reloads.WithLabelValues("failure").Inc()
	}
	if repeat {
		return
	}
	if s.rt.Load() != nil {
		s.log.Error("policy reload failed; serving the last good policies", "error", err)
	} else {
		s.log.Error("policy load failed; not ready", "error", err)
	}
}

// watch polls the source and reloads when its fingerprint changes, until ctx ends.
func (s *Server) watch(ctx context.Context, every time.Duration) {
	t := time.NewTicker(every)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		s.poll()
	}
}

// poll reloads once if the source changed since the last load attempt. A poll that
// reads an unchanged source ends the error of a poll that could not read it; the last
// load attempt's error, if any, stays.
func (s *Server) poll() {
	fp, err := s.opts.Source.Fingerprint()
	if err != nil {
		s.readFailed(err, false)
		return
	}
	s.mu.Lock()
	same := fp == s.fingerprint
	readAgain := same && s.readErr.text != ""
	if same {
		s.readErr = sourceError{}
	}
	s.mu.Unlock()
	if readAgain {
		s.log.Info("policy source readable again, unchanged since the last load attempt")
	}
	if same {
		return
	}
	s.log.Info("policy files changed; reloading")
	_ = s.load(fp) // load reports its own errors
}

// TLSConfig returns the configuration serving certs (Certificates.TLSConfig) for
// ServeOptions.TLS, and makes the server log and count their reloads: a rotated pair
// that does not load is logged at error level and counted in
// morph_certificate_reloads_total{outcome="failure"} while the last good pair is served.
func (s *Server) TLSConfig(certs *Certificates) *tls.Config {
	certs.OnReload(s.certificateReloaded)
	return certs.TLSConfig()
}

// certificateReloaded logs and counts a reload of the serving certificates.
func (s *Server) certificateReloaded(r CertificateReload) {
	var notAfter time.Time
	if r.Leaf != nil {
		notAfter = r.Leaf.NotAfter
	}
	if r.Err != nil {
		s.metrics.certificateReloads.WithLabelValues("failure").Inc()
		s.log.Error("TLS certificate reload failed; serving the last good certificate",
			"error", r.Err, "cert", r.CertFile, "key", r.KeyFile, "servedNotAfter", notAfter)
		return
	}
	s.metrics.certificateReloads.WithLabelValues("success").Inc()
	s.log.Info("TLS certificate reloaded", "cert", r.CertFile, "key", r.KeyFile, "notAfter", notAfter)
}

// ServeOptions configure Serve and ListenAndServe.
type ServeOptions struct {
	// TLS is the server's TLS configuration (see Server.TLSConfig). Required.
	TLS *tls.Config
	// HTTP2 enables HTTP/2, off by default (CVE-2023-44487, rapid reset).
	HTTP2 bool
	// ReloadInterval is how often the policy source is polled (DefaultReloadInterval when
	// 0; negative disables polling).
	ReloadInterval time.Duration
	// ShutdownGrace bounds the wait for in-flight requests (DefaultShutdownGrace when 0).
	ShutdownGrace time.Duration
}

// ListenAndServe listens on addr and serves until ctx ends (see Serve).
func (s *Server) ListenAndServe(ctx context.Context, addr string, o ServeOptions) error {
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return fmt.Errorf("listening on %s: %w", addr, err)
	}
	return s.Serve(ctx, ln, o)
}

// Serve loads the policies, watches them, and serves HTTPS on ln until ctx ends. A
// failing first load does not stop the server: it serves, unready, until the policies
// load. When ctx ends, Serve stops accepting connections, waits up to ShutdownGrace for
// in-flight requests, and returns nil once they are done.
func (s *Server) Serve(ctx context.Context, ln net.Listener, o ServeOptions) error {
	if o.TLS == nil {
		return errors.Join(errors.New("serving webhooks needs a TLS configuration"), ln.Close())
	}
	if o.ReloadInterval == 0 {
		o.ReloadInterval = DefaultReloadInterval
	}
	if o.ShutdownGrace <= 0 {
		o.ShutdownGrace = DefaultShutdownGrace
	}
	_ = s.Reload() // a failure is reported by Reload and shown by /readyz

	tlsConfig := o.TLS.Clone()
	srv := &http.Server{
		Handler:           s.handler,
		TLSConfig:         tlsConfig,
		ReadHeaderTimeout: 10 * time.Second,
		ReadTimeout:       40 * time.Second,
		WriteTimeout:      40 * time.Second,
		IdleTimeout:       90 * time.Second,
		MaxHeaderBytes:    64 << 10,
		ErrorLog:          slog.NewLogLogger(s.log.Handler(), slog.LevelDebug),
		BaseContext:       func(net.Listener) context.Context { return context.WithoutCancel(ctx) },
	}
	if o.HTTP2 {
		tlsConfig.NextProtos = []string{"h2", "http/1.1"}
	} else {
		tlsConfig.NextProtos = []string{"http/1.1"}
		srv.TLSNextProto = map[string]func(*http.Server, *tls.Conn, http.Handler){}
	}

	watchCtx, stopWatch := context.WithCancel(ctx)
	var wg sync.WaitGroup
	if o.ReloadInterval > 0 {
		wg.Go(func() { s.watch(watchCtx, o.ReloadInterval) })
	}
	defer func() { stopWatch(); wg.Wait() }()

	served := make(chan error, 1)
	go func() { served <- srv.ServeTLS(ln, "", "") }()
	s.log.Info("serving webhooks", "addr", ln.Addr().String(), "http2", o.HTTP2)

	select {
	case err := <-served:
		return fmt.Errorf("serving on %s: %w", ln.Addr(), err)
	case <-ctx.Done():
	}
	s.log.Info("shutting down: draining in-flight requests", "grace", o.ShutdownGrace)
	shutdownCtx, cancel := context.WithTimeout(context.Background(), o.ShutdownGrace)
	defer cancel()
	if err := srv.Shutdown(shutdownCtx); err != nil {
		return errors.Join(fmt.Errorf("shutdown: requests still in flight after %s: %w", o.ShutdownGrace, err), srv.Close())
	}
	if err := <-served; err != nil && !errors.Is(err, http.ErrServerClosed) {
		return fmt.Errorf("serving on %s: %w", ln.Addr(), err)
	}
	s.log.Info("stopped")
	return nil
}
