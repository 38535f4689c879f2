package webhook

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"slices"
	"strings"
	"testing"

	jsonpatch "github.com/evanphx/json-patch"
	admissionv1 "k8s.io/api/admission/v1"

	"github.com/morph-dev/morph/internal/engine"
	"github.com/morph-dev/morph/internal/policy"
)

func TestMutate(t *testing.T) {
	prod := map[string]any{"apiVersion": "v1", "kind": "Namespace", "metadata": map[string]any{"name": "apps", "labels": map[string]any{"env": "prod"}}}
	tests := []struct {
		name   string
		bundle *policy.Bundle
		obj    map[string]any
		opts   []reviewOpt
		// want
		allowed      bool
		labels       map[string]any // labels after applying the patch; nil: no patch
		mutatedBy    string
		code         int32
		message      string // substring of the status message
		warnings     []string
		warningParts []string // substrings every one of which some warning holds
	}{
		{
			name:    "no policy changes the object",
			bundle:  &policy.Bundle{Mutators: mutators(&labelMutator{name: "team", key: "team", value: "a"})},
			obj:     pod(map[string]any{"team": "a"}),
			allowed: true,
		},
		{
			name: "two policies patch the object",
			bundle: &policy.Bundle{Mutators: mutators(
				&labelMutator{name: "team", key: "team", value: "a"},
				&labelMutator{name: "tier", key: "tier/x~y", value: "web"},
			)},
			obj:       pod(nil),
			allowed:   true,
			labels:    map[string]any{"team": "a", "tier/x~y": "web"},
			mutatedBy: "Label/team, Label/tier",
		},
		{
			name: "a failing FailIgnore policy is skipped with a warning",
			bundle: &policy.Bundle{Mutators: mutators(
				&labelMutator{name: "broken", key: "broken", value: "x", err: errors.New("template failed")},
				&labelMutator{name: "team", key: "team", value: "a"},
			)},
			obj:          pod(map[string]any{}),
			allowed:      true,
			labels:       map[string]any{"team": "a"},
			mutatedBy:    "Label/team",
			warningParts: []string{"Label/broken", "template failed"},
		},
		{
			name: "a failing FailClose policy refuses the request",
			bundle: &policy.Bundle{Mutators: mutators(
				&labelMutator{name: "strict", key: "x", value: "y", failure: engine.FailClose, err: errors.New("cannot resolve")},
			)},
			obj:     pod(nil),
			code:    500,
			message: "Label/strict: cannot resolve",
		},
		{
			name: "a panicking FailClose policy refuses the request",
			bundle: &policy.Bundle{Mutators: mutators(
				&labelMutator{name: "panicky", key: "x", value: "y", failure: engine.FailClose, panics: true},
			)},
			obj:     pod(nil),
			code:    500,
			message: "panic: boom from panicky",
		},
		{
			name: "an object that never converges is refused",
			bundle: &policy.Bundle{Mutators: mutators(
				&labelMutator{name: "flip", key: "x", value: "v", flip: true},
			)},
			obj:     pod(nil),
			code:    500,
			message: "did not converge",
		},
		{
			name: "warn validation rules on the mutated object become warnings; deny rules do not",
			bundle: &policy.Bundle{
				Mutators: mutators(&labelMutator{name: "team", key: "team", value: "a"}),
				Validators: validators(
					&labelValidator{name: "no-team", key: "team"},
					&labelValidator{name: "deny-team", key: "team", deny: true},
				),
			},
			obj:       pod(nil),
			allowed:   true,
			labels:    map[string]any{"team": "a"},
			mutatedBy: "Label/team",
			warnings:  []string{"Rule/no-team: metadata.labels.team: label team is not allowed"},
		},
		{
			name:    "DELETE without an object is allowed untouched",
			bundle:  &policy.Bundle{Mutators: mutators(&labelMutator{name: "team", key: "team", value: "a"})},
			obj:     nil,
			opts:    []reviewOpt{asOperation(admissionv1.Delete)},
			allowed: true,
		},
		{
			name:      "the namespace comes from the context store",
			bundle:    &policy.Bundle{Mutators: mutators(&labelMutator{name: "prod-only", key: "prod", value: "yes", nsLabel: "env"})},
			obj:       pod(nil),
			allowed:   true,
			labels:    map[string]any{"prod": "yes"},
			mutatedBy: "Label/prod-only",
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s := newTestServer(t, tt.bundle, prod)
			resp := admissionResponse(t, s.Handler(), "/mutate", admissionBody(t, "uid-1", tt.obj, tt.opts...))
			if resp.UID != "uid-1" {
				t.Errorf("uid = %q, want uid-1", resp.UID)
			}
			if resp.Allowed != tt.allowed {
				t.Fatalf("allowed = %v, want %v (result %+v)", resp.Allowed, tt.allowed, resp.Result)
			}
			if !tt.allowed {
				if resp.Result == nil || resp.Result.Code != tt.code || !strings.Contains(resp.Result.Message, tt.message) {
					t.Fatalf("result = %+v, want code %d and a message holding %q", resp.Result, tt.code, tt.message)
				}
				if resp.Patch != nil {
					t.Errorf("a refused request carries a patch: %s", resp.Patch)
				}
				return
			}
			if tt.labels == nil {
				if resp.Patch != nil || resp.PatchType != nil {
					t.Errorf("unchanged object has patch %s", resp.Patch)
				}
			} else {
				if resp.PatchType == nil || *resp.PatchType != admissionv1.PatchTypeJSONPatch {
					t.Fatalf("patchType = %v, want JSONPatch", resp.PatchType)
				}
				got := applyPatch(t, tt.obj, resp.Patch)
				md, _ := got["metadata"].(map[string]any)
				if labels, _ := md["labels"].(map[string]any); !jsonEqual(labels, tt.labels) {
					t.Errorf("labels after patch = %v, want %v (patch %s)", labels, tt.labels, resp.Patch)
				}
			}
			if got := resp.AuditAnnotations[AuditAnnotationMutatedBy]; got != tt.mutatedBy {
				t.Errorf("mutated-by = %q, want %q", got, tt.mutatedBy)
			}
			if tt.warnings != nil && !slices.Equal(resp.Warnings, tt.warnings) {
				t.Errorf("warnings = %q, want %q", resp.Warnings, tt.warnings)
			}
			for _, part := range tt.warningParts {
				if !slices.ContainsFunc(resp.Warnings, func(w string) bool { return strings.Contains(w, part) }) {
					t.Errorf("no warning holds %q: %q", part, resp.Warnings)
				}
			}
		})
	}
}

