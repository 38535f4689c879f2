package gatekeeper

import (
	"bytes"
	"context"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/morph-dev/morph/internal/engine"
	"github.com/morph-dev/morph/internal/policy"

	"k8s.io/apimachinery/pkg/util/validation/field"
)

// The external data wire format (Gatekeeper's ProviderRequest and ProviderResponse).
const externalAPIVersion = "externaldata.gatekeeper.sh/v1beta1"

type providerRequest struct {
	APIVersion string `json:"apiVersion"`
	Kind       string `json:"kind"`
	Request    struct {
		Keys []string `json:"keys"`
	} `json:"request"`
}

type providerResponse struct {
	APIVersion string `json:"apiVersion"`
	Kind       string `json:"kind"`
	Response   struct {
		Idempotent  bool           `json:"idempotent"`
		Items       []providerItem `json:"items"`
		SystemError string         `json:"systemError"`
	} `json:"response"`
}

type providerItem struct {
	Key   string `json:"key"`
	Value any    `json:"value"`
	Error string `json:"error"`
}

const (
	defaultProviderTimeout = 3 * time.Second
	maxProviderTimeout     = 30 * time.Second
	maxResponseBytes       = 8 << 20
)

// provider is a compiled external data Provider.
type provider struct {
	doc     policy.Document
	name    string
	url     string
	timeout time.Duration
	roots   *x509.CertPool // from caBundle; nil: the system roots
}

func (c *compiler) compileProvider(doc policy.Document) (*provider, error) {
	f := fields{doc: doc}
	if err := f.known(doc.Object, nil, "apiVersion", "kind", "metadata", "spec", "status"); err != nil {
		return nil, err
	}
	p := &provider{doc: doc, name: doc.Name(), timeout: defaultProviderTimeout}
	if p.name == "" {
		return nil, f.fail(field.Required(field.NewPath("metadata", "name"), "name the provider"))
	}
	at := field.NewPath("spec")
	spec, err := f.object(doc.Object["spec"], at)
	if err != nil {
		return nil, err
	}
	if err := f.known(spec, at, "url", "timeout", "caBundle"); err != nil {
		return nil, err
	}
	if p.url, err = f.str(spec["url"], at.Child("url")); err != nil {
		return nil, err
	}
	u, err := url.Parse(p.url)
	if err != nil || u.Host == "" {
		return nil, f.fail(field.Invalid(at.Child("url"), p.url, "not a URL; give one such as https://provider.svc:8443/lookup"))
	}
	if u.Scheme != "https" {
		return nil, f.fail(field.Invalid(at.Child("url"), p.url, "providers must be reached over https; give an https:// URL"))
	}
	switch t := spec["timeout"].(type) {
	case nil:
	case int64:
		if t <= 0 || time.Duration(t)*time.Second > maxProviderTimeout {
			return nil, f.fail(field.Invalid(at.Child("timeout"), t, fmt.Sprintf("out of range; give a number of seconds from 1 to %d", int(maxProviderTimeout/time.Second))))
		}
		p.timeout = time.Duration(t) * time.Second
	default:
		return nil, f.fail(policy.WrongType(at.Child("timeout"), t, "a whole number of seconds"))
	}
	ca, err := f.str(spec["caBundle"], at.Child("caBundle"))
	if err != nil {
		return nil, err
	}
	if ca != "" {
		pem, err := base64.StdEncoding.DecodeString(strings.TrimSpace(ca))
		if err != nil {
			return nil, f.fail(field.Invalid(at.Child("caBundle"), field.OmitValueType{}, fmt.Sprintf("not base64 (%v); encode the PEM certificates with base64", err)))
		}
		p.roots = x509.NewCertPool()
		if !p.roots.AppendCertsFromPEM(pem) {
			return nil, f.fail(field.Invalid(at.Child("caBundle"), field.OmitValueType{}, "holds no PEM certificate; give the base64 of the PEM certificates that sign the provider's certificate"))
		}
	}
	return p, nil
}

// The data sources and failure policies of assign.externalData.
const (
	sourceValueAtLocation = "ValueAtLocation"
	sourceUsername        = "Username"
	failFail              = "Fail"
	failIgnore            = "Ignore"
	failUseDefault        = "UseDefault"
)

// externalRef is one mutator's assign.externalData.
type externalRef struct {
	index    int    // in compiler.refs
	marker   string // starts this ref's placeholders: unguessable (see newMarker)
	id       engine.ID
	provider *provider
	source   string
	failure  string
	def      string
}

