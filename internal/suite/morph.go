package suite

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"sigs.k8s.io/yaml"

	"github.com/morph-dev/morph/internal/engine"
	"github.com/morph-dev/morph/internal/objects"
	"github.com/morph-dev/morph/internal/offline"
	"github.com/morph-dev/morph/internal/policy"
)

// morphGroup is the API group of morph's own test format.
const morphGroup = "morph.dev"

// morphTest is a morph test (morph.dev/v1alpha1 Test): policies of any dialect, the
// context they read, and cases, each an input object with what should become of it.
// Paths are relative to the test file. Unknown fields are errors.
type morphTest struct {
	APIVersion string `json:"apiVersion"`
	Kind       string `json:"kind"`
	Metadata   struct {
		Name string `json:"name"`
	} `json:"metadata"`
	// Policies are files or folders of policies; non-policy documents among them are
	// context, as in morph apply.
	Policies []string `json:"policies"`
	// Context are files or folders of objects that exist in the cluster.
	Context []string `json:"context,omitempty"`
	// LoadError, when set, expects loading the policies to fail with an error that
	// contains it; the test then has no cases.
	LoadError string `json:"loadError,omitempty"`
	// The defaults of every case.
	Operation string           `json:"operation,omitempty"`
	Namespace string           `json:"namespace,omitempty"`
	UserInfo  *engine.UserInfo `json:"userInfo,omitempty"`
	Mode      string           `json:"mode,omitempty"`
	Cases     []morphCase      `json:"cases,omitempty"`
}

// morphCase is one input and its expectation.
type morphCase struct {
	Name string `json:"name"`
	// Input is a file holding the object (its only document), or Object the object
	// itself.
	Input  string         `json:"input,omitempty"`
	Object map[string]any `json:"object,omitempty"`
	// Old is the stored object of an UPDATE or DELETE: a file (Old) or inline
	// (OldObject).
	Old       string           `json:"old,omitempty"`
	OldObject map[string]any   `json:"oldObject,omitempty"`
	Operation string           `json:"operation,omitempty"`
	Namespace string           `json:"namespace,omitempty"`
	UserInfo  *engine.UserInfo `json:"userInfo,omitempty"`
	Expect    *morphExpect     `json:"expect,omitempty"`
}

// morphExpect is what a case expects: exactly one of Object (the whole mutated
// object, compared exactly), ObjectFile (the same, in a file), Patch (the RFC 6902
// patch morph computes, compared exactly), Unchanged, Denied (a validation rule denies
// the object; the message must contain the text given) or Error (the evaluation fails
// with an error containing the text). Warnings, when given, must each be contained in
// one of the warnings.
type morphExpect struct {
	Object     map[string]any `json:"object,omitempty"`
	ObjectFile string         `json:"objectFile,omitempty"`
	Patch      []any          `json:"patch,omitempty"`
	Unchanged  bool           `json:"unchanged,omitempty"`
	Denied     *string        `json:"denied,omitempty"`
	Error      string         `json:"error,omitempty"`
	Warnings   []string       `json:"warnings,omitempty"`
}

func (e *morphExpect) count() int {
	n := 0
	for _, set := range []bool{e.Object != nil, e.ObjectFile != "", e.Patch != nil, e.Unchanged, e.Denied != nil, e.Error != ""} {
		if set {
			n++
		}
	}
	return n
}

// runMorphFile runs every test of a morph test file and, with Update, rewrites its
// expected objects.
func (r *Runner) runMorphFile(ctx context.Context, path string) ([]Case, *Update) {
	data, err := os.ReadFile(path)
	if err != nil {
		return []Case{fileError(path, "", err)}, nil
	}
	docs, err := policy.Decode(path, data)
	if err != nil {
		return []Case{fileError(path, "", err)}, nil
	}
	var cases []Case
	var updates []snapshot
	for docIndex, d := range docs {
		t, err := decodeMorphTest(d)
		if err != nil {
			cases = append(cases, fileError(path, "", err))
			continue
		}
		cs, snaps := r.runMorphTest(ctx, path, t)
		for i := range snaps {
			snaps[i].doc = docIndex
		}
		cases = append(cases, cs...)
		updates = append(updates, snaps...)
	}
	if !r.Update || len(updates) == 0 {
		return cases, nil
	}
	upd, err := applySnapshots(path, data, updates)
	if err != nil {
		return append(cases, fileError(path, "", fmt.Errorf("--update: %w", err))), nil
	}
	return cases, upd
}

