package cel

import (
	"io"
	"log"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/google/go-containerregistry/pkg/name"
	"github.com/google/go-containerregistry/pkg/registry"
	"github.com/google/go-containerregistry/pkg/v1/random"
	"github.com/google/go-containerregistry/pkg/v1/remote"

	"github.com/morph-dev/morph/internal/objects"
)

// TestImageDataFromRegistry checks image.getMetadata against a registry on 127.0.0.1:
// read only when --allow-registry names it (no request at all otherwise), in the shape
// of the sdk's image data loader; a Kyverno CLI Context's spec.images comes first.
func TestImageDataFromRegistry(t *testing.T) {
	var requests atomic.Int32
	reg := registry.New(registry.Logger(log.New(io.Discard, "", 0)))
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		requests.Add(1)
		reg.ServeHTTP(w, r)
	}))
	defer srv.Close()
	u, _ := url.Parse(srv.URL)
	host := u.Host // 127.0.0.1:PORT
	img, err := random.Image(64, 1)
	if err != nil {
		t.Fatal(err)
	}
	ref, err := name.ParseReference(host + "/team/app:1.0")
	if err != nil {
		t.Fatal(err)
	}
	if err := remote.Write(ref, img); err != nil {
		t.Fatal(err)
	}
	digest, _ := img.Digest()
	cfg, _ := img.ConfigFile()
	pushed := requests.Load()

	store := objects.NewStore()
	if err := store.Add(map[string]any{"apiVersion": "cli.kyverno.io/v1alpha1", "kind": "Context", "metadata": map[string]any{"name": "ctx"},
		"spec": map[string]any{"images": []any{map[string]any{"image": host + "/team/app:2.0", "registry": "from-context"}}}}); err != nil {
		t.Fatal(err)
	}
	allowed := kyvernoHostsWith(Options{Objects: store, RegistryAllowHosts: []string{host}})
	denied := kyvernoHostsWith(Options{Objects: store})
	tests := []struct {
		name    string
		hosts   kyvernoHosts
		expr    string
		want    any
		wantErr string
	}{
		{name: "registry", hosts: allowed, expr: `image.getMetadata("` + host + `/team/app:1.0").registry`, want: host},
		{name: "repository", hosts: allowed, expr: `image.GetMetadata("` + host + `/team/app:1.0").repository`, want: "team/app"},
		{name: "tag", hosts: allowed, expr: `image.getMetadata("` + host + `/team/app:1.0").tag`, want: "1.0"},
		{name: "resolvedImage", hosts: allowed, expr: `image.getMetadata("` + host + `/team/app:1.0").resolvedImage`, want: host + "/team/app:1.0@" + digest.String()},
		{name: "config", hosts: allowed, expr: `image.getMetadata("` + host + `/team/app:1.0").config.architecture`, want: cfg.Architecture},
		{name: "manifest", hosts: allowed, expr: `image.getMetadata("` + host + `/team/app:1.0").manifest.layers.size()`, want: int64(1)},
		{name: "context first", hosts: allowed, expr: `image.getMetadata("` + host + `/team/app:2.0").registry`, want: "from-context"},
		{name: "context when not allowed", hosts: denied, expr: `image.getMetadata("` + host + `/team/app:2.0").registry`, want: "from-context"},
		{name: "not allowed", hosts: denied, expr: `image.getMetadata("` + host + `/team/app:1.0")`, wantErr: `registry "` + host + `" is not allowed: allow it with --allow-registry`},
		{name: "missing image", hosts: allowed, expr: `image.getMetadata("` + host + `/team/none:1")`, wantErr: "NAME_UNKNOWN"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			before := requests.Load()
			got, err := evalKyverno(t, tt.hosts, "", tt.expr, map[string]any{})
			if tt.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
					t.Fatalf("error %v, want one containing %q", err, tt.wantErr)
				}
			} else {
				if err != nil {
					t.Fatal(err)
				}
				if got.Value() != tt.want {
					t.Fatalf("got %v, want %v", got.Value(), tt.want)
				}
			}
			if strings.HasPrefix(tt.name, "not allowed") && requests.Load() != before {
				t.Errorf("%d requests reached a registry that is not allowed", requests.Load()-before)
			}
		})
	}
	if requests.Load() == pushed {
		t.Error("no request reached the allowed registry")
	}
}

func kyvernoHostsWith(opts Options) kyvernoHosts { return newDialect(opts).hosts }
