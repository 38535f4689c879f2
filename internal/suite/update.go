package suite

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"os"
	"slices"
	"strings"

	"github.com/pmezard/go-difflib/difflib"
	yamlv3 "go.yaml.in/yaml/v3"
	"sigs.k8s.io/yaml"
)

// applySnapshots writes the actual objects of snaps into their objectFiles or into the
// test file's expect.object, and returns the diff of what changed. The test file is
// edited as text, at the lines the YAML parser places each case at, so that its
// comments, layout and every other field stay as they were: an existing expect.object
// is replaced; a case without one gets it (its expect rewritten, or added).
func applySnapshots(path string, data []byte, snaps []snapshot) (*Update, error) {
	var diffs strings.Builder
	var inline []snapshot
	for _, s := range snaps {
		if s.file == "" {
			inline = append(inline, s)
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
	if len(inline) > 0 {
		after, err := spliceSnapshots(data, inline)
		if err != nil {
			return nil, fmt.Errorf("%s: %w", path, err)
		}
		if err := os.WriteFile(path, after, 0o644); err != nil {
			return nil, err
		}
		diffs.WriteString(unified(path, data, after))
	}
	return &Update{File: path, Diff: diffs.String()}, nil
}

// edit replaces lines [from, to] (1-based, inclusive; to = from-1 inserts before from)
// with text.
type edit struct {
	from, to int
	text     string
}

func spliceSnapshots(data []byte, snaps []snapshot) ([]byte, error) {
	lines := strings.SplitAfter(string(data), "\n")
	if len(lines) > 0 && lines[len(lines)-1] == "" {
		lines = lines[:len(lines)-1]
	}
	if n := len(lines); n > 0 && !strings.HasSuffix(lines[n-1], "\n") {
		// Text inserted after the last line starts on a line of its own.
		lines[n-1] += "\n"
	}
	docs, starts, err := parseNodes(data, lines)
	if err != nil {
		return nil, err
	}
	end := func(n *yamlv3.Node) int { return endLine(n, starts, lines) }
	var edits []edit
	for _, s := range snaps {
		if s.doc >= len(docs) {
			return nil, fmt.Errorf("document %d not found", s.doc+1)
		}
		cases := mapValue(docs[s.doc], "cases")
		if cases == nil || cases.Kind != yamlv3.SequenceNode || s.c >= len(cases.Content) {
			return nil, fmt.Errorf("document %d: cases[%d] not found", s.doc+1, s.c)
		}
		c := cases.Content[s.c]
		if c.Kind != yamlv3.MappingNode || len(c.Content) == 0 || c.Style&yamlv3.FlowStyle != 0 {
			return nil, fmt.Errorf("document %d: cases[%d] is not a block mapping", s.doc+1, s.c)
		}
		expectKey, expect := mapEntry(c, "expect")
		switch {
		case expect != nil && expect.Kind == yamlv3.MappingNode && expect.Style&yamlv3.FlowStyle == 0 && len(expect.Content) > 0:
			key, obj := mapEntry(expect, "object")
			if key != nil {
				edits = append(edits, edit{key.Line, end(obj), block("object", s.object, key.Column-1)})
			} else {
				first := expect.Content[0]
				edits = append(edits, edit{end(expect) + 1, end(expect), block("object", s.object, first.Column-1)})
			}
		case expect != nil:
			// An empty or flow-style expect: rewritten whole, with the object.
			var old map[string]any
			if err := expect.Decode(&old); err != nil || old == nil {
				old = map[string]any{}
			}
			old["object"] = s.object
			edits = append(edits, edit{expectKey.Line, end(expect), block("expect", old, expectKey.Column-1)})
		default:
			first := c.Content[0]
			edits = append(edits, edit{end(c) + 1, end(c), block("expect", map[string]any{"object": s.object}, first.Column-1)})
		}
	}
	slices.SortFunc(edits, func(a, b edit) int { return b.from - a.from })
	for _, e := range edits {
		tail := slices.Clone(lines[e.to:])
		lines = append(append(lines[:e.from-1], e.text), tail...)
	}
	return []byte(strings.Join(lines, "")), nil
}

// parseNodesOnly parses every document of data (for checking what was written).
func parseNodesOnly(data []byte) ([]*yamlv3.Node, error) {
	docs, _, err := parseNodes(data, strings.SplitAfter(string(data), "\n"))
	return docs, err
}

// parseNodes parses every document, returning each document's root mapping and the
// sorted start lines of every node and document separator.
func parseNodes(data []byte, lines []string) ([]*yamlv3.Node, []int, error) {
	dec := yamlv3.NewDecoder(bytes.NewReader(data))
	var docs []*yamlv3.Node
	var starts []int
	for {
		var n yamlv3.Node
		if err := dec.Decode(&n); err != nil {
			if errors.Is(err, io.EOF) {
				break
			}
			return nil, nil, err
		}
		root := &n
		if root.Kind == yamlv3.DocumentNode && len(root.Content) == 1 {
			root = root.Content[0]
		}
		if root.Kind != yamlv3.MappingNode {
			continue // an empty document, which policy.Decode skips too
		}
		docs = append(docs, root)
		walk(root, func(m *yamlv3.Node) { starts = append(starts, m.Line) })
	}
	for i, l := range lines {
		if strings.HasPrefix(l, "---") {
			starts = append(starts, i+1)
		}
	}
	slices.Sort(starts)
	return docs, slices.Compact(starts), nil
}

func walk(n *yamlv3.Node, f func(*yamlv3.Node)) {
	f(n)
	for _, c := range n.Content {
		walk(c, f)
	}
}

// endLine is the last line of a block node: the line before the next node that starts
// after all of its own, without the blank and comment lines that precede that node.
func endLine(n *yamlv3.Node, starts []int, lines []string) int {
	last := n.Line
	walk(n, func(m *yamlv3.Node) { last = max(last, m.Line) })
	end := len(lines)
	if i, found := slices.BinarySearch(starts, last+1); found || i < len(starts) {
		end = starts[i] - 1
	}
	for end > last {
		if t := strings.TrimSpace(lines[end-1]); t == "" || strings.HasPrefix(t, "#") {
			end--
			continue
		}
		break
	}
	return end
}

// block renders "key:" and value as YAML at the given indentation.
func block(key string, value any, indent int) string {
	body, err := yaml.Marshal(value)
	if err != nil {
		body = []byte(fmt.Sprintf("# %v\n", err))
	}
	pad := strings.Repeat(" ", indent)
	var b strings.Builder
	b.WriteString(pad + key + ":\n")
	for _, line := range strings.Split(strings.TrimRight(string(body), "\n"), "\n") {
		b.WriteString(pad + "  " + line + "\n")
	}
	return b.String()
}

// mapEntry returns the key and value nodes of key in a mapping node.
func mapEntry(m *yamlv3.Node, key string) (*yamlv3.Node, *yamlv3.Node) {
	if m == nil || m.Kind != yamlv3.MappingNode {
		return nil, nil
	}
	for i := 0; i+1 < len(m.Content); i += 2 {
		if m.Content[i].Value == key {
			return m.Content[i], m.Content[i+1]
		}
	}
	return nil, nil
}

func mapValue(m *yamlv3.Node, key string) *yamlv3.Node {
	_, v := mapEntry(m, key)
	return v
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
