// Package policy reads YAML and JSON documents (policies, objects, context) from files,
// folders and standard input, and routes each policy document to the dialect that
// compiles it. It knows the dialects only through the small Dialect interface.
package policy

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"

	"sigs.k8s.io/yaml"

	"github.com/morph-dev/morph/internal/engine"
)

// Document is one document of a file: a Kubernetes object, decoded.
type Document struct {
	// File is the path the document came from, "-" for standard input.
	File string
	// Index is the 1-based number of the document in its file.
	Index int
	// Object is the decoded document, numbers as int64 or float64.
	Object map[string]any
}

// APIVersion returns the document's apiVersion.
func (d Document) APIVersion() string { s, _ := d.Object["apiVersion"].(string); return s }

// Kind returns the document's kind.
func (d Document) Kind() string { s, _ := d.Object["kind"].(string); return s }

// Name returns metadata.name.
func (d Document) Name() string { return nestedString(d.Object, "metadata", "name") }

// Namespace returns metadata.namespace.
func (d Document) Namespace() string { return nestedString(d.Object, "metadata", "namespace") }

// Where names the document for users: `file: document 2 (Assign "always-pull")`.
func (d Document) Where() string {
	s := fmt.Sprintf("%s: document %d", d.File, d.Index)
	if k := d.Kind(); k != "" {
		s += fmt.Sprintf(" (%s %q)", k, d.Name())
	}
	return s
}

// Errorf returns an error located at a field of this document.
func (d Document) Errorf(field, format string, args ...any) error {
	return &Error{Doc: d, Field: field, Err: fmt.Errorf(format, args...)}
}

// Wrap locates err at a field of this document.
func (d Document) Wrap(field string, err error) error {
	if err == nil {
		return nil
	}
	return &Error{Doc: d, Field: field, Err: err}
}

func nestedString(m map[string]any, keys ...string) string {
	var cur any = m
	for _, k := range keys {
		mm, ok := cur.(map[string]any)
		if !ok {
			return ""
		}
		cur = mm[k]
	}
	s, _ := cur.(string)
	return s
}

// Error is a problem with one document, located at a field:
// `policies/pull.yaml: document 2 (Assign "always-pull"): spec.location: unexpected "]" at column 18`.
type Error struct {
	Doc   Document
	Field string
	Err   error
}

func (e *Error) Error() string {
	if e.Field == "" {
		return e.Doc.Where() + ": " + e.Err.Error()
	}
	return e.Doc.Where() + ": " + e.Field + ": " + e.Err.Error()
}

func (e *Error) Unwrap() error { return e.Err }

// Read reads every document of the given paths in order. A path is a file, a folder
// (its .yaml, .yml and .json files, recursively, in lexical order) or "-" for stdin.
// Documents of kind List are expanded into their items. Empty documents are skipped.
func Read(paths []string, stdin io.Reader) ([]Document, error) {
	var docs []Document
	for _, p := range paths {
		if p == "-" {
			if stdin == nil {
				return nil, errors.New("-: standard input is not available")
			}
			data, err := io.ReadAll(stdin)
			if err != nil {
				return nil, fmt.Errorf("-: reading standard input: %w", err)
			}
			d, err := Decode("-", data)
			if err != nil {
				return nil, err
			}
			docs = append(docs, d...)
			continue
		}
		files, err := expand(p)
		if err != nil {
			return nil, err
		}
		for _, f := range files {
			data, err := os.ReadFile(f)
			if err != nil {
				return nil, fmt.Errorf("%s: %w", f, err)
			}
			d, err := Decode(f, data)
			if err != nil {
				return nil, err
			}
			docs = append(docs, d...)
		}
	}
	return docs, nil
}

func expand(p string) ([]string, error) {
	info, err := os.Stat(p)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", p, err)
	}
	if !info.IsDir() {
		return []string{p}, nil
	}
	var files []string
	err = filepath.WalkDir(p, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() {
			if path != p && strings.HasPrefix(d.Name(), ".") {
				return filepath.SkipDir
			}
			return nil
		}
		switch strings.ToLower(filepath.Ext(path)) {
		case ".yaml", ".yml", ".json":
			files = append(files, path)
		}
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("%s: %w", p, err)
	}
	slices.Sort(files)
	if len(files) == 0 {
		return nil, fmt.Errorf("%s: the folder has no .yaml, .yml or .json files", p)
	}
	return files, nil
}

// Decode splits data into documents (YAML separated by "---", or one JSON value) and
// decodes each.
func Decode(file string, data []byte) ([]Document, error) {
	var docs []Document
	for i, raw := range splitYAML(data) {
		idx := i + 1
		if isBlank(raw) {
			continue
		}
		var v any
		if err := yaml.Unmarshal(raw, &v); err != nil {
			return nil, fmt.Errorf("%s: document %d: not valid YAML or JSON: %w", file, idx, err)
		}
		if v == nil {
			continue
		}
		obj, ok := v.(map[string]any)
		if !ok {
			return nil, fmt.Errorf("%s: document %d: expected an object with apiVersion and kind, found %s", file, idx, Describe(v))
		}
		engine.Normalize(obj)
		if items, ok := obj["items"].([]any); ok && strings.HasSuffix(stringOf(obj["kind"]), "List") {
			for j, it := range items {
				m, ok := it.(map[string]any)
				if !ok {
					return nil, fmt.Errorf("%s: document %d: items[%d]: expected an object, found %s", file, idx, j, Describe(it))
				}
				docs = append(docs, Document{File: file, Index: idx, Object: m})
			}
			continue
		}
		docs = append(docs, Document{File: file, Index: idx, Object: obj})
	}
	return docs, nil
}

func stringOf(v any) string { s, _ := v.(string); return s }

// Describe names the JSON type of a decoded value for error messages: "a string",
// "an object", "null".
func Describe(v any) string {
	switch v.(type) {
	case nil:
		return "null"
	case map[string]any:
		return "an object"
	case []any:
		return "a list"
	case string:
		return "a string"
	case bool:
		return "a boolean"
	case int64, float64, int:
		return "a number"
	}
	return fmt.Sprintf("a %T", v)
}

// UnknownField returns the first key of m (in sorted order) that is not in allowed,
// for strict reading of policy fields.
func UnknownField(m map[string]any, allowed ...string) (string, bool) {
	var unknown []string
	for k := range m {
		if !slices.Contains(allowed, k) {
			unknown = append(unknown, k)
		}
	}
	if len(unknown) == 0 {
		return "", false
	}
	slices.Sort(unknown)
	return unknown[0], true
}

// splitYAML splits a multi-document YAML stream at lines that are exactly "---" (with
// optional trailing text after a space, as in "--- # comment").
func splitYAML(data []byte) [][]byte {
	var docs [][]byte
	var cur bytes.Buffer
	sc := bufio.NewScanner(bytes.NewReader(data))
	sc.Buffer(make([]byte, 64*1024), 64*1024*1024)
	for sc.Scan() {
		line := sc.Bytes()
		if bytes.Equal(bytes.TrimRight(line, " \t\r"), []byte("---")) || bytes.HasPrefix(line, []byte("--- ")) {
			docs = append(docs, append([]byte(nil), cur.Bytes()...))
			cur.Reset()
			continue
		}
		cur.Write(line)
		cur.WriteByte('\n')
	}
	docs = append(docs, cur.Bytes())
	return docs
}

func isBlank(b []byte) bool {
	for _, line := range bytes.Split(b, []byte("\n")) {
		t := bytes.TrimSpace(line)
		if len(t) > 0 && t[0] != '#' {
			return false
		}
	}
	return true
}
