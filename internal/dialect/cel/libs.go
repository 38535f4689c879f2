package cel

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"reflect"
	"slices"
	"strings"
	"time"

	celgo "github.com/google/cel-go/cel"
	"github.com/google/cel-go/common/types"
	"github.com/google/cel-go/common/types/ref"
	"github.com/google/cel-go/common/types/traits"

	"k8s.io/apimachinery/pkg/runtime/schema"

	"github.com/morph-dev/morph/internal/engine"
	"github.com/morph-dev/morph/internal/objects"
)

// ResourceReader answers resource.Get and resource.List: offline from the context
// objects, in a cluster from the API server.
type ResourceReader interface {
	// Get returns one object; apiVersion is "v1" or "group/version", resource the plural.
	Get(ctx context.Context, apiVersion, resource, namespace, name string) (map[string]any, error)
	// List returns the objects of a resource in a namespace ("" for all).
	List(ctx context.Context, apiVersion, resource, namespace string) ([]map[string]any, error)
}

// GlobalContextReader answers globalContext.Get with the data of a Kyverno
// GlobalContextEntry.
type GlobalContextReader interface {
	GlobalContext(ctx context.Context, name, projection string) (any, error)
}

// storeReader answers the resource and globalContext libraries from an objects.Store.
type storeReader struct {
	store *objects.Store
}

func (s storeReader) kindOf(apiVersion, resource string) (schema.GroupVersion, string, error) {
	gv, err := schema.ParseGroupVersion(apiVersion)
	if err != nil {
		return gv, "", fmt.Errorf("apiVersion %q: %w", apiVersion, err)
	}
	if s.store == nil {
		return gv, "", fmt.Errorf("no context objects: pass the objects policies read with --context")
	}
	kind, ok := s.store.KindFor(gv.Group, resource)
	if !ok {
		return gv, "", fmt.Errorf("resource %q of %q is unknown: pass its CustomResourceDefinition with --context", resource, apiVersion)
	}
	return gv, kind, nil
}

func (s storeReader) Get(_ context.Context, apiVersion, resource, namespace, name string) (map[string]any, error) {
	gv, kind, err := s.kindOf(apiVersion, resource)
	if err != nil {
		return nil, err
	}
	obj, ok := s.store.Get(gv.Group, kind, namespace, name)
	if !ok {
		where := name
		if namespace != "" {
			where = namespace + "/" + name
		}
		return nil, fmt.Errorf("%s %s not found: pass it with --context", kind, where)
	}
	return obj, nil
}

func (s storeReader) List(_ context.Context, apiVersion, resource, namespace string) ([]map[string]any, error) {
	gv, kind, err := s.kindOf(apiVersion, resource)
	if err != nil {
		return nil, err
	}
	return s.store.List(gv.Group, kind, namespace), nil
}

// GlobalContext reads a GlobalContextEntry (kyverno.io or policies.kyverno.io) from the
// store. Offline, an entry carries its data itself: the top-level field "data" is the
// entry's value, and "projections" maps a projection name to its value.
func (s storeReader) GlobalContext(_ context.Context, name, projection string) (any, error) {
	if s.store == nil {
		return nil, fmt.Errorf("global context entry %q: no context objects: pass it with --context", name)
	}
	for _, group := range []string{"kyverno.io", groupKyverno} {
		entry, ok := s.store.Get(group, "GlobalContextEntry", "", name)
		if !ok {
			continue
		}
		if projection == "" {
			data, ok := entry["data"]
			if !ok {
				return nil, fmt.Errorf("global context entry %q has no data field", name)
			}
			return data, nil
		}
		projections, _ := entry["projections"].(map[string]any)
		v, ok := projections[projection]
		if !ok {
			return nil, fmt.Errorf("global context entry %q has no projection %q under projections", name, projection)
		}
		return v, nil
	}
	return nil, fmt.Errorf("global context entry %q not found: pass the GlobalContextEntry with --context", name)
}

// maxHTTPBody bounds the response body of http.Get and http.Post.
const maxHTTPBody = 2 << 20

// httpCaller answers http.Get and http.Post for the hosts it allows.
type httpCaller struct {
	allow   []string
	timeout time.Duration
	client  *http.Client
}

