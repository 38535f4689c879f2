package suite

import (
	"testing"

	"github.com/morph-dev/morph/internal/policy"
)

// FuzzDecodeMorphTest feeds arbitrary documents to the morph test decoder: it returns a
// test or an error, never panics.
func FuzzDecodeMorphTest(f *testing.F) {
	for _, seed := range []string{
		"apiVersion: morph.dev/v1alpha1\nkind: Test\nmetadata: {name: t}\npolicies: [p.yaml]\ncases:\n- name: c\n  input: x.yaml\n  expect: {unchanged: true}\n",
		"apiVersion: morph.dev/v1alpha1\nkind: Test\nmetadata: {name: t}\npolicies: [p.yaml]\nloadError: x\n",
		"apiVersion: morph.dev/v1alpha1\nkind: Test\nmetadata: {name: t}\npolicies: [p]\ncases: [{name: c, object: {a: 1}, expect: {object: {}, patch: []}}]\n",
		"apiVersion: morph.dev/v1alpha1\nkind: Other\n",
	} {
		f.Add(seed)
	}
	f.Fuzz(func(t *testing.T, src string) {
		docs, err := policy.Decode("t.yaml", []byte(src))
		if err != nil {
			return
		}
		for _, d := range docs {
			if tt, err := decodeMorphTest(d); err == nil && tt.Metadata.Name == "" {
				t.Fatal("a decoded test has a name")
			}
		}
	})
}

// FuzzSplice feeds arbitrary YAML to --update's text splicing: it edits or refuses,
// never panics, and what it writes still parses.
func FuzzSplice(f *testing.F) {
	for _, seed := range []string{
		"apiVersion: morph.dev/v1alpha1\nkind: Test\ncases:\n- name: a\n  object: {x: 1}\n",
		"cases:\n- name: a\n  expect:\n    object:\n      x: 1\n    warnings: []\n# c\n- name: b\n  expect: {}\n",
		"---\ncases:\n  - name: a\n    expect:\n      patch: []\n---\n",
		"cases: [{name: a}]\n",
	} {
		f.Add(seed, 0)
	}
	f.Fuzz(func(t *testing.T, src string, c int) {
		if c < 0 || c > 3 {
			return
		}
		out, err := spliceSnapshots([]byte(src), []snapshot{{c: c, object: map[string]any{"k": "v"}}})
		if err != nil {
			return
		}
		if _, err := parseNodesOnly(out); err != nil {
			t.Fatalf("the spliced file does not parse: %v\n--- in\n%s\n--- out\n%s", err, src, out)
		}
	})
}
