package webhook

import (
	"bytes"
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/morph-dev/morph/internal/policy"
)

// A stage that does not look at the context (decoding, the diff, encoding a huge
// patch) does not hold the answer past the deadline: the request gets an error in
// time. The client's timeout bounds the test; the server used to answer when the work
// ended (a 60,000-container Pod with ?timeout=5s was answered after 14.5 s).
func TestDeadlineBoundsEveryStage(t *testing.T) {
	s := newTestServer(t, &policy.Bundle{})
	release := make(chan struct{})
	defer close(release)
	slow := s.review("slow", func(context.Context, []byte, *call) reply {
		<-release // ignores the context
		return ok(nil, outcomeAllowed)
	})
	srv := httptest.NewServer(slow)
	defer srv.Close()
	client := &http.Client{Timeout: 5 * time.Second}
	resp, err := client.Post(srv.URL+"/slow?timeout=300ms", "application/json", strings.NewReader("{}"))
	if err != nil {
		t.Fatalf("no answer before the client gave up: %v", err)
	}
	defer func() { _ = resp.Body.Close() }()
	body, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != http.StatusGatewayTimeout || !strings.Contains(string(body), "the API server's ?timeout=300ms") {
		t.Fatalf("status %d: %s", resp.StatusCode, body)
	}
}

// The deadline starts when the request arrives: a body that trickles in is cut off.
func TestDeadlineCountsTheBody(t *testing.T) {
	s := newTestServer(t, &policy.Bundle{})
	srv := httptest.NewServer(s.Handler())
	defer srv.Close()
	pr, pw := io.Pipe()
	defer func() { _ = pw.Close() }()
	go func() { _, _ = pw.Write(bytes.Repeat([]byte(" "), 10)) }() // and then nothing
	req, err := http.NewRequest(http.MethodPost, srv.URL+"/mutate?timeout=300ms", pr)
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Content-Type", "application/json")
	client := &http.Client{Timeout: 5 * time.Second}
	resp, err := client.Do(req)
	if err != nil {
		t.Fatalf("no answer before the client gave up: %v", err)
	}
	defer func() { _ = resp.Body.Close() }()
	body, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != http.StatusGatewayTimeout {
		t.Fatalf("status %d: %s", resp.StatusCode, body)
	}
}
