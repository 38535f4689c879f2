// Package e2e holds morph's end-to-end tests: they run against a real
// kube-apiserver and etcd on 127.0.0.1, started once per test binary by
// TestMain through Main (see package test/e2e/controlplane and docs/e2e.md).
//
// This file is the reusable harness: Main, the clients of the running cluster
// (Current) and helpers that create objects and remove them again at test
// cleanup: CreateNamespace, CreateCRD, StartWebhookServer,
// RegisterMutatingWebhook, RegisterValidatingWebhook and Eventually.
//
// Set MORPH_E2E=0 to skip the package; any other failure to build or start
// the control plane fails it.
package e2e

import (
	"context"
	"fmt"
	"os"
	"os/signal"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	apiextensionsclient "k8s.io/apiextensions-apiserver/pkg/client/clientset/clientset"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"

	"github.com/morph-dev/morph/test/e2e/controlplane"
)

// Cluster is the running control plane and clients for it, all acting as
// the system:masters admin user.
type Cluster struct {
	ControlPlane  *controlplane.ControlPlane
	Kube          kubernetes.Interface
	Dynamic       dynamic.Interface
	APIExtensions apiextensionsclient.Interface
	config        *rest.Config
}

// Config returns a copy of the admin client configuration.
func (c *Cluster) Config() *rest.Config { return rest.CopyConfig(c.config) }

// KubeconfigPath is an admin kubeconfig for the cluster (e.g. for kubectl).
func (c *Cluster) KubeconfigPath() string { return c.ControlPlane.KubeconfigPath }

// current is the cluster of this test binary, set once by Main before the
// tests run; it is the only package-level state.
var current atomic.Pointer[Cluster]

// Current returns the running cluster; it fails the test if Main did not
// start one.
func Current(t testing.TB) *Cluster {
	t.Helper()
	c := current.Load()
	if c == nil {
		t.Fatal("e2e: no control plane: TestMain must call e2e.Main")
	}
	return c
}

// Main is the body of TestMain:
//
//	func TestMain(m *testing.M) { os.Exit(e2e.Main(m)) }
//
// MORPH_E2E=0 skips everything (exit 0). Otherwise it finds or builds the
// binaries (controlplane.FindAssets), starts the control plane, runs the
// tests and stops the control plane again, also on SIGINT/SIGTERM. A
// failure to build or start is a test failure, never a skip.
func Main(m *testing.M) (code int) {
	if os.Getenv("MORPH_E2E") == "0" {
		fmt.Println("e2e tests skipped: MORPH_E2E=0")
		return 0
	}
	fail := func(format string, args ...any) int {
		fmt.Fprintf(os.Stderr, "FAIL: e2e: "+format+"\n", args...)
		return 1
	}
	logf := func(format string, args ...any) {
		fmt.Fprintf(os.Stderr, "e2e: "+format+"\n", args...)
	}

	// Ctrl-C or SIGTERM: cancel set-up, or stop the control plane and exit
	// if the tests are already running.
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var running atomic.Pointer[controlplane.ControlPlane]
	sigc := make(chan os.Signal, 1)
	signal.Notify(sigc, os.Interrupt, syscall.SIGTERM)
	defer signal.Stop(sigc)
	finished := make(chan struct{})
	defer close(finished)
	go func() {
		select {
		case sig := <-sigc:
			logf("received %v, stopping the control plane", sig)
			cancel()
			if cp := running.Load(); cp != nil {
				if err := cp.Stop(); err != nil {
					logf("stop control plane: %v", err)
				}
				os.Exit(1)
			}
		case <-finished:
		}
	}()

	buildCtx, buildCancel := context.WithTimeout(ctx, 30*time.Minute)
	assets, err := controlplane.FindAssets(buildCtx, os.Stderr)
	buildCancel()
	if err != nil {
		return fail("cannot get kube-apiserver/etcd binaries: %v", err)
	}

	start := time.Now()
	cp, err := controlplane.Start(ctx, controlplane.Options{AssetsDir: assets, Logf: logf})
	if err != nil {
		return fail("cannot start the control plane from %s: %v", assets, err)
	}
	running.Store(cp)
	defer func() {
		if code != 0 {
			fmt.Fprint(os.Stderr, cp.LogTails(30))
		}
		stopStart := time.Now()
		if err := cp.Stop(); err != nil {
			logf("stop control plane: %v", err)
			if code == 0 {
				code = 1
			}
			return
		}
		logf("control plane stopped in %v", time.Since(stopStart).Round(time.Millisecond))
	}()
	if ctx.Err() != nil {
		return fail("interrupted")
	}
	logf("control plane up in %v: %s (kubeconfig %s)", time.Since(start).Round(time.Millisecond), cp.APIServerURL, cp.KubeconfigPath)

	c, err := newCluster(cp)
	if err != nil {
		return fail("%v", err)
	}
	current.Store(c)
	defer current.Store(nil)
	return m.Run()
}

func newCluster(cp *controlplane.ControlPlane) (*Cluster, error) {
	cfg := cp.RESTConfig()
	kube, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		return nil, fmt.Errorf("create kubernetes client: %w", err)
	}
	dyn, err := dynamic.NewForConfig(cfg)
	if err != nil {
		return nil, fmt.Errorf("create dynamic client: %w", err)
	}
	apiext, err := apiextensionsclient.NewForConfig(cfg)
	if err != nil {
		return nil, fmt.Errorf("create apiextensions client: %w", err)
	}
	return &Cluster{ControlPlane: cp, Kube: kube, Dynamic: dyn, APIExtensions: apiext, config: cfg}, nil
}

// Eventually calls fn until it returns nil, failing the test with fn's last
// error if that does not happen within timeout. Intervals grow from 50ms to
// 1s.
func Eventually(t testing.TB, timeout time.Duration, fn func() error) {
	t.Helper()
	if err := poll(context.Background(), timeout, fn); err != nil {
		t.Fatal(err)
	}
}

// poll is Eventually returning the error instead of failing a test.
func poll(ctx context.Context, timeout time.Duration, fn func() error) error {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	interval := 50 * time.Millisecond
	for {
		err := fn()
		if err == nil {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("condition not met within %v: %w", timeout, err)
		case <-time.After(interval):
		}
		interval = min(2*interval, time.Second)
	}
}

// cleanupContext is the context for API calls in t.Cleanup functions, where
// t.Context() is already cancelled.
func cleanupContext() (context.Context, context.CancelFunc) {
	return context.WithTimeout(context.Background(), time.Minute)
}