func decodeMorphTest(d policy.Document) (*morphTest, error) {
	if d.APIVersion() != morphGroup+"/v1alpha1" || d.Kind() != "Test" {
		return nil, d.Invalid("kind", d.Kind(), fmt.Sprintf("expected apiVersion %s/v1alpha1 and kind Test", morphGroup))
	}
	raw, err := json.Marshal(d.Object)
	if err != nil {
		return nil, err
	}
	var t morphTest
	if err := yaml.UnmarshalStrict(raw, &t); err != nil {
		return nil, d.Wrap(nil, nil, err)
	}
	if t.Metadata.Name == "" {
		return nil, d.Required("metadata.name", "name the test")
	}
	if len(t.Policies) == 0 {
		return nil, d.Required("policies", "give the policy files or folders the test loads")
	}
	if t.LoadError == "" && len(t.Cases) == 0 {
		return nil, d.Required("cases", "give at least one case (or loadError)")
	}
	if t.LoadError != "" && len(t.Cases) > 0 {
		return nil, d.Forbidden("cases", "a test that expects a loadError has no cases; remove them or loadError")
	}
	for i, c := range t.Cases {
		field := fmt.Sprintf("cases[%d]", i)
		if c.Name == "" {
			return nil, d.Required(field+".name", "name the case")
		}
		if (c.Input == "") == (c.Object == nil) {
			return nil, d.Invalid(field, nil, "give the input object as input (a file) or object (inline), one of them")
		}
		if c.Old != "" && c.OldObject != nil {
			return nil, d.Invalid(field, nil, "give the old object as old (a file) or oldObject (inline), not both")
		}
		if c.Expect != nil && c.Expect.count() > 1 {
			return nil, d.Invalid(field+".expect", nil, "give one of object, objectFile, patch, unchanged, denied and error")
		}
	}
	switch t.Mode {
	case "", "admission", "reconcile":
	default:
		return nil, d.NotSupported("mode", t.Mode, "admission", "reconcile")
	}
	return &t, nil
}

// snapshot is an expected object --update writes: the actual object of case c of
// document doc, or of a file.
type snapshot struct {
	doc, c int
	file   string // objectFile, when the expectation is in a file
	object map[string]any
}

func (r *Runner) runMorphTest(ctx context.Context, path string, t *morphTest) ([]Case, []snapshot) {
	dir := filepath.Dir(path)
	name := t.Metadata.Name
	ctxDocs, err := readDocs(dir, t.Context)
	if err != nil {
		return []Case{fileError(path, name, fmt.Errorf("context: %w", err))}, nil
	}
	docs, err := readDocs(dir, t.Policies)
	if err != nil {
		return []Case{fileError(path, name, fmt.Errorf("policies: %w", err))}, nil
	}
	newLoader := func(s *objects.Store) *policy.Loader { return r.Hooks.NewLoader(s, false) }
	rt, err := offline.Load(newLoader, ctxDocs, docs, strings.Join(t.Policies, ", "))
	if t.LoadError != "" {
		c := Case{File: path, Test: name, Name: "load error"}
		switch {
		case err == nil:
			c.Message = fmt.Sprintf("the policies loaded; expected an error containing %q", t.LoadError)
		case !strings.Contains(err.Error(), t.LoadError):
			c.Message = fmt.Sprintf("expected an error containing %q, got:\n%s", t.LoadError, loadErrorText(err))
		default:
			c.Passed = true
		}
		return []Case{c}, nil
	}
	if err != nil {
		return []Case{fileError(path, name, fmt.Errorf("policies could not be loaded:\n%s", loadErrorText(err)))}, nil
	}
	var cases []Case
	var snaps []snapshot
	for i := range t.Cases {
		c, snap := r.runMorphCase(ctx, rt, dir, path, t, i)
		cases = append(cases, c)
		if snap != nil {
			snaps = append(snaps, *snap)
		}
	}
	return cases, snaps
}

// oneObject reads the only document of a file.
func oneObject(dir, file string) (policy.Document, error) {
	docs, err := readDocs(dir, []string{file})
	if err != nil {
		return policy.Document{}, err
	}
	if len(docs) != 1 {
		return policy.Document{}, fmt.Errorf("%s: expected one object, found %d", file, len(docs))
	}
	return docs[0], nil
}

