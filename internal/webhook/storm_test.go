package webhook

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	admissionv1 "k8s.io/api/admission/v1"

	"github.com/morph-dev/morph/internal/policy"
)

// stormCase is one malformed request; mayPass marks bodies that can still be a valid
// review (a bit flip inside a string), which must then be answered correctly.
type stormCase struct {
	kind    string
	path    string
	body    []byte
	mayPass bool
}

func stormCases(t *testing.T, rng *rand.Rand, limit int) []stormCase {
	good := admissionBody(t, "storm", pod(map[string]any{"app": "web"}))
	var cases []stormCase
	add := func(n int, kind string, mayPass bool, gen func(i int) []byte) {
		for i := range n {
			path := "/mutate"
			if i%4 == 3 {
				path = "/validate"
			}
			cases = append(cases, stormCase{kind: kind, path: path, body: gen(i), mayPass: mayPass})
		}
	}
	add(500, "truncated", false, func(int) []byte { return good[:1+rng.IntN(len(good)-1)] })
	add(600, "bit-flipped", true, func(int) []byte {
		b := bytes.Clone(good)
		for range 1 + rng.IntN(4) {
			b[rng.IntN(len(b))] ^= 1 << rng.IntN(8)
		}
		return b
	})
	wrongTypes := []string{
		`{"apiVersion":"admission.k8s.io/v1","kind":"AdmissionReview","request":[]}`,
		`{"apiVersion":"admission.k8s.io/v1","kind":"AdmissionReview","request":{"uid":5}}`,
		`{"apiVersion":"admission.k8s.io/v1","kind":"AdmissionReview","request":{"uid":"x","kind":"Pod"}}`,
		`{"apiVersion":"admission.k8s.io/v1","kind":"AdmissionReview","request":{"uid":"x","kind":{"version":"v1","kind":"Pod"},"operation":"CREATE","object":"pod"}}`,
		`{"apiVersion":"admission.k8s.io/v1","kind":"AdmissionReview","request":{"uid":"x","kind":{"version":"v1","kind":"Pod"},"operation":7,"object":{}}}`,
		`{"apiVersion":"admission.k8s.io/v1","kind":"AdmissionReview","request":{"uid":"x","kind":{"version":"v1","kind":"Pod"},"operation":"CREATE","dryRun":"yes","object":{}}}`,
		`{"apiVersion":"admission.k8s.io/v1","kind":"AdmissionReview","request":{"uid":"x","kind":{"version":"v1","kind":"Pod"},"operation":"CREATE","userInfo":{"groups":"a"},"object":{}}}`,
		`{"apiVersion":"admission.k8s.io/v1","kind":"AdmissionReview","request":{"uid":"x","kind":{"version":"v1","kind":"Pod"},"operation":"CREATE","object":[{}]}}`,
		`{"apiVersion":"admission.k8s.io/v1","kind":"AdmissionReview","request":{"uid":"x","kind":{"version":"v1","kind":"Pod"},"operation":"CREATE","object":{}}} trailing`,
		`{"apiVersion":1,"kind":true}`,
		`[]`, `null`, `"AdmissionReview"`, `42`, `{}`,
		`{"apiVersion":"admission.k8s.io/v1","kind":"AdmissionReview","request":{"uid":"x","kind":{"version":"v1","kind":"Pod"},"operation":"CREATE","object":{"a":1e400}}}`,
	}
	add(400, "wrong types", false, func(i int) []byte { return []byte(wrongTypes[i%len(wrongTypes)]) })
	nested := func(open, close string, depth int) []byte {
		prefix := `{"apiVersion":"admission.k8s.io/v1","kind":"AdmissionReview","request":{"uid":"deep","kind":{"version":"v1","kind":"Pod"},"operation":"CREATE","object":{"deep":`
		return []byte(prefix + strings.Repeat(open, depth) + "1" + strings.Repeat(close, depth) + "}}}")
	}
	deepObject, deepList := nested(`{"a":`, `}`, 10000), nested(`[`, `]`, 10000)
	add(100, "deeply nested object", false, func(int) []byte { return deepObject })
	add(100, "deeply nested list", false, func(int) []byte { return deepList })
	add(200, "empty", false, func(i int) []byte { return []byte(strings.Repeat(" \n\t", i%3)) })
	overLimit := append(append([]byte(`{"apiVersion":"admission.k8s.io/v1","kind":"AdmissionReview","request":{"uid":"`), bytes.Repeat([]byte("x"), limit)...), `"}}`...)
	add(20, "huge string over the limit", false, func(int) []byte { return overLimit })
	badEscape := append(append([]byte(`{"apiVersion":"admission.k8s.io/v1","kind":"AdmissionReview","request":{"uid":"`), bytes.Repeat([]byte(`\q`), 1<<19)...), `"}}`...)
	add(80, "huge string with bad escapes", false, func(int) []byte { return badEscape })
	return cases
}

