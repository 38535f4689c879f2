// Package policy reads YAML and JSON documents (policies, objects, context) from files,
// folders and standard input, and routes each policy document to the dialect that
// compiles it. It knows the dialects only through the small Dialect interface.
package policy

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"

	yamlv3 "go.yaml.in/yaml/v3"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
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

// nestedString is the string at fields, "" when absent or not a string.
func nestedString(obj map[string]any, fields ...string) string {
	s, _, _ := unstructured.NestedString(obj, fields...)
	return s
}

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

// DefaultMaxInput bounds each input (a file or standard input) when a Reader gives no
// bound: `-p /dev/zero` fails instead of growing without end.
const DefaultMaxInput int64 = 64 << 20

// Reader reads documents with bounds. The zero value is ready to use.
type Reader struct {
	// MaxBytes bounds each input (a file or standard input), and what the YAML aliases
	// of one document may expand to; 0 means DefaultMaxInput.
	MaxBytes int64
	// Warn, when set, is told about the files of a folder that are not regular files
	// (a FIFO, a device), which are then skipped; when nil such a file is an error.
	// Nothing is read from them either way: a FIFO would block.
	Warn func(string)
}

func (r Reader) limit() int64 {
	if r.MaxBytes <= 0 {
		return DefaultMaxInput
	}
	return r.MaxBytes
}

// Read reads every document of the given paths in order, with a zero Reader.
func Read(paths []string, stdin io.Reader) ([]Document, error) { return Reader{}.Read(paths, stdin) }

// Read reads every document of the given paths in order. A path is a file, a folder
// (its .yaml, .yml and .json files, recursively, in lexical order) or "-" for stdin.
// Documents of kind List are expanded into their items. Empty documents are skipped.
func (r Reader) Read(paths []string, stdin io.Reader) ([]Document, error) {
	var docs []Document
	for _, p := range paths {
		if p == "-" {
			if stdin == nil {
				return nil, errors.New("-: standard input is not available")
			}
			data, err := r.readAll("-", stdin)
			if err != nil {
				return nil, err
			}
			d, err := r.Decode("-", data)
			if err != nil {
				return nil, err
			}
			docs = append(docs, d...)
			continue
		}
		files, err := r.expand(p)
		if err != nil {
			return nil, err
		}
		for _, f := range files {
			data, err := r.readFile(f)
			if err != nil {
				return nil, err
			}
			d, err := r.Decode(f, data)
			if err != nil {
				return nil, err
			}
			docs = append(docs, d...)
		}
	}
	return docs, nil
}

// readAll reads at most the bound, and fails beyond it.
func (r Reader) readAll(name string, in io.Reader) ([]byte, error) {
	data, err := io.ReadAll(io.LimitReader(in, r.limit()+1))
	if err != nil {
		return nil, fmt.Errorf("%s: %w", name, err)
	}
	if int64(len(data)) > r.limit() {
		return nil, fmt.Errorf("%s: larger than %d bytes: raise --max-input to read it", name, r.limit())
	}
	return data, nil
}

func (r Reader) readFile(name string) ([]byte, error) {
	f, err := os.Open(name)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", name, err)
	}
	defer func() { _ = f.Close() }() // read only: nothing to lose
	return r.readAll(name, f)
}

func (r Reader) expand(p string) ([]string, error) {
	info, err := os.Stat(p)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", p, err)
	}
	if !info.IsDir() {
		// A path given by name is read whatever it is (a pipe from <(...) included),
		// within the bound.
		return []string{p}, nil
	}
	var files []string
	err = WalkFiles(p, func(path string, _ fs.DirEntry) error {
		switch strings.ToLower(filepath.Ext(path)) {
		case ".yaml", ".yml", ".json":
		default:
			return nil
		}
		info, err := os.Stat(path) // follows a symbolic link, never opens the file
		if err != nil {
			return err
		}
		if !info.Mode().IsRegular() {
			msg := fmt.Sprintf("%s: not a regular file (%s): skipped", path, info.Mode().Type())
			if r.Warn == nil {
				return errors.New(strings.TrimSuffix(msg, ": skipped") + ": give regular files only")
			}
			r.Warn(msg)
			return nil
		}
		files = append(files, path)
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

// WalkFiles calls visit for each file below the folder root, in lexical order, leaving
// out hidden folders (".git", ".github") below it: what a policy or test folder holds.
func WalkFiles(root string, visit func(path string, d fs.DirEntry) error) error {
	return filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() {
			if path != root && strings.HasPrefix(d.Name(), ".") {
				return filepath.SkipDir
			}
			return nil
		}
		return visit(path, d)
	})
}

