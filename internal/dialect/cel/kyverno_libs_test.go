package cel

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	cryptox509 "crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"math/big"
	"net/http"
	"net/http/httptest"
	"net/url"
	"reflect"
	"regexp"
	"strings"
	"testing"
	"time"

	celgo "github.com/google/cel-go/cel"
	"github.com/google/cel-go/common/types"
	"github.com/google/cel-go/common/types/ref"
	"github.com/google/cel-go/ext"
	"github.com/kyverno/sdk/extensions/cel/libs/gzip"
	"github.com/kyverno/sdk/extensions/cel/libs/hash"
	"github.com/kyverno/sdk/extensions/cel/libs/image"
	sdkjson "github.com/kyverno/sdk/extensions/cel/libs/json"
	sdkmath "github.com/kyverno/sdk/extensions/cel/libs/math"
	sdktime "github.com/kyverno/sdk/extensions/cel/libs/time"
	"github.com/kyverno/sdk/extensions/cel/libs/transform"
	"github.com/kyverno/sdk/extensions/cel/libs/user"
	"github.com/kyverno/sdk/extensions/cel/libs/x509"
	sdkyaml "github.com/kyverno/sdk/extensions/cel/libs/yaml"
	"k8s.io/apiserver/pkg/cel/library"

	"github.com/morph-dev/morph/internal/objects"
)

// kyvernoTestHosts answers the Kyverno libraries from a store, as morph does offline.
func kyvernoTestHosts(t *testing.T, store *objects.Store, allow []string) kyvernoHosts {
	t.Helper()
	return newDialect(Options{Objects: store, HTTPAllowHosts: allow}).hosts
}

// evalKyverno compiles expr in morph's Kyverno environment and evaluates it on object.
func evalKyverno(t *testing.T, hosts kyvernoHosts, namespace, expr string, object map[string]any) (ref.Val, error) {
	t.Helper()
	env, _, err := newKyvernoEnv(hosts, namespace)
	if err != nil {
		t.Fatal(err)
	}
	ast, iss := env.Compile(expr)
	if iss.Err() != nil {
		return nil, iss.Err()
	}
	prog, err := env.Program(ast, programOptions...)
	if err != nil {
		t.Fatal(err)
	}
	data := map[string]any{
		varObject: object, varOldObject: nil, varRequest: map[string]any{},
		varNamespaceObject: nil, varExceptions: ExceptionValues{AllowedImages: []string{"ghcr.io/*"}, AllowedValues: []string{"x"}},
	}
	out, _, err := prog.Eval(data)
	return out, err
}

// referenceEnv is a bare environment with Kyverno's base options and one sdk library:
// what the library answers there is Kyverno's answer.
func referenceEnv(t *testing.T, lib celgo.EnvOption) *celgo.Env {
	t.Helper()
	env, err := celgo.NewEnv(
		celgo.HomogeneousAggregateLiterals(), celgo.DefaultUTCTimeZone(true), celgo.CrossTypeNumericComparisons(true),
		celgo.OptionalTypes(), ext.Bindings(), ext.Encoders(), ext.Lists(ext.ListsVersion(3)), ext.Math(), ext.Protos(),
		ext.Sets(), ext.Strings(ext.StringsVersion(2)), ext.Regex(ext.RegexVersion(1)), library.Lists(), library.Regex(),
		library.Quantity(), library.URLs(), library.IP(), library.CIDR(), library.Format(),
		celgo.Variable("object", celgo.DynType),
		lib,
	)
	if err != nil {
		t.Fatal(err)
	}
	return env
}

func evalIn(t *testing.T, env *celgo.Env, expr string, object map[string]any) (ref.Val, error) {
	t.Helper()
	ast, iss := env.Compile(expr)
	if iss.Err() != nil {
		return nil, iss.Err()
	}
	prog, err := env.Program(ast)
	if err != nil {
		t.Fatal(err)
	}
	out, _, err := prog.Eval(map[string]any{"object": object})
	return out, err
}

func nativeValue(t *testing.T, v ref.Val) any {
	t.Helper()
	n, err := v.ConvertToNative(reflect.TypeFor[any]())
	if err != nil {
		return v.Value()
	}
	return n
}

