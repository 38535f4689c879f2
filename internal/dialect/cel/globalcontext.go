package cel

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"reflect"
	"strings"
	"sync"
	"time"
)

// GlobalContextSource supplies what Kyverno's GlobalContextEntries read: offline the
// --context objects, in a cluster the API server (package internal/cluster/globalcontext).
// The dialect does the rest in one place for both: it reads the entry's spec, calls a
// spec.apiCall.service (under --allow-http-host), keeps apiCall data for the entry's
// refreshInterval (or polls it in the background, APICallCache.Poll) and evaluates
// projections with Kyverno's JMESPath functions.
type GlobalContextSource interface {
	// GlobalContextEntry returns the GlobalContextEntry named name (kyverno.io), or nil
	// and no error when there is none. The object may be shared with the source's
	// cache: the dialect reads it and never writes it, and the source replaces it when
	// the entry changes rather than writing it in place.
	GlobalContextEntry(ctx context.Context, name string) (map[string]any, error)
	// ResourceObjects lists the objects of a resource (group, version, plural) in
	// namespace ("" for every namespace), as spec.kubernetesResource caches them.
	ResourceObjects(ctx context.Context, group, version, resource, namespace string) ([]any, error)
	// APIPath answers a call of the API server's raw path (spec.apiCall.urlPath) with
	// its JSON body; method is GET or POST.
	APIPath(ctx context.Context, method, path string, body []byte) ([]byte, error)
}

// defaultRefreshInterval is spec.apiCall.refreshInterval's default in Kyverno's CRD.
const defaultRefreshInterval = 10 * time.Minute

// defaultRetryLimit is spec.apiCall.retryLimit's default in Kyverno's CRD: the tries of
// one refresh.
const defaultRetryLimit = 3

// globalResolver answers the sdk's globalContext library from a GlobalContextSource.
type globalResolver struct {
	src   GlobalContextSource
	http  *httpCaller
	now   func() time.Time
	calls *APICallCache
}

// APICallCache keeps the answers of GlobalContextEntry apiCalls. A surface that
// rebuilds its dialects (morph serve in cluster mode, on every change its informers see)
// passes one cache to all of them (Options.APICalls).
//
// By default (morph apply, morph test) an entry is called at its first read and again at
// the first read after its refreshInterval. After Poll, each entry is polled in the
// background as Kyverno's globalcontext controller does (pkg/globalcontext/externalapi):
// a poller per entry calls at once, then every refreshInterval, each call bounded by the
// HTTP timeout and retried spec.apiCall.retryLimit times; reads answer from its last call
// without waiting (only the first read of an entry waits for the first call), and a
// read of an entry whose last call failed answers that error, as Kyverno's.
type APICallCache struct {
	mu    sync.Mutex
	calls map[string]apiCallData // by entry name, when not polling
	// background ends the pollers; nil until Poll.
	background context.Context
	pollers    map[string]*apiCallPoller
	observe    func(name string, at time.Time, err error)
	// keys remembers, by entry name, the spec object last read and its JSON (see
	// specKey).
	keys map[string]specKey
}

// specKey is an entry's spec object and its JSON.
type specKey struct {
	spec map[string]any
	json string
}

// NewAPICallCache returns an empty cache.
func NewAPICallCache() *APICallCache {
	return &APICallCache{calls: map[string]apiCallData{}, pollers: map[string]*apiCallPoller{}, keys: map[string]specKey{}}
}

// specKey returns the JSON of an entry's spec, which tells a changed spec from the one
// an answer was fetched for. It marshals a spec object once, not on every read: a
// GlobalContextSource replaces an entry when it changes and never writes one in place.
// The spec kept for the comparison stays referenced, so no other object can take its
// address.
func (c *APICallCache) specKey(name string, spec map[string]any) string {
	c.mu.Lock()
	k, ok := c.keys[name]
	c.mu.Unlock()
	if ok && reflect.ValueOf(k.spec).UnsafePointer() == reflect.ValueOf(spec).UnsafePointer() {
		return k.json
	}
	raw, _ := json.Marshal(spec)
	c.mu.Lock()
	c.keys[name] = specKey{spec: spec, json: string(raw)}
	c.mu.Unlock()
	return string(raw)
}

// Poll turns on background polling: from now on, an entry's first read starts its
// poller, which runs until ctx ends, the entry changes or Forget is called. observe,
// when not nil, is told the outcome of every call (at is when it answered, err nil on
// success): morph serve writes the entries' status from it.
func (c *APICallCache) Poll(ctx context.Context, observe func(name string, at time.Time, err error)) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.background, c.observe = ctx, observe
}