func applyPatch(t *testing.T, obj map[string]any, patch []byte) map[string]any {
	t.Helper()
	doc, err := json.Marshal(obj)
	if err != nil {
		t.Fatal(err)
	}
	p, err := jsonpatch.DecodePatch(patch)
	if err != nil {
		t.Fatalf("patch %s does not decode: %v", patch, err)
	}
	out, err := p.Apply(doc)
	if err != nil {
		t.Fatalf("patch %s does not apply: %v", patch, err)
	}
	var got map[string]any
	if err := json.Unmarshal(out, &got); err != nil {
		t.Fatal(err)
	}
	return got
}

func jsonEqual(a, b any) bool {
	x, _ := json.Marshal(a)
	y, _ := json.Marshal(b)
	return string(x) == string(y)
}

func TestMutateDryRunReachesPolicies(t *testing.T) {
	m := &labelMutator{name: "team", key: "team", value: "a"}
	s := newTestServer(t, &policy.Bundle{Mutators: mutators(m)})
	resp := admissionResponse(t, s.Handler(), "/mutate", admissionBody(t, "dry", pod(nil), dryRun))
	if !resp.Allowed || resp.Patch == nil {
		t.Fatalf("a dry-run request is answered like any other: %+v", resp)
	}
	if m.calls.Load() == 0 || m.dryRuns.Load() != m.calls.Load() {
		t.Errorf("the policy saw %d dry-run calls of %d, want all", m.dryRuns.Load(), m.calls.Load())
	}
}

func TestMutateKeepsLargeIntegersExact(t *testing.T) {
	s := newTestServer(t, &policy.Bundle{Mutators: mutators(&labelMutator{name: "team", key: "team", value: "a"})})
	body := []byte(`{"apiVersion":"admission.k8s.io/v1","kind":"AdmissionReview","request":{"uid":"big","kind":{"group":"","version":"v1","kind":"Pod"},` +
		`"resource":{"group":"","version":"v1","resource":"pods"},"operation":"CREATE","namespace":"apps",` +
		`"object":{"apiVersion":"v1","kind":"Pod","metadata":{"name":"p"},"spec":{"n":9007199254740993,"f":1.5}}}}`)
	resp := admissionResponse(t, s.Handler(), "/mutate", body)
	if strings.Contains(string(resp.Patch), "9007199254740992") || strings.Contains(string(resp.Patch), "/spec") {
		t.Errorf("patch touches spec: %s", resp.Patch)
	}
}

