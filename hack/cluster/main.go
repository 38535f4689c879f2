// Command cluster runs the control plane of morph's end-to-end tests (etcd
// and kube-apiserver on 127.0.0.1, see package test/e2e/controlplane) for
// interactive use until it is interrupted. It is what `make cluster` runs.
//
// Usage:
//
//	go run ./hack/cluster [-kubeconfig PATH]
//
// The binaries come from $KUBE_ASSETS or are built by hack/build-kube.sh.
// It prints the kubeconfig path and stops everything on Ctrl-C or SIGTERM,
// or exits non-zero if etcd or kube-apiserver dies.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"path/filepath"
	"syscall"
	"time"

	"github.com/morph-dev/morph/test/e2e/controlplane"
)

func main() {
	kubeconfig := flag.String("kubeconfig", "", "also write the admin kubeconfig to `path` (removed again on exit)")
	flag.Parse()
	if err := run(*kubeconfig); err != nil {
		fmt.Fprintf(os.Stderr, "cluster: %v\n", err)
		os.Exit(1)
	}
}

func run(kubeconfigCopy string) (err error) {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	logf := func(format string, args ...any) { fmt.Fprintf(os.Stderr, "cluster: "+format+"\n", args...) }

	assets, err := controlplane.FindAssets(ctx, os.Stderr)
	if err != nil {
		return fmt.Errorf("get kube-apiserver/etcd binaries: %w", err)
	}
	start := time.Now()
	cp, err := controlplane.Start(ctx, controlplane.Options{AssetsDir: assets, Logf: logf})
	if err != nil {
		return fmt.Errorf("start control plane: %w", err)
	}
	defer func() {
		logf("stopping")
		if stopErr := cp.Stop(); stopErr != nil {
			err = errors.Join(err, fmt.Errorf("stop control plane: %w", stopErr))
		}
	}()

	path := cp.KubeconfigPath
	if kubeconfigCopy != "" {
		data, err := os.ReadFile(cp.KubeconfigPath)
		if err != nil {
			return fmt.Errorf("read kubeconfig: %w", err)
		}
		if path, err = filepath.Abs(kubeconfigCopy); err != nil {
			return fmt.Errorf("kubeconfig path %s: %w", kubeconfigCopy, err)
		}
		if err := os.WriteFile(path, data, 0o600); err != nil {
			return fmt.Errorf("write kubeconfig: %w", err)
		}
		defer func() {
			if rmErr := os.Remove(path); rmErr != nil {
				logf("remove %s: %v", path, rmErr)
			}
		}()
	}

	fmt.Printf(`
Control plane up in %v: kube-apiserver %s, etcd %s
  kubeconfig: %s
  kubectl:    %s
  logs:       %s
              %s
No controller-manager, scheduler or nodes: deleted namespaces stay Terminating.

export KUBECONFIG=%s

Press Ctrl-C to stop.
`, time.Since(start).Round(time.Millisecond), cp.APIServerURL, cp.EtcdURL, path, cp.KubectlPath(),
		cp.APIServerLog, cp.EtcdLog, path)

	select {
	case <-ctx.Done():
		return nil
	case <-cp.Exited():
		fmt.Fprint(os.Stderr, cp.LogTails(30))
		return errors.New("etcd or kube-apiserver exited unexpectedly")
	}
}