func (c *compiler) parseExternal(f fields, m *mutator, v any) (*externalRef, error) {
	at := paramsPath.Child("assign", "externalData")
	if !c.opts.AllowExternalData {
		return nil, f.fail(field.Forbidden(at, "external data is disabled; pass --allow-external-data to let mutators call providers"))
	}
	e, err := f.object(v, at)
	if err != nil {
		return nil, err
	}
	if err := f.known(e, at, "provider", "dataSource", "failurePolicy", "default"); err != nil {
		return nil, err
	}
	marker, err := newMarker()
	if err != nil {
		return nil, f.fail(field.InternalError(at, err))
	}
	r := &externalRef{index: len(c.refs), marker: marker, id: m.id, source: sourceValueAtLocation, failure: failFail}
	name, err := f.str(e["provider"], at.Child("provider"))
	if err != nil {
		return nil, err
	}
	if r.provider = c.providers[name]; r.provider == nil {
		return nil, f.fail(field.Invalid(at.Child("provider"), name, "no provider has this name; add its externaldata.gatekeeper.sh Provider to the policies"))
	}
	if s, err := f.str(e["dataSource"], at.Child("dataSource")); err != nil {
		return nil, err
	} else if s != "" {
		if s != sourceValueAtLocation && s != sourceUsername {
			return nil, f.fail(field.NotSupported(at.Child("dataSource"), s, []string{sourceValueAtLocation, sourceUsername}))
		}
		r.source = s
	}
	if s, err := f.str(e["failurePolicy"], at.Child("failurePolicy")); err != nil {
		return nil, err
	} else if s != "" {
		if s != failFail && s != failIgnore && s != failUseDefault {
			return nil, f.fail(field.NotSupported(at.Child("failurePolicy"), s, []string{failFail, failIgnore, failUseDefault}))
		}
		r.failure = s
	}
	_, hasDefault := e["default"]
	if r.def, err = f.str(e["default"], at.Child("default")); err != nil {
		return nil, err
	}
	if r.failure == failUseDefault && !hasDefault {
		return nil, f.fail(field.Required(at.Child("default"), "failurePolicy UseDefault needs a default; give one"))
	}
	c.refs = append(c.refs, r)
	return r, nil
}

// placeholderPrefix starts the string a mutator leaves at its location until the
// finalizer has asked the provider. The NUL bytes keep it apart from real values:
// placeholder = marker key NUL original, where marker = prefix token NUL names the
// externalRef, and original is the JSON of the value that was there, or empty when
// there was none. The token is 128 random bits drawn when the policy is compiled: a
// requester cannot write a placeholder (a Pod annotation holding one made morph send a
// key of the requester's choice to the provider), and the finalizer resolves only
// placeholders at the paths their external-data mutator wrote.
const placeholderPrefix = "\x00morph.dev/external-data\x00"

// newMarker draws a ref's marker.
func newMarker() (string, error) {
	var token [16]byte
	if _, err := rand.Read(token[:]); err != nil {
		return "", fmt.Errorf("external data: drawing a placeholder token: %w", err)
	}
	return placeholderPrefix + hex.EncodeToString(token[:]) + "\x00", nil
}

type placeholder struct {
	marker   string
	key      string
	original string
}

func (p placeholder) String() string {
	return p.marker + p.key + "\x00" + p.original
}

func parsePlaceholder(s string) (placeholder, bool) {
	rest, ok := strings.CutPrefix(s, placeholderPrefix)
	if !ok {
		return placeholder{}, false
	}
	token, rest, ok1 := strings.Cut(rest, "\x00")
	key, orig, ok2 := strings.Cut(rest, "\x00")
	if !ok1 || !ok2 {
		return placeholder{}, false
	}
	return placeholder{marker: placeholderPrefix + token + "\x00", key: key, original: orig}, true
}

// placeholder is the setter of an Assign taking external data: it leaves a placeholder
// naming the key; the finalizer replaces it once the object converged.
func (r *externalRef) placeholder(e env, cur any, exists bool) (any, bool, error) {
	if s, ok := cur.(string); ok {
		if p, ok := parsePlaceholder(s); ok && p.marker == r.marker {
			return cur, false, nil
		}
	}
	p := placeholder{marker: r.marker}
	if exists {
		raw, err := json.Marshal(cur)
		if err != nil {
			return nil, false, fmt.Errorf("external data: %w", err)
		}
		p.original = string(raw)
	}
	switch r.source {
	case sourceUsername:
		p.key = e.req.UserInfo.Username
	default:
		if !exists || cur == nil {
			return cur, false, nil // nothing to look up
		}
		s, ok := cur.(string)
		if !ok {
			return nil, false, fmt.Errorf("external data with dataSource ValueAtLocation needs a string at the location, found %s", describe(cur))
		}
		p.key = s
	}
	return p.String(), true, nil
}