func TestValidate(t *testing.T) {
	tests := []struct {
		name       string
		validators []engine.Validator
		labels     map[string]any
		allowed    bool
		message    string
		warnings   []string
	}{
		{
			name:       "no violation",
			validators: validators(&labelValidator{name: "no-debug", key: "debug", deny: true}),
			labels:     map[string]any{"team": "a"},
			allowed:    true,
		},
		{
			name: "deny violations refuse with every message",
			validators: validators(
				&labelValidator{name: "no-debug", key: "debug", deny: true},
				&labelValidator{name: "no-debug-again", key: "debug", deny: true},
				&labelValidator{name: "warn-debug", key: "debug"},
			),
			labels:   map[string]any{"debug": "true"},
			message:  "Rule/no-debug: metadata.labels.debug: label debug is not allowed; Rule/no-debug-again: metadata.labels.debug: label debug is not allowed",
			warnings: []string{"Rule/warn-debug: metadata.labels.debug: label debug is not allowed"},
		},
		{
			name:       "a validator's error is a warning, never a denial",
			validators: validators(&labelValidator{name: "broken", key: "debug", deny: true, err: errors.New("bad rule")}),
			labels:     map[string]any{"debug": "true"},
			allowed:    true,
			warnings:   []string{"Rule/broken: validation skipped: bad rule"},
		},
		{
			name:    "no validators allow everything",
			labels:  map[string]any{"debug": "true"},
			allowed: true,
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s := newTestServer(t, &policy.Bundle{Validators: tt.validators})
			resp := admissionResponse(t, s.Handler(), "/validate", admissionBody(t, "v-1", pod(tt.labels)))
			if resp.UID != "v-1" || resp.Allowed != tt.allowed {
				t.Fatalf("uid %q allowed %v, want v-1 %v", resp.UID, resp.Allowed, tt.allowed)
			}
			if !tt.allowed && (resp.Result == nil || resp.Result.Code != http.StatusForbidden || resp.Result.Message != tt.message) {
				t.Errorf("result = %+v, want code 403 and message %q", resp.Result, tt.message)
			}
			if !slices.Equal(resp.Warnings, tt.warnings) {
				t.Errorf("warnings = %q, want %q", resp.Warnings, tt.warnings)
			}
		})
	}
}

// offMutator is turned off at admission.
type offMutator struct{ *labelMutator }

func (m offMutator) mutator() engine.Mutator {
	d := m.descriptor()
	d.AdmissionOff = true
	return engine.Mutator{Descriptor: d, Mutate: m.mutate}
}

func TestMutatorsOffAtAdmission(t *testing.T) {
	off := offMutator{&labelMutator{name: "background-only", key: "bg", value: "1"}}
	b := &policy.Bundle{Mutators: mutators(off, &labelMutator{name: "team", key: "team", value: "a"})}
	s := newTestServer(t, b)
	resp := admissionResponse(t, s.Handler(), "/mutate", admissionBody(t, "u", pod(nil)))
	if got := resp.AuditAnnotations[AuditAnnotationMutatedBy]; got != "Label/team" {
		t.Errorf("mutated-by = %q, want only Label/team", got)
	}
	if off.calls.Load() != 0 {
		t.Error("a mutator off at admission ran")
	}
	if r := s.Readiness(); r.Policies.Mutators != 1 {
		t.Errorf("readiness counts %d mutators, want 1", r.Policies.Mutators)
	}
	m, _, err := Configurations(&policy.Bundle{Mutators: mutators(off)}, ConfigOptions{Name: "morph", Namespace: "morph-system", URL: "https://a:1"})
	if err != nil || m != nil {
		t.Errorf("a mutator off at admission was registered: %v %v", m, err)
	}
}

// describingMutator fails and words its own failure's log line, as Katalog does.
type describingMutator struct{ *labelMutator }

func (m describingMutator) mutator() engine.Mutator {
	d := m.descriptor()
	d.DescribeFailure = func(kind, name string, err error) string {
		return fmt.Sprintf("admission/mutate: error applying rules — allowing without mutation kind=%s name=%s err=%q", kind, name, err)
	}
	return engine.Mutator{Descriptor: d, Mutate: m.mutate}
}

