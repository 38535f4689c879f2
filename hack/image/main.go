// Command image builds morph's OCI image without Docker: a static morph binary, CA
// certificates and a passwd entry for the non-root user 65532, on an empty base, for
// linux/amd64 and linux/arm64, written as an image index into an OCI layout. It is
// reproducible: the same sources and flags give the same digest (every timestamp is
// -source-date-epoch; the binary is built with -trimpath, without VCS stamping, with
// fixed -ldflags).
//
//	go run . -root ../.. -out ../../build/image      (make image)
//
// The CA certificates are the roots of golang.org/x/crypto/x509roots/fallback/bundle,
// Mozilla's list as the Go project publishes it, pinned by this module's go.sum, rather
// than the build host's /etc/ssl/certs, which would make the image depend on the host.
// Roots that carry a constraint a PEM bundle cannot express (distrust after a date) are
// left out. See docs/install.md.
package main

import (
	"archive/tar"
	"bytes"
	"context"
	"encoding/pem"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/layout"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/tarball"
	"github.com/google/go-containerregistry/pkg/v1/types"
	"golang.org/x/crypto/x509roots/fallback/bundle"
)

// Where things are in the image.
const (
	binaryPath = "usr/bin/morph"
	caPath     = "etc/ssl/certs/ca-certificates.crt"
	uid        = 65532
	source     = "https://github.com/morph-dev/morph"
)

// options are the inputs of a build: the same options on the same sources give the
// same image.
type options struct {
	root      string // the repository root (holds cmd/morph)
	out       string // the OCI layout written (replaced)
	version   string
	revision  string
	epoch     int64
	platforms []string
	goBin     string
}

func main() {
	var o options
	var platforms string
	flag.StringVar(&o.root, "root", ".", "repository root")
	flag.StringVar(&o.out, "out", "build/image", "OCI layout to write (its contents are replaced)")
	flag.StringVar(&o.version, "version", "", "image and binary version (default: git describe --tags --always --dirty)")
	flag.StringVar(&o.revision, "revision", "", "source revision (default: git rev-parse HEAD)")
	flag.Int64Var(&o.epoch, "source-date-epoch", -1, "timestamp of every file and of the image, in seconds (default: $SOURCE_DATE_EPOCH, else the commit time, else 0)")
	flag.StringVar(&platforms, "platforms", "linux/amd64,linux/arm64", "platforms of the index")
	flag.StringVar(&o.goBin, "go", "go", "the go command")
	flag.Parse()
	o.platforms = strings.Split(platforms, ",")
	if err := o.defaults(); err != nil {
		fmt.Fprintln(os.Stderr, "image:", err)
		os.Exit(1)
	}
	digest, err := build(context.Background(), o)
	if err != nil {
		fmt.Fprintln(os.Stderr, "image:", err)
		os.Exit(1)
	}
	fmt.Printf("%s %s@%s (version %s, revision %s, platforms %s)\n", o.out, "morph", digest, o.version, o.revision, platforms)
}

// defaults fills version, revision and epoch from git and the environment.
func (o *options) defaults() error {
	git := func(args ...string) string {
		cmd := exec.Command("git", args...)
		cmd.Dir = o.root
		out, err := cmd.Output()
		if err != nil {
			return ""
		}
		return strings.TrimSpace(string(out))
	}
	if o.version == "" {
		o.version = git("describe", "--tags", "--always", "--dirty")
	}
	if o.revision == "" {
		o.revision = git("rev-parse", "HEAD")
	}
	if o.version == "" || o.revision == "" {
		return errors.New("no version or revision: not a git checkout? give -version and -revision")
	}
	if o.epoch < 0 {
		if s := os.Getenv("SOURCE_DATE_EPOCH"); s != "" {
			v, err := strconv.ParseInt(s, 10, 64)
			if err != nil {
				return fmt.Errorf("SOURCE_DATE_EPOCH=%q: %w", s, err)
			}
			o.epoch = v
		} else if v, err := strconv.ParseInt(git("log", "-1", "--format=%ct"), 10, 64); err == nil {
			o.epoch = v
		} else {
			o.epoch = 0
		}
	}
	return nil
}