// Forget stops the poller of the entry named name (the entry was deleted or changed);
// its next read starts a new one.
func (c *APICallCache) Forget(name string) {
	c.mu.Lock()
	p := c.pollers[name]
	delete(c.pollers, name)
	delete(c.calls, name)
	delete(c.keys, name)
	c.mu.Unlock()
	if p != nil {
		p.cancel()
	}
}

// apiCallData is the last answer of an entry's apiCall.
type apiCallData struct {
	// spec is the JSON of the entry's spec when called: a changed entry is called anew.
	spec string
	at   time.Time
	data any
}

// apiCallPoller calls one entry's apiCall every refreshInterval.
type apiCallPoller struct {
	spec   string
	cancel context.CancelFunc
	// first is closed once the first call answered (or the poller stopped before).
	first chan struct{}

	mu   sync.Mutex
	data any
	err  error
}

func (p *apiCallPoller) last() (any, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.data, p.err
}

// polled answers an entry's apiCall from its poller, started when there is none for
// this spec.
func (c *APICallCache) polled(ctx context.Context, name, spec string, interval time.Duration, attempts int, call func(context.Context) (any, error)) (any, error) {
	c.mu.Lock()
	p := c.pollers[name]
	if p == nil || p.spec != spec {
		if p != nil {
			p.cancel()
		}
		pctx, cancel := context.WithCancel(c.background)
		p = &apiCallPoller{spec: spec, cancel: cancel, first: make(chan struct{})}
		c.pollers[name] = p
		go c.poll(pctx, name, p, interval, attempts, call)
	}
	c.mu.Unlock()
	select {
	case <-p.first:
		return p.last()
	case <-ctx.Done():
		return nil, fmt.Errorf("global context entry %q: spec.apiCall: no answer yet from its first call: %w", name, ctx.Err())
	}
}

// poll calls at once, then every interval, until ctx ends.
func (c *APICallCache) poll(ctx context.Context, name string, p *apiCallPoller, interval time.Duration, attempts int, call func(context.Context) (any, error)) {
	var once sync.Once
	defer once.Do(func() { close(p.first) })
	p.mu.Lock()
	p.err = fmt.Errorf("global context entry %q: spec.apiCall: the poller stopped before its first call answered", name)
	p.mu.Unlock()
	timer := time.NewTimer(0)
	defer timer.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-timer.C:
		}
		var data any
		var err error
		for try := 0; try < attempts; try++ {
			if try > 0 {
				// Kyverno's backoff between tries: client-go's retry.DefaultBackoff.
				select {
				case <-ctx.Done():
					return
				case <-time.After(10 * time.Millisecond):
				}
			}
			if data, err = call(ctx); err == nil {
				break
			}
		}
		if ctx.Err() != nil {
			return // stopped during the call: its answer is not the entry's any more
		}
		p.mu.Lock()
		p.data, p.err = data, err // callJSON answers no data with an error
		p.mu.Unlock()
		once.Do(func() { close(p.first) })
		c.mu.Lock()
		observe := c.observe
		c.mu.Unlock()
		if observe != nil {
			observe(name, time.Now(), err)
		}
		timer.Reset(interval)
	}
}

func newGlobalResolver(src GlobalContextSource, h *httpCaller, calls *APICallCache) *globalResolver {
	if calls == nil {
		calls = NewAPICallCache()
	}
	return &globalResolver{src: src, http: h, now: time.Now, calls: calls}
}

// GetGlobalReference implements the sdk's globalContext host interface: the entry's
// data (projection "") or one of its projections. A missing entry is nil, so that
// globalContext.get answers null.
func (g *globalResolver) GetGlobalReference(name, projection string) (any, error) {
	// The sdk's interface carries no context: bound the reads (a first informer sync,
	// an API call) as the http library's calls are bounded.
	ctx, cancel := context.WithTimeout(context.Background(), g.http.timeout)
	defer cancel()
	entry, err := g.src.GlobalContextEntry(ctx, name)
	if err != nil || entry == nil {
		return nil, err
	}
	spec, _ := entry["spec"].(map[string]any)
	data, err := g.data(ctx, name, spec)
	if err != nil {
		return nil, err
	}
	if projection == "" {
		return data, nil
	}
	projections, _ := spec["projections"].([]any)
	for _, p := range projections {
		pm, _ := p.(map[string]any)
		if pm["name"] != projection {
			continue
		}
		query, _ := pm["jmesPath"].(string)
		v, err := searchJMESPath(query, data)
		if err != nil {
			return nil, fmt.Errorf("global context entry %q: projection %q: %w", name, projection, err)
		}
		return v, nil
	}
	return nil, fmt.Errorf("projection %q not found in global context entry %q", projection, name)
}