func TestFailureLoggedAsTheDialectSays(t *testing.T) {
	var logs bytes.Buffer
	failing := describingMutator{&labelMutator{name: "site", key: "a", value: "b", err: errors.New("resolving template")}}
	s, err := New(Options{
		Source: bundleSource(&policy.Bundle{Mutators: mutators(failing)}), Admission: true, Conversion: true,
		Logger: slog.New(slog.NewTextHandler(&logs, nil)),
	})
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Reload(); err != nil {
		t.Fatal(err)
	}
	resp := admissionResponse(t, s.Handler(), "/mutate", admissionBody(t, "uid-1", pod(nil)))
	if !resp.Allowed || resp.Patch != nil {
		t.Fatalf("a failing FailIgnore mutator must allow without mutation: %+v", resp)
	}
	want := `admission/mutate: error applying rules — allowing without mutation kind=Pod name=web err=\"resolving template\"`
	if !strings.Contains(logs.String(), want) {
		t.Fatalf("log %q does not contain %q", logs.String(), want)
	}
}

// TestMutateReportsValidatorErrors: a validator that fails on /mutate's result is a
// warning there, as on /validate.
func TestMutateReportsValidatorErrors(t *testing.T) {
	s := newTestServer(t, &policy.Bundle{Validators: validators(&labelValidator{name: "broken", err: errors.New("no schema")})})
	resp := admissionResponse(t, s.Handler(), "/mutate", admissionBody(t, "uid-2", pod(nil)))
	if !resp.Allowed || !slices.ContainsFunc(resp.Warnings, func(w string) bool { return strings.Contains(w, "no schema") }) {
		t.Fatalf("want the validator's error as a warning: %+v", resp)
	}
}

// TestValidatorErrorsAreLoggedAndCounted: a validator that fails, on /mutate's result as
// on /validate, is logged at warn level with the request's attributes and counted in
// morph_policy_errors_total, and stays a warning in the answer.
func TestValidatorErrorsAreLoggedAndCounted(t *testing.T) {
	for _, path := range []string{"/mutate", "/validate"} {
		t.Run(path, func(t *testing.T) {
			var logs bytes.Buffer
			s, err := New(Options{
				Source: bundleSource(&policy.Bundle{Validators: validators(
					&labelValidator{name: "broken", err: errors.New("no schema")},
					&labelValidator{name: "no-debug", key: "debug"},
				)}),
				Admission: true, Logger: slog.New(slog.NewJSONHandler(&logs, nil)),
			})
			if err != nil {
				t.Fatal(err)
			}
			if err := s.Reload(); err != nil {
				t.Fatal(err)
			}
			resp := admissionResponse(t, s.Handler(), path, admissionBody(t, "uid-v", pod(map[string]any{"debug": "1"})))
			wantWarnings := []string{"Rule/broken: validation skipped: no schema", "Rule/no-debug: metadata.labels.debug: label debug is not allowed"}
			if !resp.Allowed || !slices.Equal(resp.Warnings, wantWarnings) {
				t.Errorf("allowed %v warnings %q, want allowed with %q", resp.Allowed, resp.Warnings, wantWarnings)
			}
			var warned []map[string]any
			for l := range strings.SplitSeq(strings.TrimSpace(logs.String()), "\n") {
				var line map[string]any
				if err := json.Unmarshal([]byte(l), &line); err != nil {
					t.Fatalf("log line %q: %v", l, err)
				}
				if line["level"] == "WARN" {
					warned = append(warned, line)
				}
			}
			want := map[string]any{"msg": "validation skipped", "policy": "Rule/broken", "error": "no schema",
				"uid": "uid-v", "kind": "/v1, Kind=Pod", "operation": "CREATE", "namespace": "apps", "name": "web"}
			if len(warned) != 1 {
				t.Fatalf("%d warn lines, want 1:\n%s", len(warned), logs.String())
			}
			for k, v := range want {
				if warned[0][k] != v {
					t.Errorf("warn line %s = %v, want %v", k, warned[0][k], v)
				}
			}
			metrics := get(t, s.Handler(), "/metrics")
			if want := `morph_policy_errors_total{policy="Rule/broken"} 1`; !strings.Contains(metrics, want) {
				t.Errorf("metrics lack %q", want)
			}
			if strings.Contains(metrics, `policy="Rule/no-debug"`) {
				t.Error("a validator that did not fail is counted as an error")
			}
		})
	}
}