// build writes the layout and returns the index's digest.
func build(ctx context.Context, o options) (v1.Hash, error) {
	created := time.Unix(o.epoch, 0).UTC()
	labels := map[string]string{
		"org.opencontainers.image.source":   source,
		"org.opencontainers.image.version":  o.version,
		"org.opencontainers.image.revision": o.revision,
		"org.opencontainers.image.created":  created.Format(time.RFC3339),
		"org.opencontainers.image.title":    "morph",
		"org.opencontainers.image.licenses": "Apache-2.0",
	}
	ca, err := caBundle()
	if err != nil {
		return v1.Hash{}, err
	}
	tmp, err := os.MkdirTemp("", "morph-image-")
	if err != nil {
		return v1.Hash{}, err
	}
	defer func() { _ = os.RemoveAll(tmp) }()
	var adds []mutate.IndexAddendum
	for _, p := range o.platforms {
		plat, err := v1.ParsePlatform(p)
		if err != nil || plat.OS != "linux" || plat.Architecture == "" {
			return v1.Hash{}, fmt.Errorf("platform %q: use linux/ARCH", p)
		}
		bin := filepath.Join(tmp, "morph-"+plat.Architecture)
		if err := o.buildBinary(ctx, plat, bin); err != nil {
			return v1.Hash{}, err
		}
		img, err := image(bin, ca, plat, created, labels)
		if err != nil {
			return v1.Hash{}, fmt.Errorf("%s: %w", p, err)
		}
		adds = append(adds, mutate.IndexAddendum{Add: img, Descriptor: v1.Descriptor{Platform: plat}})
	}
	idx := mutate.IndexMediaType(mutate.AppendManifests(empty.Index, adds...), types.OCIImageIndex)
	idx = mutate.Annotations(idx, labels).(v1.ImageIndex)
	if err := os.RemoveAll(o.out); err != nil {
		return v1.Hash{}, err
	}
	lp, err := layout.Write(o.out, empty.Index)
	if err != nil {
		return v1.Hash{}, err
	}
	if err := lp.AppendIndex(idx, layout.WithAnnotations(map[string]string{"org.opencontainers.image.ref.name": o.version})); err != nil {
		return v1.Hash{}, err
	}
	return idx.Digest()
}

// buildBinary builds a static morph for plat.
func (o options) buildBinary(ctx context.Context, plat *v1.Platform, out string) error {
	args := []string{"build", "-trimpath", "-buildvcs=false", "-ldflags", "-s -w -buildid= -X main.version=" + o.version, "-o", out, "./cmd/morph"}
	cmd := exec.CommandContext(ctx, o.goBin, args...)
	cmd.Dir = o.root
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0", "GOOS=linux", "GOARCH="+plat.Architecture, "GOFLAGS=-mod=readonly", "GOWORK=off")
	if plat.Architecture == "arm" && plat.Variant != "" {
		cmd.Env = append(cmd.Env, "GOARM="+strings.TrimPrefix(plat.Variant, "v"))
	}
	if outb, err := cmd.CombinedOutput(); err != nil {
		return fmt.Errorf("go build for %s: %w\n%s", plat, err, outb)
	}
	return nil
}