// data is the data of an entry before projection: the list of objects of a
// kubernetesResource, or the JSON answer of an apiCall.
func (g *globalResolver) data(ctx context.Context, name string, spec map[string]any) (any, error) {
	kr, isResource := spec["kubernetesResource"].(map[string]any)
	ac, isCall := spec["apiCall"].(map[string]any)
	switch {
	case isResource && isCall, !isResource && !isCall:
		return nil, fmt.Errorf("global context entry %q: spec: give either kubernetesResource or apiCall (Kyverno's rule)", name)
	case isResource:
		group, _ := kr["group"].(string)
		version, _ := kr["version"].(string)
		res, _ := kr["resource"].(string)
		ns, _ := kr["namespace"].(string)
		objs, err := g.src.ResourceObjects(ctx, group, version, res, ns)
		if err != nil {
			return nil, fmt.Errorf("global context entry %q: spec.kubernetesResource: %w", name, err)
		}
		if objs == nil {
			objs = []any{}
		}
		return objs, nil
	}
	return g.apiCall(ctx, name, spec, ac)
}

// apiCall answers an entry's apiCall: from its background poller after
// APICallCache.Poll, otherwise called again at the first read after its
// refreshInterval.
func (g *globalResolver) apiCall(ctx context.Context, name string, spec, ac map[string]any) (any, error) {
	key := g.calls.specKey(name, spec)
	interval := defaultRefreshInterval
	if s, ok := ac["refreshInterval"].(string); ok && s != "" {
		d, err := time.ParseDuration(s)
		if err != nil || d <= 0 {
			return nil, fmt.Errorf("global context entry %q: spec.apiCall.refreshInterval %q: a duration greater than 0 (such as 10m)", name, s)
		}
		interval = d
	}
	g.calls.mu.Lock()
	background := g.calls.background
	last, ok := g.calls.calls[name]
	g.calls.mu.Unlock()
	if background != nil {
		attempts := defaultRetryLimit
		if n, ok := ac["retryLimit"].(int64); ok && n > 0 {
			attempts = int(n)
		} else if f, ok := ac["retryLimit"].(float64); ok && f >= 1 {
			attempts = int(f)
		}
		return g.calls.polled(ctx, name, key, interval, attempts, func(ctx context.Context) (any, error) {
			// Every call is bounded, urlPath calls too.
			ctx, cancel := context.WithTimeout(ctx, g.http.timeout)
			defer cancel()
			return g.callJSON(ctx, name, ac)
		})
	}
	if ok && last.spec == key && g.now().Sub(last.at) < interval {
		return last.data, nil
	}
	data, err := g.callJSON(ctx, name, ac)
	if err != nil {
		return nil, err
	}
	g.calls.mu.Lock()
	g.calls.calls[name] = apiCallData{spec: key, at: g.now(), data: data}
	g.calls.mu.Unlock()
	return data, nil
}

// callJSON calls an entry's apiCall and decodes its JSON answer.
func (g *globalResolver) callJSON(ctx context.Context, name string, ac map[string]any) (any, error) {
	raw, err := g.call(ctx, ac)
	if err != nil {
		return nil, fmt.Errorf("global context entry %q: spec.apiCall: %w", name, err)
	}
	var data any
	if err := json.Unmarshal(raw, &data); err != nil {
		return nil, fmt.Errorf("global context entry %q: spec.apiCall: the answer is not JSON: %w", name, err)
	}
	return data, nil
}

// call sends an apiCall as Kyverno's API call executor does: urlPath to the API server,
// service.url over HTTP(S) (only to hosts allowed with --allow-http-host); method GET
// (default) or POST with data as a JSON object of its key/value pairs.
func (g *globalResolver) call(ctx context.Context, ac map[string]any) ([]byte, error) {
	method, _ := ac["method"].(string)
	if method == "" {
		method = http.MethodGet
	}
	if method != http.MethodGet && method != http.MethodPost {
		return nil, fmt.Errorf("method %q: GET or POST", method)
	}
	var body []byte
	if items, ok := ac["data"].([]any); ok {
		if method != http.MethodPost {
			return nil, errors.New("data needs method POST (Kyverno's rule)")
		}
		m := map[string]any{}
		for _, it := range items {
			kv, _ := it.(map[string]any)
			k, _ := kv["key"].(string)
			m[k] = kv["value"]
		}
		body, _ = json.Marshal(m)
	} else if method == http.MethodPost {
		body = []byte("{}\n")
	}
	path, _ := ac["urlPath"].(string)
	svc, hasService := ac["service"].(map[string]any)
	switch {
	case path != "" && hasService, path == "" && !hasService:
		return nil, errors.New("give either urlPath or service (Kyverno's rule)")
	case path != "":
		return g.src.APIPath(ctx, method, path, body)
	}
	return g.service(ctx, method, svc, body)
}