// TestKyvernoLibrariesMatchTheSDK evaluates every pure library function of the sdk in
// morph's Kyverno environment and in a bare environment holding only that library: the
// answers must be equal (the bare one is the sdk's own answer, hence Kyverno's), and
// equal to the value Kyverno documents where the table gives one.
func TestKyvernoLibrariesMatchTheSDK(t *testing.T) {
	object := map[string]any{
		"metadata": map[string]any{"name": "web", "annotations": map[string]any{"cfg": `{"replicas": 3, "tier": "gold"}`, "y": "a: 1\nb: [x, y]\n", "cert": testCertificate(t)}},
		"spec":     map[string]any{"containers": []any{map[string]any{"name": "a", "image": "nginx:1.25"}, map[string]any{"name": "b", "image": "ghcr.io/acme/proxy:v2@sha256:" + strings.Repeat("a", 64)}}},
	}
	tests := []struct {
		lib  celgo.EnvOption
		expr string
		want any // Kyverno's documented value; nil: the sdk's value alone decides
	}{
		{image.Lib(image.Latest()), `image("nginx:1.25").registry()`, "index.docker.io"},
		{image.Lib(image.Latest()), `image("nginx:1.25").repository()`, "library/nginx"},
		{image.Lib(image.Latest()), `image("nginx:1.25").tag()`, "1.25"},
		{image.Lib(image.Latest()), `image("nginx").tag()`, "latest"},
		{image.Lib(image.Latest()), `image("ghcr.io/acme/proxy:v2").registry()`, "ghcr.io"},
		{image.Lib(image.Latest()), `image(object.spec.containers[1].image).identifier()`, nil},
		{image.Lib(image.Latest()), `image(object.spec.containers[1].image).digest()`, "sha256:" + strings.Repeat("a", 64)},
		{image.Lib(image.Latest()), `image(object.spec.containers[1].image).containsDigest()`, true},
		{image.Lib(image.Latest()), `parseImageReference("localhost:5000/app").registry()`, "localhost:5000"},
		{image.Lib(image.Latest()), `isImage("Not An Image")`, false},
		{image.Lib(image.Latest()), `isImage("nginx")`, true},
		{image.Lib(image.Latest()), `image("nginx:1.25").identifierWithSeparator()`, nil},
		{user.Lib(user.Latest()), `parseServiceAccount("system:serviceaccount:team:builder").Namespace`, "team"},
		{user.Lib(user.Latest()), `parseServiceAccount("system:serviceaccount:a:b:c").Name`, nil},
		{user.Lib(user.Latest()), `user.parseServiceAccount("alice").Name`, nil},
		{hash.Lib(hash.Latest()), `sha256("morph")`, nil},
		{hash.Lib(hash.Latest()), `hash.md5("morph")`, nil},
		{hash.Lib(hash.Latest()), `sha1("morph")`, nil},
		{sdkmath.Lib(sdkmath.Latest()), `math.round(2.567, 2)`, 2.57},
		{sdkjson.Lib(&sdkjson.JsonImpl{}, sdkjson.Latest()), `json.unmarshal(object.metadata.annotations.cfg).tier`, "gold"},
		{sdkjson.Lib(&sdkjson.JsonImpl{}, sdkjson.Latest()), `json.unmarshal(object.metadata.annotations.cfg).replicas`, nil},
		{sdkjson.Lib(&sdkjson.JsonImpl{}, sdkjson.Latest()), `json.marshal({"a": [1, 2]})`, nil},
		{sdkyaml.Lib(&sdkyaml.YamlImpl{}, sdkyaml.Latest()), `yaml.parse(object.metadata.annotations.y).b`, []any{"x", true}},
		{transform.Lib(transform.Latest()), `listObjToMap(object.spec.containers, object.spec.containers, "name", "image")`, nil},
		{gzip.Lib(gzip.Latest()), `string(gzip.decompress(gzip.compress(b"morph")))`, "morph"},
		{sdktime.Lib(sdktime.Latest()), `time.truncate(timestamp("2026-11-23T08:17:33Z"), duration("1h"))`, nil},
		{sdktime.Lib(sdktime.Latest()), `time.toCron(timestamp("2026-11-23T08:17:33Z"))`, nil},
		{x509.Lib(x509.Latest()), `x509.decode("not a certificate")`, nil},
		{x509.Lib(x509.Latest()), `x509.decode(object.metadata.annotations.cert).Subject.CommonName`, "morph-test"},
		{x509.Lib(x509.Latest()), `x509.decode(object.metadata.annotations.cert).IsCA`, true},
	}
	hosts := kyvernoTestHosts(t, objects.NewStore(), nil)
	for _, tt := range tests {
		t.Run(tt.expr, func(t *testing.T) {
			got, gotErr := evalKyverno(t, hosts, "", tt.expr, object)
			want, wantErr := evalIn(t, referenceEnv(t, tt.lib), tt.expr, object)
			if (gotErr != nil) != (wantErr != nil) {
				t.Fatalf("morph error %v, sdk error %v", gotErr, wantErr)
			}
			if gotErr != nil {
				if gotErr.Error() != wantErr.Error() {
					t.Fatalf("morph error %q, sdk error %q", gotErr, wantErr)
				}
				return
			}
			if got.Equal(want) != types.True {
				t.Fatalf("morph %v, sdk %v", got, want)
			}
			if tt.want != nil {
				if n := nativeValue(t, got); !reflect.DeepEqual(n, tt.want) {
					t.Fatalf("got %#v, want %#v", n, tt.want)
				}
			}
		})
	}
}

