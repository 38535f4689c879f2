package main

import (
	"archive/tar"
	"bytes"
	"context"
	"crypto/x509"
	"encoding/pem"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/layout"
)

// testOptions are fixed inputs: two builds from them must give the same image.
func testOptions(out string) options {
	return options{
		root: filepath.Join("..", ".."), out: out, version: "v0.0.0-test",
		revision: "0123456789abcdef0123456789abcdef01234567", epoch: 0,
		platforms: []string{"linux/amd64", "linux/arm64"}, goBin: "go",
	}
}

// TestImage builds the image twice from the same inputs and compares digests, then
// reads it: an index of linux/amd64 and linux/arm64 with the OCI annotations, configs
// that run /usr/bin/morph as 65532, and an amd64 layer whose binary runs.
func TestImage(t *testing.T) {
	if testing.Short() {
		t.Skip("builds morph for two platforms")
	}
	dirs := []string{filepath.Join(t.TempDir(), "a"), filepath.Join(t.TempDir(), "b")}
	var digests []v1.Hash
	for _, dir := range dirs {
		d, err := build(context.Background(), testOptions(dir))
		if err != nil {
			t.Fatal(err)
		}
		digests = append(digests, d)
	}
	if digests[0] != digests[1] {
		t.Fatalf("two builds from the same inputs: %s and %s", digests[0], digests[1])
	}
	t.Logf("image index %s, twice", digests[0])
	a, _ := os.ReadFile(filepath.Join(dirs[0], "index.json"))
	b, _ := os.ReadFile(filepath.Join(dirs[1], "index.json"))
	if !bytes.Equal(a, b) {
		t.Errorf("index.json differs:\n%s\n%s", a, b)
	}

	lp, err := layout.FromPath(dirs[0])
	if err != nil {
		t.Fatal(err)
	}
	top, err := lp.ImageIndex()
	if err != nil {
		t.Fatal(err)
	}
	idx, err := top.ImageIndex(digests[0])
	if err != nil {
		t.Fatalf("the layout's index.json does not name the image index %s: %v", digests[0], err)
	}
	im, err := idx.IndexManifest()
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]string{
		"org.opencontainers.image.source":   "https://github.com/morph-dev/morph",
		"org.opencontainers.image.version":  "v0.0.0-test",
		"org.opencontainers.image.revision": "0123456789abcdef0123456789abcdef01234567",
		"org.opencontainers.image.created":  "1970-01-01T00:00:00Z",
	}
	for k, v := range want {
		if im.Annotations[k] != v {
			t.Errorf("index annotation %s = %q, want %q", k, im.Annotations[k], v)
		}
	}
	var platforms []string
	for _, desc := range im.Manifests {
		platforms = append(platforms, desc.Platform.String())
		img, err := idx.Image(desc.Digest)
		if err != nil {
			t.Fatal(err)
		}
		cfg, err := img.ConfigFile()
		if err != nil {
			t.Fatal(err)
		}
		if uid, _, _ := strings.Cut(cfg.Config.User, ":"); uid != "65532" {
			t.Errorf("%s: User %q, want 65532", desc.Platform, cfg.Config.User)
		}
		if !slices.Equal(cfg.Config.Entrypoint, []string{"/usr/bin/morph"}) {
			t.Errorf("%s: Entrypoint %q", desc.Platform, cfg.Config.Entrypoint)
		}
		if cfg.Architecture != desc.Platform.Architecture || cfg.OS != "linux" {
			t.Errorf("%s: config says %s/%s", desc.Platform, cfg.OS, cfg.Architecture)
		}
		for k, v := range want {
			if cfg.Config.Labels[k] != v {
				t.Errorf("%s: label %s = %q, want %q", desc.Platform, k, cfg.Config.Labels[k], v)
			}
		}
		if cfg.Created.Unix() != 0 {
			t.Errorf("%s: created %v", desc.Platform, cfg.Created)
		}
		if desc.Platform.Architecture == "amd64" {
			checkLayer(t, img)
		}
	}
	if !slices.Equal(platforms, []string{"linux/amd64", "linux/arm64"}) {
		t.Errorf("platforms %v", platforms)
	}
}

// checkLayer reads the image's only layer: the files, their owners and dates, and
// runs the binary.
func checkLayer(t *testing.T, img v1.Image) {
	t.Helper()
	layers, err := img.Layers()
	if err != nil || len(layers) != 1 {
		t.Fatalf("%d layers (%v), want 1", len(layers), err)
	}
	rc, err := layers[0].Uncompressed()
	if err != nil {
		t.Fatal(err)
	}
	defer rc.Close()
	files := map[string][]byte{}
	tr := tar.NewReader(rc)
	for {
		h, err := tr.Next()
		if err == io.EOF {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		if h.ModTime.Unix() != 0 {
			t.Errorf("%s: mtime %v, want the epoch", h.Name, h.ModTime)
		}
		if h.Typeflag == tar.TypeReg {
			if h.Uid != 0 || h.Mode&0o022 != 0 {
				t.Errorf("%s: uid %d mode %o: root's, not writable by others", h.Name, h.Uid, h.Mode)
			}
			data, err := io.ReadAll(tr)
			if err != nil {
				t.Fatal(err)
			}
			files[h.Name] = data
		}
	}
	if !strings.Contains(string(files["etc/passwd"]), "nonroot:x:65532:65532:") {
		t.Errorf("/etc/passwd has no user 65532:\n%s", files["etc/passwd"])
	}
	n := 0
	for rest := files["etc/ssl/certs/ca-certificates.crt"]; ; {
		var block *pem.Block
		block, rest = pem.Decode(rest)
		if block == nil {
			break
		}
		if _, err := x509.ParseCertificate(block.Bytes); err != nil {
			t.Errorf("CA bundle: %v", err)
		}
		n++
	}
	if n < 100 {
		t.Errorf("CA bundle holds %d certificates", n)
	}
	bin := filepath.Join(t.TempDir(), "morph")
	if err := os.WriteFile(bin, files["usr/bin/morph"], 0o755); err != nil {
		t.Fatal(err)
	}
	out, err := exec.Command(bin, "version").CombinedOutput()
	if err != nil || string(out) != "morph v0.0.0-test\n" {
		t.Errorf("morph version from the image's layer: %q, %v", out, err)
	}
	t.Logf("amd64 layer: %d files, %d CA certificates, %s", len(files), n, strings.TrimSpace(string(out)))
}