// service calls spec.apiCall.service with morph's http caller: the --allow-http-host
// list and the sdk's blocked ranges apply, as for http.get. A status that is not 2xx
// is an error, as in Kyverno.
func (g *globalResolver) service(ctx context.Context, method string, svc map[string]any, body []byte) ([]byte, error) {
	rawURL, _ := svc["url"].(string)
	u, err := url.Parse(rawURL)
	if err != nil || rawURL == "" {
		return nil, fmt.Errorf("service.url %q: a URL", rawURL)
	}
	if err := g.http.check(u); err != nil {
		return nil, fmt.Errorf("service.url: %w", err)
	}
	caller := g.http
	if ca, _ := svc["caBundle"].(string); ca != "" {
		c, err := g.http.Client(ca)
		if err != nil {
			return nil, fmt.Errorf("service.caBundle: %w", err)
		}
		caller = c.(*httpCaller)
	}
	ctx, cancel := context.WithTimeout(ctx, caller.timeout)
	defer cancel()
	var reader io.Reader
	if body != nil {
		reader = bytes.NewReader(body)
	}
	req, err := http.NewRequestWithContext(ctx, method, u.String(), reader)
	if err != nil {
		return nil, err
	}
	if headers, ok := svc["headers"].([]any); ok {
		for _, h := range headers {
			kv, _ := h.(map[string]any)
			k, _ := kv["key"].(string)
			v, _ := kv["value"].(string)
			req.Header.Add(k, v)
		}
	}
	resp, err := caller.client.Do(req)
	if err != nil {
		return nil, err
	}
	defer func() { _ = resp.Body.Close() }()
	data, err := io.ReadAll(io.LimitReader(resp.Body, maxHTTPBody+1))
	if err != nil {
		return nil, fmt.Errorf("reading the answer of %s: %w", u.Redacted(), err)
	}
	if ctx.Err() != nil {
		// An answer that raced the deadline (net/http hands it over) may be cut short.
		return nil, fmt.Errorf("no answer from %s within %s: %w", u.Redacted(), caller.timeout, context.Cause(ctx))
	}
	if len(data) > maxHTTPBody {
		return nil, fmt.Errorf("the answer of %s is larger than %d bytes", u.Redacted(), maxHTTPBody)
	}
	if resp.StatusCode < 200 || resp.StatusCode >= 300 {
		return nil, fmt.Errorf("HTTP %s: %s", resp.Status, strings.TrimSpace(string(data)))
	}
	return data, nil
}

// GlobalContextEntry finds a GlobalContextEntry among the context objects.
func (s storeReader) GlobalContextEntry(_ context.Context, name string) (map[string]any, error) {
	if s.store == nil {
		return nil, nil
	}
	for _, group := range []string{"kyverno.io", groupKyverno} {
		if e, ok := s.store.Get(group, "GlobalContextEntry", "", name); ok {
			return e, nil
		}
	}
	return nil, nil
}

// ResourceObjects lists context objects of a resource (any version: the store keeps
// the objects as given).
func (s storeReader) ResourceObjects(_ context.Context, group, _, resource, namespace string) ([]any, error) {
	kind, ok := s.store.KindFor(group, resource)
	if !ok {
		return nil, fmt.Errorf("resource %q of group %q is unknown: pass its CustomResourceDefinition with --context", resource, group)
	}
	objs := s.store.List(group, kind, namespace)
	out := make([]any, len(objs))
	for i, o := range objs {
		out[i] = o
	}
	return out, nil
}

// APIPath answers a GET of an API server path from the context objects.
func (s storeReader) APIPath(_ context.Context, method, path string, _ []byte) ([]byte, error) {
	if method != http.MethodGet {
		return nil, fmt.Errorf("urlPath %q: only GET is answered offline (from the --context objects); %s needs the cluster", path, method)
	}
	v, err := s.readPath(path)
	if err != nil {
		return nil, fmt.Errorf("urlPath: %w", err)
	}
	return json.Marshal(v)
}