// TestKyvernoEnvironment checks what Kyverno's environment adds to the API server's:
// cel-go's extensions, orValue, jsonpatch.escapeKey, exceptions and the random and
// time.now functions.
func TestKyvernoEnvironment(t *testing.T) {
	hosts := kyvernoTestHosts(t, objects.NewStore(), nil)
	object := map[string]any{"metadata": map[string]any{"name": "web", "labels": map[string]any{"a/b": "c"}}}
	tests := []struct {
		expr string
		want any
		re   string
	}{
		{expr: `cel.bind(n, object.metadata.name, n + n)`, want: "webweb"},
		{expr: `base64.encode(b"hi")`, want: "aGk="},
		{expr: `string(base64.decode("aGk="))`, want: "hi"},
		{expr: `math.greatest(1, 5, 3)`, want: int64(5)},
		{expr: `math.least([4, 2])`, want: int64(2)},
		{expr: `regex.replace("docker.io/nginx", "^docker\\.io/", "mirror.local/")`, want: "mirror.local/nginx"},
		{expr: `regex.extract("ghcr.io/acme/app", "^([^/]+)/").value()`, want: "ghcr.io"},
		{expr: `regex.extractAll("a1b2", "[0-9]")`, want: []any{"1", "2"}},
		{expr: `object.metadata.?missing.orValue("none")`, want: "none"},
		{expr: `optional.of("v").orValue("dflt")`, want: "v"},
		{expr: `jsonpatch.escapeKey("a/b~c")`, want: "a~1b~0c"},
		{expr: `exceptions.allowedImages`, want: []any{"ghcr.io/*"}},
		{expr: `exceptions.allowedValues`, want: []any{"x"}},
		{expr: `random("[a-z]{8}")`, re: `^[a-z]{8}$`},
		{expr: `time.now() > timestamp("2020-01-01T00:00:00Z")`, want: true},
		{expr: `quantity("1Gi").isGreaterThan(quantity("1Mi"))`, want: true},
	}
	for _, tt := range tests {
		t.Run(tt.expr, func(t *testing.T) {
			got, err := evalKyverno(t, hosts, "", tt.expr, object)
			if err != nil {
				t.Fatal(err)
			}
			n := nativeValue(t, got)
			if tt.re != "" {
				s, _ := n.(string)
				if !regexp.MustCompile(tt.re).MatchString(s) {
					t.Fatalf("got %q, want a match of %s", s, tt.re)
				}
				return
			}
			if !reflect.DeepEqual(n, tt.want) {
				t.Fatalf("got %#v, want %#v", n, tt.want)
			}
		})
	}
	if _, err := evalKyverno(t, hosts, "", `exceptions.unknownField`, object); err == nil || !strings.Contains(err.Error(), "undefined field") {
		t.Errorf("exceptions.unknownField: error %v, want undefined field", err)
	}
}