func newHTTPCaller(allow []string, timeout time.Duration) *httpCaller {
	if timeout <= 0 {
		timeout = 10 * time.Second
	}
	return &httpCaller{allow: allow, timeout: timeout, client: &http.Client{
		Timeout: timeout,
		CheckRedirect: func(req *http.Request, via []*http.Request) error {
			return fmt.Errorf("redirects are not followed (to %s)", req.URL.Redacted())
		},
	}}
}

func (h *httpCaller) allowed(u *url.URL) bool {
	host := u.Host
	hostname := u.Hostname()
	return slices.Contains(h.allow, host) || slices.Contains(h.allow, hostname)
}

func (h *httpCaller) do(method, rawURL string, body any, headers map[string]string) (any, error) {
	u, err := url.Parse(rawURL)
	if err != nil {
		return nil, fmt.Errorf("http %s %q: %w", method, rawURL, err)
	}
	if u.Scheme != "http" && u.Scheme != "https" {
		return nil, fmt.Errorf("http: %q: only http and https URLs are allowed", rawURL)
	}
	if len(h.allow) == 0 {
		return nil, fmt.Errorf("http: calls are off: allow the host %q with --allow-http-host", u.Host)
	}
	if !h.allowed(u) {
		return nil, fmt.Errorf("http: host %q is not allowed: allow it with --allow-http-host", u.Host)
	}
	var reader io.Reader
	if body != nil {
		raw, err := json.Marshal(body)
		if err != nil {
			return nil, fmt.Errorf("http: encoding the body: %w", err)
		}
		reader = bytes.NewReader(raw)
	}
	ctx, cancel := context.WithTimeout(context.Background(), h.timeout)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, method, u.String(), reader)
	if err != nil {
		return nil, fmt.Errorf("http: %w", err)
	}
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	req.Header.Set("Accept", "application/json")
	for k, v := range headers {
		req.Header.Set(k, v)
	}
	resp, err := h.client.Do(req)
	if err != nil {
		return nil, fmt.Errorf("http: %w", err)
	}
	defer func() { _ = resp.Body.Close() }()
	data, err := io.ReadAll(io.LimitReader(resp.Body, maxHTTPBody+1))
	if err != nil {
		return nil, fmt.Errorf("http: reading the response of %s: %w", u.Redacted(), err)
	}
	if len(data) > maxHTTPBody {
		return nil, fmt.Errorf("http: the response of %s is larger than %d bytes", u.Redacted(), maxHTTPBody)
	}
	if resp.StatusCode < 200 || resp.StatusCode > 299 {
		return nil, fmt.Errorf("http: %s answered %s", u.Redacted(), resp.Status)
	}
	var v any
	if err := json.Unmarshal(data, &v); err != nil {
		return nil, fmt.Errorf("http: the response of %s is not JSON: %w", u.Redacted(), err)
	}
	return engine.Normalize(v), nil
}

// libraryEnv holds what Kyverno's CEL libraries read.
type libraryEnv struct {
	resources ResourceReader
	global    GlobalContextReader
	http      *httpCaller
}

// imageType is the CEL type of image(...) values.
var imageType = types.NewOpaqueType("kyverno.Image")

// imageVal is a parsed image reference as a CEL value.
type imageVal struct{ ref imageRef }

func (v imageVal) ConvertToNative(t reflect.Type) (any, error) {
	if t.Kind() == reflect.String {
		return v.ref.String(), nil
	}
	return nil, fmt.Errorf("image cannot be converted to %v", t)
}

func (v imageVal) ConvertToType(t ref.Type) ref.Val {
	switch t {
	case types.StringType:
		return types.String(v.ref.String())
	case types.TypeType:
		return imageType
	}
	return types.NewErr("type conversion error from image to %s", t)
}

func (v imageVal) Equal(other ref.Val) ref.Val {
	o, ok := other.(imageVal)
	return types.Bool(ok && o.ref == v.ref)
}

func (v imageVal) Type() ref.Type { return imageType }
func (v imageVal) Value() any     { return v.ref }

