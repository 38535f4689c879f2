package cel

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/morph-dev/morph/internal/engine"
	"github.com/morph-dev/morph/internal/policy"
)

// When the request's deadline (its ?timeout=) ends an evaluation before the policy's
// own timeoutSeconds, the message names the request's timeout, not timeoutSeconds.
func TestRequestDeadlineIsNamed(t *testing.T) {
	release := make(chan struct{})
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		select {
		case <-release:
		case <-r.Context().Done():
		}
		_ = json.NewEncoder(w).Encode(map[string]any{"metadata": map[string]any{"team": "late"}})
	}))
	defer srv.Close()
	defer close(release)
	pol := strings.Replace(httpPolicy, "URL", srv.URL+"/slow", 1)
	pol = strings.Replace(pol, "spec:\n", "spec:\n  webhookConfiguration:\n    timeoutSeconds: 20\n", 1)
	d := New(Options{HTTPAllowHosts: []string{mustHost(t, srv.URL)}, HTTPTimeout: 30 * time.Second})
	docs, err := policy.Decode("policy.yaml", []byte(pol))
	if err != nil {
		t.Fatal(err)
	}
	b, err := d.Compile(docs)
	if err != nil {
		t.Fatal(err)
	}
	set, err := engine.NewSet(b.Mutators)
	if err != nil {
		t.Fatal(err)
	}
	cause := fmt.Errorf("the request's deadline passed (the request's ?timeout= 300ms): %w", context.DeadlineExceeded)
	ctx, cancel := context.WithTimeoutCause(context.Background(), 300*time.Millisecond, cause)
	defer cancel()
	res, err := set.Mutate(ctx, &engine.Request{Kind: podGVK, Operation: engine.Create, Namespace: "default", Name: "web", Object: testPod()})
	msg := fmt.Sprint(err)
	if res != nil {
		for _, f := range res.Failures {
			msg += "; " + f.Err.Error()
		}
	}
	if strings.Contains(msg, "timeoutSeconds") {
		t.Errorf("the message names timeoutSeconds: %s", msg)
	}
	if !errors.Is(err, context.DeadlineExceeded) && !strings.Contains(msg, "?timeout= 300ms") && !strings.Contains(msg, "did not finish") {
		t.Errorf("the message does not name the request's deadline: %s", msg)
	}
}