// TestKyvernoHostLibraries checks the libraries that read data, offline from the store.
func TestKyvernoHostLibraries(t *testing.T) {
	store := objects.NewStore()
	for _, o := range []map[string]any{
		{"apiVersion": "v1", "kind": "ConfigMap", "metadata": map[string]any{"name": "a", "namespace": "default", "labels": map[string]any{"team": "x"}}, "data": map[string]any{"k": "v"}},
		{"apiVersion": "v1", "kind": "ConfigMap", "metadata": map[string]any{"name": "b", "namespace": "default"}},
		{"apiVersion": "v1", "kind": "ConfigMap", "metadata": map[string]any{"name": "c", "namespace": "other"}},
		{"apiVersion": "kyverno.io/v2alpha1", "kind": "GlobalContextEntry", "metadata": map[string]any{"name": "cms"},
			"spec": map[string]any{"kubernetesResource": map[string]any{"group": "", "version": "v1", "resource": "configmaps", "namespace": "default"},
				"projections": []any{map[string]any{"name": "names", "jmesPath": "[].metadata.name"}}}},
		{"apiVersion": "kyverno.io/v2alpha1", "kind": "GlobalContextEntry", "metadata": map[string]any{"name": "call"},
			"spec": map[string]any{"apiCall": map[string]any{"urlPath": "/api/v1/namespaces/other/configmaps"},
				"projections": []any{map[string]any{"name": "count", "jmesPath": "length(items)"}}}},
		{"apiVersion": "cli.kyverno.io/v1alpha1", "kind": "Context", "metadata": map[string]any{"name": "ctx"},
			"spec": map[string]any{"images": []any{map[string]any{"image": "nginx:1.25", "resolvedImage": "index.docker.io/library/nginx@sha256:abc",
				"registry": "index.docker.io", "repository": "library/nginx", "tag": "1.25", "config": map[string]any{"config": map[string]any{"User": "101"}}}}}},
	} {
		if err := store.Add(o); err != nil {
			t.Fatal(err)
		}
	}
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch r.URL.Path {
		case "/team":
			_, _ = w.Write([]byte(`{"team": "platform", "size": 3}`))
		case "/list":
			_, _ = w.Write([]byte(`[1, 2]`))
		default:
			w.WriteHeader(http.StatusInternalServerError)
			_, _ = w.Write([]byte(`oops`))
		}
	}))
	defer srv.Close()
	u, _ := url.Parse(srv.URL)
	base := srv.URL
	hosts := kyvernoTestHosts(t, store, []string{u.Host})
	tests := []struct {
		expr    string
		want    any
		wantErr string
	}{
		{expr: `resource.Get("v1", "configmaps", "default", "a").data.k`, want: "v"},
		{expr: `type(resource.get("v1", "configmaps", "default", "zz")) == null_type`, want: true},
		{expr: `resource.List("v1", "configmaps", "default").items.size()`, want: int64(2)},
		{expr: `dyn(resource.list("v1", "configmaps", "", {"team": "x"}).items).map(i, i.metadata.name)`, want: []any{"a"}},
		{expr: `resource.get(resource.toGVR("v1", "ConfigMap"), "other", "c").metadata.name`, want: "c"},
		{expr: `resource.Get("example.com/v1", "widgets", "default", "w")`, wantErr: "pass its CustomResourceDefinition with --context"},
		{expr: `resource.post("v1", "configmaps", "default", {"metadata": {"name": "x"}})`, wantErr: "morph does not create objects"},
		{expr: `globalContext.Get("cms", "names")`, want: []any{"a", "b"}},
		{expr: `globalContext.get("cms", "").size()`, want: int64(2)},
		{expr: `globalContext.Get("call", "count")`, want: float64(1)},
		{expr: `globalContext.Get("missing", "") == null`, want: true},
		{expr: `globalContext.Get("missing") == null`, want: true},
		{expr: `globalContext.Get("cms", "nope")`, wantErr: `projection "nope" not found`},
		{expr: `image.GetMetadata("nginx:1.25").config.config.User`, want: "101"},
		{expr: `image.getMetadata("redis:7")`, wantErr: "pass a cli.kyverno.io/v1alpha1 Context with spec.images with --context"},
		{expr: `http.Get("` + base + `/team").team`, want: "platform"},
		{expr: `http.get("` + base + `/team").statusCode`, want: int64(200)},
		{expr: `http.get("` + base + `/list").body`, want: []any{1.0, 2.0}},
		{expr: `http.get("` + base + `/fail").statusCode`, want: int64(500)},
		{expr: `http.get("http://example.invalid/x")`, wantErr: "is not allowed: allow it with --allow-http-host"},
	}
	for _, tt := range tests {
		t.Run(tt.expr, func(t *testing.T) {
			got, err := evalKyverno(t, hosts, "", tt.expr, map[string]any{})
			if tt.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
					t.Fatalf("error %v, want one containing %q", err, tt.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if n := nativeValue(t, got); !reflect.DeepEqual(n, tt.want) {
				t.Fatalf("got %#v, want %#v", n, tt.want)
			}
		})
	}
}