// TestWebhookGroupsRunOnlyTheirPolicies: each webhook group's path runs its own policies,
// so an Ignore policy that blocks never fails an object through a Fail group's webhook,
// and the Fail policy always runs.
func TestWebhookGroupsRunOnlyTheirPolicies(t *testing.T) {
	strict := &labelMutator{name: "strict", key: "strict", value: "yes", failure: engine.FailClose}
	slow := &labelMutator{name: "slow", key: "slow", value: "yes", block: true}
	s := newTestServer(t, &policy.Bundle{Mutators: mutators(strict, slow)})
	failGroup, ignoreGroup := MutationGroup(strict.descriptor()), MutationGroup(slow.descriptor())
	if failGroup != "fail-ifneeded-10s" || ignoreGroup != "ignore-ifneeded-10s" {
		t.Fatalf("groups %q and %q", failGroup, ignoreGroup)
	}
	resp := admissionResponse(t, s.Handler(), "/mutate/"+failGroup+"?timeout=300ms", admissionBody(t, "f", pod(nil)))
	if !resp.Allowed || resp.AuditAnnotations[AuditAnnotationMutatedBy] != "Label/strict" {
		t.Fatalf("fail group: allowed %v, mutated by %q, result %+v", resp.Allowed, resp.AuditAnnotations[AuditAnnotationMutatedBy], resp.Result)
	}
	if slow.calls.Load() != 0 {
		t.Fatal("the Ignore group's policy ran under the Fail group's webhook")
	}
	strictCalls := strict.calls.Load()
	resp = admissionResponse(t, s.Handler(), "/mutate/"+ignoreGroup+"?timeout=200ms", admissionBody(t, "i", pod(nil)))
	if !resp.Allowed || resp.Patch != nil || strict.calls.Load() != strictCalls {
		t.Fatalf("ignore group: allowed %v, patch %s, strict calls %d then %d", resp.Allowed, resp.Patch, strictCalls, strict.calls.Load())
	}
	resp = admissionResponse(t, s.Handler(), "/mutate/fail-never-30s", admissionBody(t, "u", pod(nil)))
	if !resp.Allowed || resp.Patch != nil {
		t.Fatalf("a group no policy belongs to: allowed %v, patch %s", resp.Allowed, resp.Patch)
	}
	if w := post(t, s.Handler(), "/mutate/a/b", admissionBody(t, "x", pod(nil))); w.Code != http.StatusNotFound {
		t.Fatalf("/mutate/a/b: %d, want 404", w.Code)
	}
}

// TestServerDoesNotGuessUnknownNamespaces: a namespace the server's context does not know
// is not made up (a guess could match a NotIn selector the real Namespace does not): a
// policy whose selector needs it does not apply, or fails by its failure policy.
func TestServerDoesNotGuessUnknownNamespaces(t *testing.T) {
	m := &labelMutator{name: "by-name", key: "seen", value: "yes", nsLabel: "kubernetes.io/metadata.name", failure: engine.FailClose}
	s := newTestServer(t, &policy.Bundle{Mutators: mutators(m)})
	resp := admissionResponse(t, s.Handler(), "/mutate", admissionBody(t, "u", pod(nil)))
	if !resp.Allowed || resp.Patch != nil {
		t.Fatalf("allowed %v, patch %s: the unknown namespace was guessed", resp.Allowed, resp.Patch)
	}
}

// TestValidationPastTheDeadlineRefuses: a fail-closed validator that could not finish
// in time refuses the object (it used to be a skip, admitting what it would deny).
func TestValidationPastTheDeadlineRefuses(t *testing.T) {
	s := newTestServer(t, &policy.Bundle{Validators: validators(&labelValidator{name: "no-debug", key: "debug", deny: true, late: true})})
	resp := admissionResponse(t, s.Handler(), "/validate?timeout=200ms", admissionBody(t, "v", pod(map[string]any{"debug": "1"})))
	if resp.Allowed || resp.Result.Code != http.StatusGatewayTimeout || !strings.Contains(resp.Result.Message, "?timeout=200ms") {
		t.Fatalf("allowed %v, result %+v: want a 504 refusal naming the deadline", resp.Allowed, resp.Result)
	}
}