func (r *Runner) runMorphCase(ctx context.Context, rt *offline.Runtime, dir, path string, t *morphTest, i int) (Case, *snapshot) {
	mc := t.Cases[i]
	c := Case{File: path, Test: t.Metadata.Name, Name: mc.Name}
	failf := func(format string, args ...any) (Case, *snapshot) {
		c.Message = fmt.Sprintf(format, args...)
		return c, nil
	}
	input := policy.Document{File: path, Index: i + 1, Object: mc.Object}
	if mc.Input != "" {
		var err error
		if input, err = oneObject(dir, mc.Input); err != nil {
			return failf("input: %v", err)
		}
	} else {
		engine.Normalize(input.Object)
	}
	var olds []policy.Document
	switch {
	case mc.Old != "":
		old, err := oneObject(dir, mc.Old)
		if err != nil {
			return failf("old: %v", err)
		}
		olds = append(olds, old)
	case mc.OldObject != nil:
		engine.Normalize(mc.OldObject)
		olds = append(olds, policy.Document{File: path, Object: mc.OldObject})
	}
	opName := firstNonEmpty(mc.Operation, t.Operation, string(engine.Create))
	op, err := engine.ParseOperation(opName)
	if err != nil {
		return failf("operation: %v", err)
	}
	user := t.UserInfo
	if mc.UserInfo != nil {
		user = mc.UserInfo
	}
	opts := offline.RequestOptions{Operation: op, Namespace: firstNonEmpty(mc.Namespace, t.Namespace, "default"), Source: engine.SourceOriginal, Olds: olds}
	if user != nil {
		opts.UserInfo = *user
	}
	req, err := offline.NewRequest(rt.Store, input, opts)
	if err != nil {
		return failf("input: %v", err)
	}
	res, violations, err := rt.Evaluate(ctx, req, t.Mode == "reconcile")
	expect := mc.Expect
	if expect == nil {
		expect = &morphExpect{}
	}
	if expect.Error != "" {
		switch {
		case err == nil:
			return failf("expected an error containing %q; the evaluation succeeded", expect.Error)
		case !strings.Contains(err.Error(), expect.Error):
			return failf("expected an error containing %q, got: %v", expect.Error, err)
		}
		c.Passed = true
		return c, nil
	}
	if err != nil {
		return failf("evaluation failed: %v", err)
	}
	var denials []string
	for _, v := range violations {
		if v.Deny {
			denials = append(denials, fmt.Sprintf("%s: %s", v.ID, v.Message))
		}
	}
	if expect.Denied != nil {
		for _, d := range denials {
			if strings.Contains(d, *expect.Denied) {
				c.Passed = true
				return c, nil
			}
		}
		if len(denials) == 0 {
			return failf("expected a denial containing %q; the object was admitted", *expect.Denied)
		}
		return failf("expected a denial containing %q, got: %s", *expect.Denied, strings.Join(denials, "; "))
	}
	if len(denials) > 0 {
		return failf("denied: %s", strings.Join(denials, "; "))
	}
	warnings := res.Warnings
	for _, v := range violations {
		warnings = append(warnings, fmt.Sprintf("%s: %s", v.ID, v.Message))
	}
	for _, w := range expect.Warnings {
		if !containsAny(warnings, w) {
			return failf("expected a warning containing %q, got: %q", w, warnings)
		}
	}
	actual := res.Object
	switch {
	case expect.Unchanged:
		if res.Changed() {
			c.Diff = diff(req.Object, actual)
			return failf("expected no change")
		}
	case expect.Patch != nil:
		got, err := res.Patch.JSON()
		if err != nil {
			return failf("patch: %v", err)
		}
		var gotOps []any
		if err := json.Unmarshal(got, &gotOps); err != nil {
			return failf("patch: %v", err)
		}
		if gotOps == nil {
			gotOps = []any{}
		}
		if !equalExact(expect.Patch, gotOps) {
			c.Diff = diff(expect.Patch, gotOps)
			return failf("the patch differs")
		}
	case expect.ObjectFile != "":
		want, err := oneObject(dir, expect.ObjectFile)
		if err != nil && (!r.Update || !errors.Is(err, os.ErrNotExist)) {
			return failf("expect.objectFile: %v", err)
		}
		if err == nil && equalExact(want.Object, actual) {
			break
		}
		if r.Update {
			c.Passed = true
			c.Message = "updated " + expect.ObjectFile
			return c, &snapshot{c: i, file: resolve(dir, expect.ObjectFile), object: actual}
		}
		c.Diff = diff(want.Object, actual)
		return failf("the mutated object differs from %s", expect.ObjectFile)
	case expect.Object == nil && len(expect.Warnings) > 0:
		// Only warnings are expected: checked above.
	default:
		if expect.Object != nil {
			engine.Normalize(expect.Object)
			if equalExact(expect.Object, actual) {
				break
			}
		}
		if r.Update {
			c.Passed = true
			c.Message = "updated expect.object"
			return c, &snapshot{c: i, object: actual}
		}
		if expect.Object == nil {
			return failf("the case expects nothing: add expect (or run morph test --update to record the mutated object)")
		}
		c.Diff = diff(expect.Object, actual)
		return failf("the mutated object differs from expect.object")
	}
	c.Passed = true
	return c, nil
}

func firstNonEmpty(s ...string) string {
	for _, v := range s {
		if v != "" {
			return v
		}
	}
	return ""
}

func containsAny(list []string, sub string) bool {
	for _, s := range list {
		if strings.Contains(s, sub) {
			return true
		}
	}
	return false
}