// TestNamespacedKyvernoLibraries checks what a NamespacedMutatingPolicy gets, as in
// Kyverno: resource.* without a namespace argument (its own namespace), no
// globalContext, no http.
func TestNamespacedKyvernoLibraries(t *testing.T) {
	store := objects.NewStore()
	_ = store.Add(map[string]any{"apiVersion": "v1", "kind": "ConfigMap", "metadata": map[string]any{"name": "a", "namespace": "team"}})
	_ = store.Add(map[string]any{"apiVersion": "v1", "kind": "ConfigMap", "metadata": map[string]any{"name": "a", "namespace": "other"}})
	hosts := kyvernoTestHosts(t, store, []string{"example.com"})
	if got, err := evalKyverno(t, hosts, "team", `resource.get("v1", "configmaps", "a").metadata.namespace`, nil); err != nil || got.Value() != "team" {
		t.Errorf("resource.get = %v, %v; want team", got, err)
	}
	if _, err := evalKyverno(t, hosts, "team", `resource.get("v1", "configmaps", "other", "a")`, nil); err == nil || !strings.Contains(err.Error(), "found no matching overload") {
		t.Errorf("4-argument resource.get in a namespaced policy: %v, want no matching overload", err)
	}
	if _, err := evalKyverno(t, hosts, "team", `globalContext.get("x", "")`, nil); err == nil || !strings.Contains(err.Error(), "not allowed in namespaced policies") {
		t.Errorf("globalContext in a namespaced policy: %v", err)
	}
	if _, err := evalKyverno(t, hosts, "team", `http.get("https://example.com/")`, nil); err == nil || !strings.Contains(err.Error(), "not allowed in namespaced policies") {
		t.Errorf("http in a namespaced policy: %v", err)
	}
}

// TestHTTPGuard checks that the sdk's blocked ranges apply on top of the allow list.
func TestHTTPGuard(t *testing.T) {
	h := newHTTPCaller([]string{"metadata.google.internal", "localhost:1", "[::ffff:169.254.169.254]"}, 0)
	for _, u := range []string{"http://metadata.google.internal/", "http://localhost:1/", "http://[::ffff:169.254.169.254]/"} {
		if _, err := h.Get(u, nil); err == nil {
			t.Errorf("%s: no error, want blocked", u)
		} else if !strings.Contains(err.Error(), "blocked") && !strings.Contains(err.Error(), "metadata server") {
			t.Errorf("%s: %v, want blocked", u, err)
		}
	}
}

// testCertificate is a self-signed CA certificate in PEM.
func testCertificate(t *testing.T) string {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &cryptox509.Certificate{
		SerialNumber:          big.NewInt(1),
		Subject:               pkix.Name{CommonName: "morph-test"},
		NotBefore:             time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC),
		NotAfter:              time.Date(2036, 1, 1, 0, 0, 0, 0, time.UTC),
		IsCA:                  true,
		BasicConstraintsValid: true,
	}
	der, err := cryptox509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	return string(pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}))
}