// nativeOf converts a CEL value to plain Go JSON values.
func nativeOf(v ref.Val) (any, error) {
	switch x := v.(type) {
	case traits.Mapper:
		out := map[string]any{}
		for it := x.Iterator(); it.HasNext() == types.True; {
			k := it.Next()
			ks, ok := k.Value().(string)
			if !ok {
				return nil, fmt.Errorf("map keys must be strings, found %v", k.Type())
			}
			e, err := nativeOf(x.Get(k))
			if err != nil {
				return nil, err
			}
			out[ks] = e
		}
		return out, nil
	case traits.Lister:
		var out []any
		for it := x.Iterator(); it.HasNext() == types.True; {
			e, err := nativeOf(it.Next())
			if err != nil {
				return nil, err
			}
			out = append(out, e)
		}
		if out == nil {
			out = []any{}
		}
		return out, nil
	}
	switch n := v.Value().(type) {
	case string, bool, int64, float64, nil:
		return n, nil
	case uint64:
		return int64(n), nil
	}
	if v == types.NullValue {
		return nil, nil
	}
	return nil, fmt.Errorf("cannot use a %v here", v.Type())
}

func stringMapOf(v ref.Val) (map[string]string, error) {
	n, err := nativeOf(v)
	if err != nil {
		return nil, err
	}
	m, _ := n.(map[string]any)
	out := make(map[string]string, len(m))
	for k, e := range m {
		s, ok := e.(string)
		if !ok {
			return nil, fmt.Errorf("header %q must be a string", k)
		}
		out[k] = s
	}
	return out, nil
}

func toVal(v any, err error) ref.Val {
	if err != nil {
		return types.WrapErr(err)
	}
	return types.DefaultTypeAdapter.NativeToValue(v)
}

