package controlplane

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"time"
)

// AssetsEnv names the environment variable that points at a directory with
// kube-apiserver, etcd and kubectl (the Makefile sets it).
const AssetsEnv = "KUBE_ASSETS"

// buildScript is hack/build-kube.sh relative to the repository root.
const buildScript = "hack/build-kube.sh"

// CheckAssets reports whether dir holds executable kube-apiserver, etcd and
// kubectl binaries.
func CheckAssets(dir string) error {
	if dir == "" {
		return errors.New("no assets directory given")
	}
	var missing []string
	for _, b := range []string{APIServerBinary, EtcdBinary, KubectlBinary} {
		fi, err := os.Stat(filepath.Join(dir, b))
		if err != nil || !fi.Mode().IsRegular() || fi.Mode().Perm()&0o111 == 0 {
			missing = append(missing, b)
		}
	}
	if len(missing) > 0 {
		return fmt.Errorf("assets directory %s lacks executable %s (run hack/build-kube.sh)", dir, strings.Join(missing, ", "))
	}
	return nil
}

// FindAssets returns the directory with the control plane binaries: $KUBE_ASSETS
// when set (it must then hold them), otherwise the directory printed by
// hack/build-kube.sh, which builds the binaries on first use (minutes) and
// reuses its cache afterwards (seconds). The script's progress goes to
// progress. It is found by walking up from the working directory.
func FindAssets(ctx context.Context, progress io.Writer) (string, error) {
	if dir := os.Getenv(AssetsEnv); dir != "" {
		if err := CheckAssets(dir); err != nil {
			return "", fmt.Errorf("%s=%s: %w", AssetsEnv, dir, err)
		}
		return dir, nil
	}
	root, err := RepoRoot()
	if err != nil {
		return "", fmt.Errorf("%s is not set and %w", AssetsEnv, err)
	}
	script := filepath.Join(root, buildScript)
	var stdout bytes.Buffer
	cmd := exec.CommandContext(ctx, script)
	cmd.Dir = root
	cmd.Stdout = &stdout
	cmd.Stderr = progress
	// Own process group so that cancelling also ends the go build children.
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	cmd.Cancel = func() error { return syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL) }
	cmd.WaitDelay = 10 * time.Second
	if err := cmd.Run(); err != nil {
		return "", fmt.Errorf("%s failed: %w", script, err)
	}
	lines := strings.Split(strings.TrimSpace(stdout.String()), "\n")
	dir := strings.TrimSpace(lines[len(lines)-1])
	if err := CheckAssets(dir); err != nil {
		return "", fmt.Errorf("%s printed %q: %w", script, dir, err)
	}
	return dir, nil
}

// RepoRoot walks up from the working directory to the directory holding
// hack/build-kube.sh.
func RepoRoot() (string, error) {
	wd, err := os.Getwd()
	if err != nil {
		return "", fmt.Errorf("get working directory: %w", err)
	}
	for dir := wd; ; {
		if _, err := os.Stat(filepath.Join(dir, buildScript)); err == nil {
			return dir, nil
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			return "", fmt.Errorf("no %s found in %s or any parent directory", buildScript, wd)
		}
		dir = parent
	}
}