// externalFinalizer resolves the placeholders after convergence: one request per
// provider with all its keys.
type externalFinalizer struct {
	refs     []*externalRef
	byMarker map[string]*externalRef
	client   *http.Client
}

func newExternalFinalizer(refs []*externalRef, client *http.Client) *externalFinalizer {
	f := &externalFinalizer{refs: refs, byMarker: make(map[string]*externalRef, len(refs)), client: client}
	for _, r := range refs {
		f.byMarker[r.marker] = r
	}
	return f
}

// wrote reports whether the trace shows mutator id writing at ptr (or at a parent of
// it, for a mutator that created the field's parents).
func wrote(trace []engine.Change, id engine.ID, ptr string) bool {
	for _, c := range trace {
		if c.ID != id {
			continue
		}
		for _, p := range c.Paths {
			if p == ptr || strings.HasPrefix(ptr, p+"/") {
				return true
			}
		}
	}
	return false
}

// Name names the finalizer in traces.
func (f *externalFinalizer) Name() string { return "gatekeeper-external-data" }

type found struct {
	at  []any // path segments: string keys and int indexes
	p   placeholder
	ref *externalRef
}

func collect(v any, at []any, out *[]found) {
	switch x := v.(type) {
	case map[string]any:
		for k, e := range x {
			collect(e, append(at[:len(at):len(at)], k), out)
		}
	case []any:
		for i, e := range x {
			collect(e, append(at[:len(at):len(at)], i), out)
		}
	case string:
		if p, ok := parsePlaceholder(x); ok {
			*out = append(*out, found{at: at, p: p})
		}
	}
}

type lookup struct {
	items map[string]providerItem
	err   error
}

// Finalize asks each provider once and writes the answers (or what the failure policy
// says) in place of the placeholders.
func (f *externalFinalizer) Finalize(ctx context.Context, req *engine.Request, obj map[string]any, trace []engine.Change, w *engine.Writer) (map[string]any, []string, error) {
	var candidates []found
	collect(obj, nil, &candidates)
	// Only the placeholders of this policy set, at paths their mutator wrote: anything
	// else that looks like one came with the request and is left as it is.
	var all []found
	for _, fd := range candidates {
		ref := f.byMarker[fd.p.marker]
		if ref == nil || !wrote(trace, ref.id, pointerOf(fd.at)) {
			continue
		}
		fd.ref = ref
		all = append(all, fd)
	}
	if len(all) == 0 {
		return obj, nil, nil
	}
	keys := map[*provider][]string{}
	for _, fd := range all {
		pr := fd.ref.provider
		if !slices.Contains(keys[pr], fd.p.key) {
			keys[pr] = append(keys[pr], fd.p.key)
		}
	}
	results := make(map[*provider]*lookup, len(keys))
	var mu sync.Mutex
	var wg sync.WaitGroup
	for pr, ks := range keys {
		slices.Sort(ks)
		wg.Add(1)
		go func() {
			defer wg.Done()
			items, err := f.ask(ctx, pr, ks)
			mu.Lock()
			results[pr] = &lookup{items: items, err: err}
			mu.Unlock()
		}()
	}
	wg.Wait()
	slices.SortFunc(all, func(a, b found) int { return strings.Compare(pointerOf(a.at), pointerOf(b.at)) })
	var warnings []string
	var errs []error
	for _, fd := range all {
		ref := fd.ref
		res := results[ref.provider]
		var problem error
		var value any
		if res.err != nil {
			problem = res.err
		} else if it, ok := res.items[fd.p.key]; !ok {
			problem = fmt.Errorf("the provider's answer has no item for key %q", fd.p.key)
		} else if it.Error != "" {
			problem = fmt.Errorf("key %q: %s", fd.p.key, it.Error)
		} else {
			value = engine.Normalize(it.Value)
		}
		remove := false
		if problem != nil {
			what := fmt.Sprintf("%s: external data from provider %q at %s: %v", ref.id, ref.provider.name, pointerOf(fd.at), problem)
			switch ref.failure {
			case failIgnore:
				warnings = append(warnings, what+"; kept the original value (failurePolicy Ignore)")
				if fd.p.original == "" {
					remove = true
				} else if err := json.Unmarshal([]byte(fd.p.original), &value); err != nil {
					return obj, warnings, fmt.Errorf("%s: restoring the original value: %w", ref.id, err)
				}
				value = engine.Normalize(value)
			case failUseDefault:
				warnings = append(warnings, what+"; used the default (failurePolicy UseDefault)")
				value = ref.def
			default:
				errs = append(errs, errors.New(what))
				continue
			}
		}
		obj = writeAt(obj, fd.at, value, remove, w)
		w.Changed(pointerOf(fd.at))
	}
	if len(errs) > 0 {
		return obj, warnings, errors.Join(errs...)
	}
	return obj, warnings, nil
}

