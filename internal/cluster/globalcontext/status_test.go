package globalcontext

import (
	"context"
	"errors"
	"log/slog"
	"strings"
	"testing"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	dynamicfake "k8s.io/client-go/dynamic/fake"
	k8stesting "k8s.io/client-go/testing"
	"k8s.io/client-go/tools/record"
)

// readyOf returns an entry's Ready condition and lastRefreshTime.
func readyOf(t *testing.T, client *dynamicfake.FakeDynamicClient, name string) (map[string]any, string) {
	t.Helper()
	u, err := client.Resource(EntryResource).Get(context.Background(), name, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	refreshed, _, _ := unstructured.NestedString(u.Object, "status", "lastRefreshTime")
	conds, _, _ := unstructured.NestedSlice(u.Object, "status", "conditions")
	for _, c := range conds {
		if m, ok := c.(map[string]any); ok && m["type"] == "Ready" {
			return m, refreshed
		}
	}
	return nil, refreshed
}

// TestStatusWriter checks the status the leader writes on the entries this replica
// read: Ready (reason Succeeded or Failed with the error) and an apiCall entry's
// lastRefreshTime, through the status subresource, again after a conflict, and never
// when nothing changed.
func TestStatusWriter(t *testing.T) {
	widgets := schema.GroupVersionResource{Group: "example.com", Version: "v1", Resource: "widgets"}
	gce := func(name string, spec map[string]any) *unstructured.Unstructured {
		return object("kyverno.io/v2beta1", "GlobalContextEntry", "", name, map[string]any{"spec": spec})
	}
	client := dynamicfake.NewSimpleDynamicClientWithCustomListKinds(runtime.NewScheme(), map[schema.GroupVersionResource]string{
		EntryResource: "GlobalContextEntryList",
		configMaps:    "ConfigMapList",
		widgets:       "WidgetList",
	},
		gce("calls", map[string]any{"apiCall": map[string]any{"urlPath": "/api/v1/namespaces"}}),
		gce("cms", map[string]any{"kubernetesResource": map[string]any{"version": "v1", "resource": "configmaps", "namespace": "a"}}),
		gce("widgets", map[string]any{"kubernetesResource": map[string]any{"group": "example.com", "version": "v1", "resource": "widgets"}}),
		gce("unread", map[string]any{"apiCall": map[string]any{"urlPath": "/api"}}),
	)
	client.PrependReactor("list", "widgets", func(k8stesting.Action) (bool, runtime.Object, error) {
		return true, nil, apierrors.NewNotFound(widgets.GroupResource(), "")
	})
	conflicts := 1
	client.PrependReactor("update", "globalcontextentries", func(a k8stesting.Action) (bool, runtime.Object, error) {
		if a.GetSubresource() == "status" && conflicts > 0 {
			conflicts--
			return true, nil, apierrors.NewConflict(EntryResource.GroupResource(), "calls", errors.New("the object has been modified"))
		}
		return false, nil, nil
	})
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	s := New(client, nil)
	s.Start(ctx)
	if _, err := s.GlobalContextEntry(ctx, "calls"); err != nil {
		t.Fatal(err)
	}
	if _, err := s.ResourceObjects(ctx, "", "v1", "configmaps", "a"); err != nil {
		t.Fatal(err)
	}
	if _, err := s.ResourceObjects(ctx, "example.com", "v1", "widgets", ""); err == nil {
		t.Fatal("widgets: no error")
	}
	t0 := time.Date(2026, 11, 23, 10, 0, 0, 0, time.UTC)
	s.APICallRefreshed("calls", t0, nil)
	events := record.NewFakeRecorder(10)
	w := &StatusWriter{Source: s, Events: events}
	log := slog.New(slog.DiscardHandler)
	w.writeAll(ctx, log)

	check := func(name, status, reason, message, refreshed string) {
		t.Helper()
		c, r := readyOf(t, client, name)
		if status == "" {
			if c != nil || r != "" {
				t.Errorf("%s: status written (%v, %q), want none", name, c, r)
			}
			return
		}
		if c == nil || c["status"] != status || c["reason"] != reason || c["message"] != message || c["lastTransitionTime"] == nil {
			t.Errorf("%s: Ready %v, want status %s reason %s message %q", name, c, status, reason, message)
		}
		if r != refreshed {
			t.Errorf("%s: lastRefreshTime %q, want %q", name, r, refreshed)
		}
	}
	check("calls", "True", "Succeeded", "Ready", "2026-11-23T10:00:00Z")
	check("cms", "True", "Succeeded", "Ready", "")
	check("widgets", "False", "Failed", `reading widgets.example.com at v1: the API server does not serve this resource (is its CustomResourceDefinition installed, at version v1?): widgets.example.com "" not found`, "")
	check("unread", "", "", "", "")
	if n := countActions(client, "update", "globalcontextentries", "status"); n != 4 {
		t.Errorf("%d status updates, want 4 (3 entries, one conflict)", n)
	}

	if got := drain(events); len(got) != 1 || !strings.HasPrefix(got[0], "Warning PolicyError reading widgets.example.com at v1") {
		t.Errorf("events %q, want one Warning PolicyError for widgets", got)
	}

	// Once the cache has the writes, nothing changed: nothing is written.
	for {
		done := 0
		for _, o := range s.entries.GetStore().List() {
			if _, ok := o.(*unstructured.Unstructured).Object["status"]; ok {
				done++
			}
		}
		if done == 3 {
			break
		}
		select {
		case <-ctx.Done():
			t.Fatal("the cache never saw the status writes")
		case <-time.After(10 * time.Millisecond):
		}
	}
	before := countActions(client, "update", "globalcontextentries", "status")
	w.writeAll(ctx, log)
	if n := countActions(client, "update", "globalcontextentries", "status") - before; n != 0 {
		t.Errorf("%d status updates with nothing changed, want 0", n)
	}
	if got := drain(events); len(got) != 0 {
		t.Errorf("events %q with nothing changed, want none", got)
	}

	// A failed call: Ready False with its error, lastRefreshTime kept.
	s.APICallRefreshed("calls", t0.Add(time.Minute), errors.New("failed to GET resource with raw url: /api/v1/namespaces: forbidden"))
	w.writeAll(ctx, log)
	check("calls", "False", "Failed", "failed to GET resource with raw url: /api/v1/namespaces: forbidden", "2026-11-23T10:00:00Z")
	if got := drain(events); len(got) != 1 || got[0] != "Warning PolicyError failed to GET resource with raw url: /api/v1/namespaces: forbidden" {
		t.Errorf("events %q, want one Warning PolicyError for calls", got)
	}
}

// drain returns the events recorded so far.
func drain(r *record.FakeRecorder) []string {
	var out []string
	for {
		select {
		case e := <-r.Events:
			out = append(out, e)
		default:
			return out
		}
	}
}

// TestSourceLogsAPICallChanges checks that a failing apiCall is logged when it starts
// failing or fails otherwise, and when it answers again, not on every failed call.
func TestSourceLogsAPICallChanges(t *testing.T) {
	var buf strings.Builder
	s := New(nil, nil)
	s.Logger = slog.New(slog.NewTextHandler(&buf, nil))
	at := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	s.APICallRefreshed("e", at, nil)
	s.APICallRefreshed("e", at, errors.New("down"))
	s.APICallRefreshed("e", at, errors.New("down"))
	s.APICallRefreshed("e", at, errors.New("forbidden"))
	s.APICallRefreshed("e", at, nil)
	s.APICallRefreshed("e", at, nil)
	var got []string
	for _, l := range strings.Split(strings.TrimSpace(buf.String()), "\n") {
		i := strings.Index(l, "level=")
		got = append(got, l[i:])
	}
	want := []string{
		`level=WARN msg="GlobalContextEntry apiCall failed" entry=e error=down`,
		`level=WARN msg="GlobalContextEntry apiCall failed" entry=e error=forbidden`,
		`level=INFO msg="GlobalContextEntry apiCall answers again" entry=e`,
	}
	if strings.Join(got, "\n") != strings.Join(want, "\n") {
		t.Errorf("logged:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
}

// TestWithStatusLongMessage checks that an error longer than a condition message may be
// (Kyverno's CRD: 32768) is cut to fit.
func TestWithStatusLongMessage(t *testing.T) {
	e := object("kyverno.io/v2beta1", "GlobalContextEntry", "", "e", nil)
	out, changed := withStatus(e, entryStatus{message: strings.Repeat("x", 40000)}, time.Now())
	conds, _, _ := unstructured.NestedSlice(out.Object, "status", "conditions")
	if !changed || len(conds) != 1 {
		t.Fatalf("changed %v, conditions %v", changed, conds)
	}
	if msg := conds[0].(map[string]any)["message"].(string); len(msg) != maxMessage || !strings.HasSuffix(msg, "...") {
		t.Errorf("message of %d bytes, want %d ending in ...", len(msg), maxMessage)
	}
}