// image is one platform's image: config, one layer.
func image(bin string, ca []byte, plat *v1.Platform, created time.Time, labels map[string]string) (v1.Image, error) {
	data, err := os.ReadFile(bin)
	if err != nil {
		return nil, err
	}
	tarball, err := rootfs(data, ca, created)
	if err != nil {
		return nil, err
	}
	layer, err := tarballLayer(tarball)
	if err != nil {
		return nil, err
	}
	cfg := &v1.ConfigFile{
		Architecture: plat.Architecture,
		Variant:      plat.Variant,
		OS:           plat.OS,
		Created:      v1.Time{Time: created},
		Config: v1.Config{
			User:       strconv.Itoa(uid) + ":" + strconv.Itoa(uid),
			Entrypoint: []string{"/" + binaryPath},
			Cmd:        []string{"serve"},
			WorkingDir: "/",
			Env:        []string{"PATH=/usr/bin", "SSL_CERT_FILE=/" + caPath},
			Labels:     labels,
		},
		RootFS: v1.RootFS{Type: "layers"},
	}
	img, err := mutate.ConfigFile(empty.Image, cfg)
	if err != nil {
		return nil, err
	}
	img = mutate.MediaType(img, types.OCIManifestSchema1)
	img = mutate.ConfigMediaType(img, types.OCIConfigJSON)
	img, err = mutate.Append(img, mutate.Addendum{
		Layer:     layer,
		MediaType: types.OCILayer,
		History:   v1.History{Created: v1.Time{Time: created}, CreatedBy: "hack/image: morph, CA certificates, user 65532", Comment: "morph " + labels["org.opencontainers.image.version"]},
	})
	if err != nil {
		return nil, err
	}
	return mutate.Annotations(img, labels).(v1.Image), nil
}

func tarballLayer(data []byte) (v1.Layer, error) {
	return tarball.LayerFromOpener(func() (io.ReadCloser, error) {
		return io.NopCloser(bytes.NewReader(data)), nil
	}, tarball.WithMediaType(types.OCILayer))
}

// rootfs is the layer's tar: directories, /etc/passwd and /etc/group with root and
// the non-root user, the CA bundle and the binary, every entry owned by root (the
// binary world-executable) and dated created.
func rootfs(bin, ca []byte, created time.Time) ([]byte, error) {
	passwd := fmt.Sprintf("root:x:0:0:root:/root:/sbin/nologin\nnonroot:x:%d:%d:nonroot:/home/nonroot:/sbin/nologin\n", uid, uid)
	group := fmt.Sprintf("root:x:0:\nnonroot:x:%d:\n", uid)
	entries := []struct {
		name string
		mode int64
		data []byte
		dir  bool
	}{
		{name: "etc/", mode: 0o755, dir: true},
		{name: "etc/group", mode: 0o644, data: []byte(group)},
		{name: "etc/passwd", mode: 0o644, data: []byte(passwd)},
		{name: "etc/ssl/", mode: 0o755, dir: true},
		{name: "etc/ssl/certs/", mode: 0o755, dir: true},
		{name: caPath, mode: 0o644, data: ca},
		{name: "home/", mode: 0o755, dir: true},
		{name: "home/nonroot/", mode: 0o700, dir: true},
		{name: "tmp/", mode: 0o1777, dir: true},
		{name: "usr/", mode: 0o755, dir: true},
		{name: "usr/bin/", mode: 0o755, dir: true},
		{name: binaryPath, mode: 0o755, data: bin},
	}
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	for _, e := range entries {
		h := &tar.Header{Name: e.name, Mode: e.mode, ModTime: created, Format: tar.FormatPAX, Uname: "root", Gname: "root"}
		if e.dir {
			h.Typeflag = tar.TypeDir
		} else {
			h.Typeflag, h.Size = tar.TypeReg, int64(len(e.data))
		}
		if e.name == "home/nonroot/" {
			h.Uid, h.Gid, h.Uname, h.Gname = uid, uid, "nonroot", "nonroot"
		}
		if err := tw.WriteHeader(h); err != nil {
			return nil, err
		}
		if _, err := tw.Write(e.data); err != nil {
			return nil, err
		}
	}
	if err := tw.Close(); err != nil {
		return nil, err
	}
	return buf.Bytes(), nil
}

// caBundle is the PEM bundle of the unconstrained fallback roots, in the bundle's order.
func caBundle() ([]byte, error) {
	var buf bytes.Buffer
	n := 0
	for root := range bundle.Roots() {
		if root.Constraint != nil {
			continue
		}
		if err := pem.Encode(&buf, &pem.Block{Type: "CERTIFICATE", Bytes: root.Certificate}); err != nil {
			return nil, err
		}
		n++
	}
	if n == 0 {
		return nil, errors.New("the fallback bundle holds no roots")
	}
	return buf.Bytes(), nil
}
