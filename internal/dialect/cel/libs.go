package cel

import (
	"bytes"
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"slices"
	"strings"
	"time"

	sdkhttp "github.com/kyverno/sdk/extensions/cel/libs/http"
	"k8s.io/apimachinery/pkg/runtime/schema"

	"github.com/morph-dev/morph/internal/objects"
)

// ResourceReader answers resource.Get and resource.List: offline from the context
// objects, in a cluster from the API server.
type ResourceReader interface {
	// Get returns one object, or nil and no error when there is none; apiVersion is
	// "v1" or "group/version", resource the plural.
	Get(ctx context.Context, apiVersion, resource, namespace, name string) (map[string]any, error)
	// List returns the objects of a resource in a namespace ("" for all).
	List(ctx context.Context, apiVersion, resource, namespace string) ([]map[string]any, error)
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
		return nil, nil
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

// readPath answers an API server GET path (/api/v1/..., /apis/GROUP/VERSION/...) from the
// context objects: a list ({apiVersion, kind: ...List, items}) or one object.
func (s storeReader) readPath(raw string) (any, error) {
	u, err := url.Parse(raw)
	if err != nil {
		return nil, err
	}
	parts := strings.Split(strings.Trim(u.Path, "/"), "/")
	var gv schema.GroupVersion
	switch {
	case len(parts) >= 3 && parts[0] == "api":
		gv, parts = schema.GroupVersion{Version: parts[1]}, parts[2:]
	case len(parts) >= 4 && parts[0] == "apis":
		gv, parts = schema.GroupVersion{Group: parts[1], Version: parts[2]}, parts[3:]
	default:
		return nil, fmt.Errorf("%q is not an API path (/api/v1/... or /apis/GROUP/VERSION/...)", raw)
	}
	ns := ""
	if len(parts) >= 3 && parts[0] == "namespaces" {
		ns, parts = parts[1], parts[2:]
	}
	if len(parts) == 0 || len(parts) > 2 {
		return nil, fmt.Errorf("%q: only collections and single objects are resolved offline", raw)
	}
	kind, ok := s.store.KindFor(gv.Group, parts[0])
	if !ok {
		return nil, fmt.Errorf("resource %q of %q is unknown: pass its CustomResourceDefinition with --context", parts[0], gv)
	}
	if len(parts) == 2 {
		obj, ok := s.store.Get(gv.Group, kind, ns, parts[1])
		if !ok {
			return nil, fmt.Errorf("%s %s not found among the --context objects", kind, parts[1])
		}
		return obj, nil
	}
	objs := s.store.List(gv.Group, kind, ns)
	items := make([]any, len(objs))
	for i, o := range objs {
		items[i] = o
	}
	return map[string]any{"apiVersion": gv.String(), "kind": kind + "List", "metadata": map[string]any{}, "items": items}, nil
}

// maxHTTPBody bounds the response body of http.Get and http.Post.
const maxHTTPBody = 2 << 20

// httpCaller answers http.get and http.post (the sdk's http host interface) for the hosts
// it allows, with a timeout and a body limit. On top of the allow list, the sdk's own
// guard applies: addresses in its blocked ranges (loopback, link-local and cloud
// metadata, private networks) and its blocked host names are refused, unless the allow
// list names that address literally.
type httpCaller struct {
	allow   []string
	timeout time.Duration
	client  *http.Client
	blocked []*net.IPNet
}

func newHTTPCaller(allow []string, timeout time.Duration) *httpCaller {
	if timeout <= 0 {
		timeout = 10 * time.Second
	}
	h := &httpCaller{allow: allow, timeout: timeout}
	for _, c := range sdkhttp.DefaultBlockedCIDRs {
		if _, n, err := net.ParseCIDR(c); err == nil {
			h.blocked = append(h.blocked, n)
		}
	}
	h.client = h.newClient(nil)
	return h
}

func (h *httpCaller) newClient(tlsConfig *tls.Config) *http.Client {
	dialer := &net.Dialer{Timeout: h.timeout}
	transport := &http.Transport{
		Proxy:               nil,
		DialContext:         h.guardedDial(dialer),
		TLSClientConfig:     tlsConfig,
		TLSHandshakeTimeout: h.timeout,
	}
	return &http.Client{
		Timeout:   h.timeout,
		Transport: transport,
		CheckRedirect: func(req *http.Request, via []*http.Request) error {
			if len(via) >= 10 {
				return errors.New("stopped after 10 redirects")
			}
			return h.check(req.URL)
		},
	}
}

// guardedDial refuses addresses in the sdk's blocked ranges, unless the allow list names
// the address itself.
func (h *httpCaller) guardedDial(d *net.Dialer) func(ctx context.Context, network, addr string) (net.Conn, error) {
	return func(ctx context.Context, network, addr string) (net.Conn, error) {
		host, port, err := net.SplitHostPort(addr)
		if err != nil {
			return nil, err
		}
		if ip := net.ParseIP(host); ip != nil {
			if !h.literallyAllowed(host, port) {
				if err := h.blockedIP(ip); err != nil {
					return nil, err
				}
			}
			return d.DialContext(ctx, network, addr)
		}
		ips, err := net.DefaultResolver.LookupHost(ctx, host)
		if err != nil {
			return nil, fmt.Errorf("resolving %s: %w", host, err)
		}
		for _, s := range ips {
			if ip := net.ParseIP(s); ip != nil {
				if err := h.blockedIP(ip); err != nil {
					return nil, fmt.Errorf("%s: %w", host, err)
				}
			}
		}
		if len(ips) == 0 {
			return nil, fmt.Errorf("no addresses for %s", host)
		}
		return d.DialContext(ctx, network, net.JoinHostPort(ips[0], port))
	}
}

func (h *httpCaller) literallyAllowed(host, port string) bool {
	return slices.Contains(h.allow, host) || slices.Contains(h.allow, net.JoinHostPort(host, port))
}

// blockedIP applies the sdk's blocked ranges, to the address and to an IPv4 address
// embedded in an IPv6 one.
func (h *httpCaller) blockedIP(ip net.IP) error {
	candidates := []net.IP{ip}
	if v4 := ip.To4(); v4 != nil {
		candidates = append(candidates, v4)
	} else if ip16 := ip.To16(); ip16 != nil {
		if ip16[0] == 0x20 && ip16[1] == 0x02 {
			candidates = append(candidates, net.IPv4(ip16[2], ip16[3], ip16[4], ip16[5]))
		}
		candidates = append(candidates, net.IPv4(ip16[12], ip16[13], ip16[14], ip16[15]))
	}
	if ip.IsUnspecified() {
		return fmt.Errorf("address %s is not allowed", ip)
	}
	for _, c := range candidates {
		for _, n := range h.blocked {
			if n.Contains(c) {
				return fmt.Errorf("address %s is in the blocked range %s: name it in --allow-http-host to call it", ip, n)
			}
		}
	}
	return nil
}

func (h *httpCaller) allowed(u *url.URL) bool {
	return slices.Contains(h.allow, u.Host) || slices.Contains(h.allow, u.Hostname())
}

// check applies the allow list and the sdk's blocked host names to a URL.
func (h *httpCaller) check(u *url.URL) error {
	if u.Scheme != "http" && u.Scheme != "https" {
		return fmt.Errorf("http: %q: only http and https URLs are allowed", u.Redacted())
	}
	if len(h.allow) == 0 {
		return fmt.Errorf("http: calls are off: allow the host %q with --allow-http-host", u.Host)
	}
	if !h.allowed(u) {
		return fmt.Errorf("http: host %q is not allowed: allow it with --allow-http-host", u.Host)
	}
	name := strings.ToLower(strings.TrimRight(u.Hostname(), "."))
	if slices.Contains(sdkhttp.DefaultBlockedHosts, name) {
		return fmt.Errorf("http: host %q is a cloud metadata server and is never called", u.Host)
	}
	return nil
}

// Get implements the sdk's http host interface.
func (h *httpCaller) Get(rawURL string, headers map[string]string) (any, error) {
	return h.do(http.MethodGet, rawURL, nil, headers)
}

// Post implements the sdk's http host interface.
func (h *httpCaller) Post(rawURL string, data any, headers map[string]string) (any, error) {
	return h.do(http.MethodPost, rawURL, data, headers)
}

// Client implements the sdk's http host interface: a caller trusting caBundle's
// certificate authorities, under the same allow list.
func (h *httpCaller) Client(caBundle string) (sdkhttp.ContextInterface, error) {
	if caBundle == "" {
		return h, nil
	}
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM([]byte(caBundle)) {
		return nil, errors.New("failed to parse PEM CA bundle for APICall")
	}
	c := *h
	c.client = c.newClient(&tls.Config{RootCAs: pool, MinVersion: tls.VersionTLS12})
	return &c, nil
}

// do sends a request and answers as Kyverno's http library does: the JSON body with
// statusCode added when it is an object, else {body, statusCode}; a status that is not
// 2xx is an answer, not an error.
func (h *httpCaller) do(method, rawURL string, body any, headers map[string]string) (any, error) {
	u, err := url.Parse(rawURL)
	if err != nil {
		return nil, fmt.Errorf("http %s %q: %w", method, rawURL, err)
	}
	if err := h.check(u); err != nil {
		return nil, err
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
	for k, v := range headers {
		req.Header.Add(k, v)
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
	// As Kyverno: encoding/json's values (numbers are doubles), no body when it is
	// not JSON.
	var v any
	if err := json.Unmarshal(data, &v); err != nil {
		v = nil
	}
	if m, ok := v.(map[string]any); ok {
		m["statusCode"] = resp.StatusCode
		return m, nil
	}
	return map[string]any{"body": v, "statusCode": resp.StatusCode}, nil
}
