package cel

import (
	"context"
	"errors"
	"reflect"
	"strings"
	"sync"
	"testing"
	"time"
)

// pollSource is a GlobalContextSource whose API path answers come from a function the
// test sets, which may block: it sees each call's context.
type pollSource struct {
	mu      sync.Mutex
	entries map[string]map[string]any
	answer  func(ctx context.Context, n int) ([]byte, error)
	n       int
}

func (p *pollSource) GlobalContextEntry(_ context.Context, name string) (map[string]any, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.entries[name], nil
}

func (p *pollSource) ResourceObjects(context.Context, string, string, string, string) ([]any, error) {
	return nil, errors.New("no resources")
}

func (p *pollSource) APIPath(ctx context.Context, _, _ string, _ []byte) ([]byte, error) {
	p.mu.Lock()
	p.n++
	n, answer := p.n, p.answer
	p.mu.Unlock()
	return answer(ctx, n)
}

type outcome struct {
	name string
	err  error
}

// TestGlobalContextAPICallPolled checks apiCall entries polled in the background as
// Kyverno's externalapi entries: the first read waits for the first call, later reads
// answer the last call's data without calling (and without waiting for a call under
// way), a failed call makes reads answer its error, every call is bounded, and Forget
// (the entry deleted or changed) stops the poller.
func TestGlobalContextAPICallPolled(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	started := make(chan context.Context, 10)
	gate := make(chan struct{})
	src := &pollSource{entries: map[string]map[string]any{
		"count": entry("count", map[string]any{
			"apiCall":     map[string]any{"urlPath": "/api/v1/namespaces", "refreshInterval": "1ms", "retryLimit": int64(1)},
			"projections": projections("n", "length(items)"),
		}),
	}}
	src.answer = func(ctx context.Context, n int) ([]byte, error) {
		switch n {
		case 1:
			return []byte(`{"items": [{}]}`), nil
		case 2:
			// The second call waits for the test: reads meanwhile answer the first.
			started <- ctx
			select {
			case <-gate:
			case <-ctx.Done():
				return nil, ctx.Err()
			}
			return []byte(`{"items": [{}, {}]}`), nil
		case 3:
			return nil, errors.New(`failed to GET resource with raw url: /api/v1/namespaces: the server could not find the requested resource`)
		}
		// Later calls block until the poller stops them.
		started <- ctx
		<-ctx.Done()
		return nil, ctx.Err()
	}
	observed := make(chan outcome, 10)
	calls := NewAPICallCache()
	calls.Poll(ctx, func(name string, _ time.Time, err error) { observed <- outcome{name, err} })
	g := newGlobalResolver(src, newHTTPCaller(nil, 30*time.Second), calls)

	read := func(want any, wantErr string) {
		t.Helper()
		got, err := g.GetGlobalReference("count", "n")
		if wantErr != "" {
			if err == nil || !strings.Contains(err.Error(), wantErr) {
				t.Fatalf("error %v, want one containing %q", err, wantErr)
			}
			return
		}
		if err != nil {
			t.Fatal(err)
		}
		if !reflect.DeepEqual(got, want) {
			t.Fatalf("got %#v, want %#v", got, want)
		}
	}
	await := func() (c context.Context) {
		t.Helper()
		select {
		case c = <-started:
		case <-ctx.Done():
			t.Fatal("no call started")
		}
		return c
	}
	awaitOutcome := func() outcome {
		t.Helper()
		select {
		case o := <-observed:
			return o
		case <-ctx.Done():
			t.Fatal("no call answered")
		}
		return outcome{}
	}

	read(float64(1), "") // the first read waits for the first call
	if o := awaitOutcome(); o.name != "count" || o.err != nil {
		t.Fatalf("first call observed as %+v", o)
	}
	second := await()
	if _, ok := second.Deadline(); !ok {
		t.Error("an apiCall without a deadline: every call must be bounded")
	}
	read(float64(1), "") // the second call is under way: the read does not wait for it
	close(gate)
	if o := awaitOutcome(); o.err != nil {
		t.Fatalf("second call observed as %+v", o)
	}
	// The third call may already have failed: the read answers the second or its error.
	if o := awaitOutcome(); o.err == nil {
		t.Fatalf("third call observed as %+v, want its error", o)
	}
	read(nil, "the server could not find the requested resource")

	// Forget stops the poller: the call under way sees its context end.
	fourth := await()
	calls.Forget("count")
	select {
	case <-fourth.Done():
	case <-ctx.Done():
		t.Fatal("Forget did not stop the poller")
	}
}

// TestGlobalContextAPICallPolledChange checks that a changed entry gets a new poller
// and that reads before Poll keep the lazy refresh (morph apply).
func TestGlobalContextAPICallPolledChange(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	src := &pollSource{entries: map[string]map[string]any{
		"e": entry("e", map[string]any{"apiCall": map[string]any{"urlPath": "/a"}}),
	}}
	src.answer = func(_ context.Context, n int) ([]byte, error) {
		return []byte(`{"n": ` + string(rune('0'+n)) + `}`), nil
	}
	calls := NewAPICallCache()
	calls.Poll(ctx, nil)
	g := newGlobalResolver(src, newHTTPCaller(nil, 30*time.Second), calls)
	got, err := g.GetGlobalReference("e", "")
	if err != nil || !reflect.DeepEqual(got, map[string]any{"n": float64(1)}) {
		t.Fatalf("first read: %v, %v", got, err)
	}
	// The default refreshInterval (10m) is not over: the same data.
	got, err = g.GetGlobalReference("e", "")
	if err != nil || !reflect.DeepEqual(got, map[string]any{"n": float64(1)}) {
		t.Fatalf("second read: %v, %v", got, err)
	}
	src.mu.Lock()
	src.entries["e"] = entry("e", map[string]any{"apiCall": map[string]any{"urlPath": "/b"}})
	src.mu.Unlock()
	got, err = g.GetGlobalReference("e", "")
	if err != nil || !reflect.DeepEqual(got, map[string]any{"n": float64(2)}) {
		t.Fatalf("after the change: %v, %v, want a new call", got, err)
	}
}