// ask sends one ProviderRequest with keys and returns the items by key.
func (f *externalFinalizer) ask(ctx context.Context, pr *provider, keys []string) (map[string]providerItem, error) {
	ctx, cancel := context.WithTimeout(ctx, pr.timeout)
	defer cancel()
	var body providerRequest
	body.APIVersion, body.Kind = externalAPIVersion, "ProviderRequest"
	body.Request.Keys = keys
	raw, err := json.Marshal(body)
	if err != nil {
		return nil, err
	}
	hr, err := http.NewRequestWithContext(ctx, http.MethodPost, pr.url, bytes.NewReader(raw))
	if err != nil {
		return nil, err
	}
	hr.Header.Set("Content-Type", "application/json")
	client := f.client
	if client == nil {
		client = &http.Client{Transport: &http.Transport{
			TLSClientConfig:   &tls.Config{RootCAs: pr.roots, MinVersion: tls.VersionTLS12},
			DisableKeepAlives: true,
		}}
	}
	resp, err := client.Do(hr)
	if err != nil {
		return nil, fmt.Errorf("calling %s: %w", pr.url, err)
	}
	defer func() { _ = resp.Body.Close() }()
	data, err := io.ReadAll(io.LimitReader(resp.Body, maxResponseBytes+1))
	if err != nil {
		return nil, fmt.Errorf("reading the answer of %s: %w", pr.url, err)
	}
	if ctx.Err() != nil {
		// net/http hands over an answer that raced the deadline (a provider that
		// gives up when its caller does answers at that moment, often empty): past
		// the provider's timeout the call failed as a timeout, whatever arrived.
		return nil, fmt.Errorf("calling %s: no answer within the provider's timeout of %s: %w", pr.url, pr.timeout, context.Cause(ctx))
	}
	if len(data) > maxResponseBytes {
		return nil, fmt.Errorf("the answer of %s is larger than %d bytes", pr.url, maxResponseBytes)
	}
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("%s answered %s", pr.url, resp.Status)
	}
	var out providerResponse
	if err := json.Unmarshal(data, &out); err != nil {
		return nil, fmt.Errorf("the answer of %s is not a ProviderResponse: %w", pr.url, err)
	}
	if out.Response.SystemError != "" {
		return nil, fmt.Errorf("provider system error: %s", out.Response.SystemError)
	}
	items := make(map[string]providerItem, len(out.Response.Items))
	for _, it := range out.Response.Items {
		items[it.Key] = it
	}
	return items, nil
}

// writeAt sets (or removes) the value at a path through the writer, copying on write.
func writeAt(obj map[string]any, at []any, value any, remove bool, w *engine.Writer) map[string]any {
	var rec func(cur any, i int) any
	rec = func(cur any, i int) any {
		switch seg := at[i].(type) {
		case string:
			m := w.Map(cur.(map[string]any))
			if i == len(at)-1 {
				if remove {
					delete(m, seg)
				} else {
					m[seg] = value
				}
				return m
			}
			m[seg] = rec(m[seg], i+1)
			return m
		case int:
			l := w.List(cur.([]any), 0)
			if i == len(at)-1 {
				l[seg] = value
				return l
			}
			l[seg] = rec(l[seg], i+1)
			return l
		}
		return cur
	}
	return rec(obj, 0).(map[string]any)
}

func pointerOf(at []any) string {
	var b strings.Builder
	for _, s := range at {
		switch x := s.(type) {
		case string:
			b.WriteString(engine.AppendPointer("", x))
		case int:
			b.WriteString(engine.AppendIndex("", x))
		}
	}
	return b.String()
}
