package suite

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"os"

	"github.com/pmezard/go-difflib/difflib"
	yamlv3 "go.yaml.in/yaml/v3"
	"sigs.k8s.io/yaml"
)

// applySnapshots writes the actual objects of snaps into the test file (expect.object
// of their cases, through the YAML node tree so that comments, order and every other
// field stay) or into their objectFiles, and returns the diff of what changed.
func applySnapshots(path string, data []byte, snaps []snapshot) (*Update, error) {
	var out bytes.Buffer
	var diffs bytes.Buffer
	inline := false
	for _, s := range snaps {
		if s.file == "" {
			inline = true
			continue
		}
		before, _ := os.ReadFile(s.file) // a missing file is created
		after, err := yaml.Marshal(s.object)
		if err != nil {
			return nil, err
		}
		if err := os.WriteFile(s.file, after, 0o644); err != nil {
			return nil, err
		}
		diffs.WriteString(unified(s.file, before, after))
	}
	if !inline {
		return &Update{File: path, Diff: diffs.String()}, nil
	}
	dec := yamlv3.NewDecoder(bytes.NewReader(data))
	var docs []*yamlv3.Node
	for {
		var n yamlv3.Node
		if err := dec.Decode(&n); err != nil {
			if errors.Is(err, io.EOF) {
				break
			}
			return nil, fmt.Errorf("%s: %w", path, err)
		}
		if len(n.Content) == 0 || (len(n.Content) == 1 && n.Content[0].Tag == "!!null") {
			continue // an empty document, as policy.Decode skips it
		}
		docs = append(docs, &n)
	}
	for _, s := range snaps {
		if s.file != "" {
			continue
		}
		if s.doc >= len(docs) {
			return nil, fmt.Errorf("%s: document %d not found", path, s.doc+1)
		}
		root := docs[s.doc]
		if root.Kind == yamlv3.DocumentNode && len(root.Content) == 1 {
			root = root.Content[0]
		}
		cases := mapValue(root, "cases")
		if cases == nil || cases.Kind != yamlv3.SequenceNode || s.c >= len(cases.Content) {
			return nil, fmt.Errorf("%s: document %d: cases[%d] not found", path, s.doc+1, s.c)
		}
		c := cases.Content[s.c]
		expect := mapValue(c, "expect")
		if expect == nil {
			expect = &yamlv3.Node{Kind: yamlv3.MappingNode, Tag: "!!map"}
			c.Content = append(c.Content, &yamlv3.Node{Kind: yamlv3.ScalarNode, Tag: "!!str", Value: "expect"}, expect)
		}
		var obj yamlv3.Node
		if err := obj.Encode(s.object); err != nil {
			return nil, err
		}
		if v := mapValue(expect, "object"); v != nil {
			*v = obj
		} else {
			expect.Content = append(expect.Content, &yamlv3.Node{Kind: yamlv3.ScalarNode, Tag: "!!str", Value: "object"}, &obj)
		}
	}
	for i, d := range docs {
		if i > 0 {
			out.WriteString("---\n")
		}
		var b bytes.Buffer
		enc := yamlv3.NewEncoder(&b)
		enc.SetIndent(2)
		if err := enc.Encode(d); err != nil {
			return nil, err
		}
		enc.Close()
		out.Write(b.Bytes())
	}
	if err := os.WriteFile(path, out.Bytes(), 0o644); err != nil {
		return nil, err
	}
	diffs.WriteString(unified(path, data, out.Bytes()))
	return &Update{File: path, Diff: diffs.String()}, nil
}

// mapValue returns the value of key in a mapping node, or nil.
func mapValue(m *yamlv3.Node, key string) *yamlv3.Node {
	if m == nil || m.Kind != yamlv3.MappingNode {
		return nil
	}
	for i := 0; i+1 < len(m.Content); i += 2 {
		if m.Content[i].Value == key {
			return m.Content[i+1]
		}
	}
	return nil
}

func unified(name string, before, after []byte) string {
	if bytes.Equal(before, after) {
		return ""
	}
	text, err := difflib.GetUnifiedDiffString(difflib.UnifiedDiff{
		A: difflib.SplitLines(string(before)), B: difflib.SplitLines(string(after)),
		FromFile: name, ToFile: name + " (updated)", Context: 3,
	})
	if err != nil {
		return err.Error()
	}
	return text
}