func TestMalformedReviewStorm(t *testing.T) {
	const limit = 2 << 20
	s, err := New(Options{Source: bundleSource(&policy.Bundle{
		Mutators:   mutators(&labelMutator{name: "team", key: "team", value: "a"}),
		Validators: validators(&labelValidator{name: "no-debug", key: "debug", deny: true}),
	}), Admission: true, MaxBody: limit})
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Reload(); err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(s.Handler())
	defer srv.Close()
	client := &http.Client{Timeout: 10 * time.Second}
	cases := stormCases(t, rand.New(rand.NewPCG(1, 2)), limit)
	if len(cases) != 2000 {
		t.Fatalf("%d cases, want 2000", len(cases))
	}

	// Each request is bounded by the client's timeout; the storm as a whole is not
	// timed, since under -race on a busy machine it may take long.
	ctx := context.Background()
	work := make(chan int)
	var mu sync.Mutex
	statuses := map[string]map[int]int{}
	var failures []string
	var wg sync.WaitGroup
	for range 8 {
		wg.Go(func() {
			for i := range work {
				c := cases[i]
				status, problem := sendStorm(ctx, client, srv.URL, c)
				mu.Lock()
				if statuses[c.kind] == nil {
					statuses[c.kind] = map[int]int{}
				}
				statuses[c.kind][status]++
				if problem != "" && len(failures) < 20 {
					failures = append(failures, fmt.Sprintf("case %d (%s, %d bytes): %s", i, c.kind, len(c.body), problem))
				}
				mu.Unlock()
			}
		})
	}
	for i := range cases {
		work <- i
	}
	close(work)
	wg.Wait()
	for _, f := range failures {
		t.Error(f)
	}
	t.Logf("statuses by kind: %v", statuses)

	resp := admissionResponse(t, s.Handler(), "/mutate", admissionBody(t, "after-storm", pod(nil)))
	if resp.UID != "after-storm" || !resp.Allowed || resp.Patch == nil {
		t.Errorf("a good review after the storm: %+v", resp)
	}
}

// sendStorm sends one case and says what is wrong with the answer ("" when nothing).
func sendStorm(ctx context.Context, client *http.Client, base string, c stormCase) (int, string) {
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, base+c.path, bytes.NewReader(c.body))
	if err != nil {
		return 0, err.Error()
	}
	req.Header.Set("Content-Type", "application/json")
	resp, err := client.Do(req)
	if err != nil {
		return 0, "dropped: " + err.Error()
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		return resp.StatusCode, "reading the answer: " + err.Error()
	}
	switch {
	case resp.StatusCode >= 400 && resp.StatusCode < 500:
		if len(bytes.TrimSpace(body)) == 0 {
			return resp.StatusCode, "an error without a message"
		}
		return resp.StatusCode, ""
	case resp.StatusCode == http.StatusOK && c.mayPass:
		var review admissionv1.AdmissionReview
		if err := json.Unmarshal(body, &review); err != nil || review.Response == nil || review.Response.UID == "" {
			return resp.StatusCode, fmt.Sprintf("200 without a valid AdmissionReview answer: %s", body)
		}
		return resp.StatusCode, ""
	}
	return resp.StatusCode, fmt.Sprintf("status %d: %s", resp.StatusCode, body)
}