// options returns the CEL declarations of Kyverno's libraries: image, isImage,
// parseServiceAccount, resource.Get/List, globalContext.Get and http.Get/Post.
func (l *libraryEnv) options() []celgo.EnvOption {
	str := celgo.StringType
	dyn := celgo.DynType
	strMap := celgo.MapType(celgo.StringType, celgo.StringType)
	imageMethod := func(name string, result *celgo.Type, f func(imageRef) ref.Val) celgo.EnvOption {
		return celgo.Function(name, celgo.MemberOverload("image_"+name, []*celgo.Type{imageType}, result,
			celgo.UnaryBinding(func(v ref.Val) ref.Val {
				img, ok := v.(imageVal)
				if !ok {
					return types.NewErr("%s() needs an image", name)
				}
				return f(img.ref)
			})))
	}
	return []celgo.EnvOption{
		celgo.Function("image", celgo.Overload("image_string", []*celgo.Type{str}, imageType,
			celgo.UnaryBinding(func(v ref.Val) ref.Val {
				s, ok := v.Value().(string)
				if !ok {
					return types.NewErr("image() needs a string")
				}
				r, err := parseImage(s)
				if err != nil {
					return types.WrapErr(err)
				}
				return imageVal{ref: r}
			}))),
		celgo.Function("isImage", celgo.Overload("isImage_string", []*celgo.Type{str}, celgo.BoolType,
			celgo.UnaryBinding(func(v ref.Val) ref.Val {
				s, _ := v.Value().(string)
				_, err := parseImage(s)
				return types.Bool(err == nil)
			}))),
		imageMethod("registry", str, func(r imageRef) ref.Val { return types.String(r.Registry) }),
		imageMethod("repository", str, func(r imageRef) ref.Val { return types.String(r.Repository) }),
		imageMethod("identifier", str, func(r imageRef) ref.Val { return types.String(r.Identifier()) }),
		imageMethod("tag", str, func(r imageRef) ref.Val { return types.String(r.Tag) }),
		imageMethod("digest", str, func(r imageRef) ref.Val { return types.String(r.Digest) }),
		imageMethod("containsDigest", celgo.BoolType, func(r imageRef) ref.Val { return types.Bool(r.Digest != "") }),
		celgo.Function("parseServiceAccount", celgo.Overload("parseServiceAccount_string", []*celgo.Type{str}, strMap,
			celgo.UnaryBinding(func(v ref.Val) ref.Val {
				s, _ := v.Value().(string)
				ns, name := parseServiceAccount(s)
				return types.DefaultTypeAdapter.NativeToValue(map[string]string{"Namespace": ns, "Name": name})
			}))),
		celgo.Function("resource.Get", celgo.Overload("resource_get", []*celgo.Type{str, str, str, str}, dyn,
			celgo.FunctionBinding(func(args ...ref.Val) ref.Val {
				a, err := stringArgs(args)
				if err != nil {
					return types.WrapErr(err)
				}
				obj, err := l.resources.Get(context.Background(), a[0], a[1], a[2], a[3])
				return toVal(obj, err)
			}))),
		celgo.Function("resource.List", celgo.Overload("resource_list", []*celgo.Type{str, str, str}, dyn,
			celgo.FunctionBinding(func(args ...ref.Val) ref.Val {
				a, err := stringArgs(args)
				if err != nil {
					return types.WrapErr(err)
				}
				objs, err := l.resources.List(context.Background(), a[0], a[1], a[2])
				if err != nil {
					return types.WrapErr(err)
				}
				items := make([]any, len(objs))
				for i, o := range objs {
					items[i] = o
				}
				return toVal(map[string]any{"items": items}, nil)
			}))),
		celgo.Function("globalContext.Get", celgo.Overload("globalcontext_get", []*celgo.Type{str, str}, dyn,
			celgo.BinaryBinding(func(name, projection ref.Val) ref.Val {
				a, err := stringArgs([]ref.Val{name, projection})
				if err != nil {
					return types.WrapErr(err)
				}
				return toVal(l.global.GlobalContext(context.Background(), a[0], a[1]))
			}))),
		celgo.Function("http.Get",
			celgo.Overload("http_get", []*celgo.Type{str}, dyn, celgo.UnaryBinding(func(u ref.Val) ref.Val {
				s, _ := u.Value().(string)
				return toVal(l.http.do(http.MethodGet, s, nil, nil))
			})),
			celgo.Overload("http_get_headers", []*celgo.Type{str, strMap}, dyn, celgo.BinaryBinding(func(u, h ref.Val) ref.Val {
				s, _ := u.Value().(string)
				headers, err := stringMapOf(h)
				if err != nil {
					return types.WrapErr(err)
				}
				return toVal(l.http.do(http.MethodGet, s, nil, headers))
			}))),
		celgo.Function("http.Post",
			celgo.Overload("http_post", []*celgo.Type{str, dyn}, dyn, celgo.BinaryBinding(func(u, b ref.Val) ref.Val {
				s, _ := u.Value().(string)
				body, err := nativeOf(b)
				if err != nil {
					return types.WrapErr(err)
				}
				return toVal(l.http.do(http.MethodPost, s, body, nil))
			})),
			celgo.Overload("http_post_headers", []*celgo.Type{str, dyn, strMap}, dyn, celgo.FunctionBinding(func(args ...ref.Val) ref.Val {
				s, _ := args[0].Value().(string)
				body, err := nativeOf(args[1])
				if err != nil {
					return types.WrapErr(err)
				}
				headers, err := stringMapOf(args[2])
				if err != nil {
					return types.WrapErr(err)
				}
				return toVal(l.http.do(http.MethodPost, s, body, headers))
			}))),
	}
}

func stringArgs(args []ref.Val) ([]string, error) {
	out := make([]string, len(args))
	for i, a := range args {
		s, ok := a.Value().(string)
		if !ok {
			return nil, fmt.Errorf("argument %d must be a string, found %v", i+1, a.Type())
		}
		out[i] = s
	}
	return out, nil
}

// parseServiceAccount splits "system:serviceaccount:<namespace>:<name>"; any other user
// name gives two empty strings.
func parseServiceAccount(user string) (namespace, name string) {
	const prefix = "system:serviceaccount:"
	if !strings.HasPrefix(user, prefix) {
		return "", ""
	}
	rest := user[len(prefix):]
	i := strings.IndexByte(rest, ':')
	if i <= 0 || i == len(rest)-1 || strings.Contains(rest[i+1:], ":") {
		return "", ""
	}
	return rest[:i], rest[i+1:]
}