// Decode splits data into documents (YAML separated by "---", or one JSON value) and
// decodes each, with a zero Reader.
func Decode(file string, data []byte) ([]Document, error) { return Reader{}.Decode(file, data) }

// Decode splits data into documents (YAML separated by "---", or one JSON value) and
// decodes each. Duplicate keys are refused, as the API server's strict decoding does;
// integers keep all 64 bits.
func (r Reader) Decode(file string, data []byte) ([]Document, error) {
	var docs []Document
	yr := utilyaml.NewYAMLReader(bufio.NewReader(bytes.NewReader(data)))
	for idx := 1; ; idx++ {
		raw, err := yr.Read()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			return nil, fmt.Errorf("%s: document %d: %w", file, idx, err)
		}
		if isBlank(raw) {
			continue
		}
		v, err := r.decodeDocument(raw)
		if err != nil {
			return nil, fmt.Errorf("%s: document %d: %w", file, idx, err)
		}
		if v == nil {
			continue
		}
		obj, ok := v.(map[string]any)
		if !ok {
			return nil, fmt.Errorf("%s: document %d: expected an object with apiVersion and kind, found %s", file, idx, Describe(v))
		}
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

// decodeDocument decodes one YAML or JSON document: strictly (a duplicate key is an
// error), with integers exact (int64; float64 beyond), and with YAML aliases bounded.
func (r Reader) decodeDocument(raw []byte) (any, error) {
	if bytes.IndexByte(raw, '*') >= 0 {
		if err := checkAliases(raw, r.limit()); err != nil {
			return nil, err
		}
	}
	j, err := yaml.YAMLToJSONStrict(raw)
	if err != nil {
		if strings.Contains(err.Error(), "already set in map") {
			return nil, fmt.Errorf("duplicate key (the API server refuses it too: keep one): %w", err)
		}
		return nil, fmt.Errorf("not valid YAML or JSON: %w", err)
	}
	dec := json.NewDecoder(bytes.NewReader(j))
	dec.UseNumber()
	var v any
	if err := dec.Decode(&v); err != nil {
		return nil, fmt.Errorf("not valid YAML or JSON: %w", err)
	}
	return engine.Normalize(v), nil
}

// checkAliases refuses a document whose aliases expand to more than limit bytes (a
// "billion laughs" of scalars passes go-yaml's own count of nodes). Each anchored node
// is measured once, so the check takes time linear in the document.
func checkAliases(raw []byte, limit int64) error {
	var root yamlv3.Node
	if err := yamlv3.Unmarshal(raw, &root); err != nil {
		return nil //nolint:nilerr // the decoder reports the syntax error
	}
	memo := map[*yamlv3.Node]int64{}
	var size func(n *yamlv3.Node, depth int) int64
	size = func(n *yamlv3.Node, depth int) int64 {
		if n == nil || depth > 10000 {
			return limit + 1
		}
		switch n.Kind {
		case yamlv3.AliasNode:
			if v, ok := memo[n.Alias]; ok {
				return v
			}
			memo[n.Alias] = limit + 1 // an alias inside its own anchor
			v := size(n.Alias, depth+1)
			memo[n.Alias] = v
			return v
		case yamlv3.ScalarNode:
			return int64(len(n.Value)) + 2
		}
		total := int64(2)
		for _, c := range n.Content {
			total += size(c, depth+1)
			if total > limit {
				return limit + 1
			}
		}
		return total
	}
	if size(&root, 0) > limit {
		return fmt.Errorf("YAML aliases expand to more than %d bytes: write the values out, or raise --max-input", limit)
	}
	return nil
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

func isBlank(b []byte) bool {
	for _, line := range bytes.Split(b, []byte("\n")) {
		t := bytes.TrimSpace(line)
		if len(t) > 0 && t[0] != '#' {
			return false
		}
	}
	return true
}
