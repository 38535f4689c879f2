package policy

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
)

// Inputs of issue 11: each was accepted silently or exhausted memory.
func TestDecodeHostileInputs(t *testing.T) {
	tests := []struct{ name, in, wantErr string }{
		{"duplicate key in YAML",
			"apiVersion: mutations.gatekeeper.sh/v1\nkind: Assign\nmetadata: {name: a}\nspec:\n  location: spec.dnsPolicy\n  location: spec.hostNetwork\n",
			`document 1: duplicate key (the API server refuses it too: keep one)`},
		{"duplicate key in JSON",
			`{"apiVersion":"v1","kind":"Pod","metadata":{"name":"a","name":"b"}}`,
			`document 1: duplicate key`},
		{"content after a separator", "apiVersion: v1\nkind: Pod\nmetadata: {name: a}\n--- {a: 1}\n",
			"invalid Yaml document separator: {a: 1}"},
		{"alias string bomb",
			"apiVersion: v1\nkind: ConfigMap\nmetadata: {name: a}\ndata:\n  a: &a " + strings.Repeat("x", 1<<16) + "\n  b: &b [*a, *a, *a, *a, *a, *a, *a, *a, *a, *a, *a, *a, *a, *a, *a, *a]\n  c: &c [*b, *b, *b, *b, *b, *b, *b, *b, *b, *b, *b, *b, *b, *b, *b, *b]\n  d: [*c, *c, *c, *c, *c, *c, *c, *c, *c, *c, *c, *c, *c, *c, *c, *c]\n",
			"YAML aliases expand to more than 1048576 bytes"},
	}
	r := Reader{MaxBytes: 1 << 20}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := r.Decode("f.yaml", []byte(tt.in))
			if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
				t.Fatalf("got %v, want an error with %q", err, tt.wantErr)
			}
		})
	}
}

// A long line is read whole: nothing after it is lost.
func TestDecodeLongLine(t *testing.T) {
	if testing.Short() {
		t.Skip("decodes 70 MiB")
	}
	long := strings.Repeat("x", 70<<20)
	in := "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: a}\ndata: {a: " + long + "}\n---\napiVersion: v1\nkind: ConfigMap\nmetadata: {name: b}\n"
	docs, err := Reader{MaxBytes: 128 << 20}.Decode("f.yaml", []byte(in))
	if err != nil {
		t.Fatal(err)
	}
	if len(docs) != 2 || docs[1].Name() != "b" || len(docs[0].Object["data"].(map[string]any)["a"].(string)) != len(long) {
		t.Fatalf("got %d documents", len(docs))
	}
}

// Integers keep all 64 bits in the YAML path, as in the JSON one.
func TestDecodeExactIntegers(t *testing.T) {
	for _, in := range []string{
		"apiVersion: v1\nkind: Pod\nmetadata: {name: a}\nspec: {a: 9007199254740993, b: 9223372036854775807, c: -9223372036854775808}\n",
		`{"apiVersion":"v1","kind":"Pod","metadata":{"name":"a"},"spec":{"a":9007199254740993,"b":9223372036854775807,"c":-9223372036854775808}}`,
	} {
		docs, err := Decode("f", []byte(in))
		if err != nil {
			t.Fatal(err)
		}
		spec := docs[0].Object["spec"].(map[string]any)
		want := map[string]any{"a": int64(9007199254740993), "b": int64(9223372036854775807), "c": int64(-9223372036854775808)}
		if fmt.Sprint(spec) != fmt.Sprint(want) {
			t.Errorf("got %#v, want %#v", spec, want)
		}
	}
}

func TestReadMaxInput(t *testing.T) {
	r := Reader{MaxBytes: 1 << 10}
	_, err := r.Read([]string{"/dev/zero"}, nil)
	if err == nil || !strings.Contains(err.Error(), "/dev/zero: larger than 1024 bytes: raise --max-input") {
		t.Fatalf("/dev/zero: got %v", err)
	}
	_, err = r.Read([]string{"-"}, strings.NewReader(strings.Repeat("#", 2<<10)))
	if err == nil || !strings.Contains(err.Error(), "-: larger than 1024 bytes") {
		t.Fatalf("stdin: got %v", err)
	}
}

// A FIFO in a folder is never opened: an error for the CLI, a warning for the server.
func TestReadSkipsFIFO(t *testing.T) {
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "a.yaml"), []byte("apiVersion: v1\nkind: Pod\nmetadata: {name: a}\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := syscall.Mkfifo(filepath.Join(dir, "b.yaml"), 0o600); err != nil {
		t.Skip("no FIFOs here:", err)
	}
	_, err := Reader{}.Read([]string{dir}, nil)
	if err == nil || !strings.Contains(err.Error(), "b.yaml: not a regular file") {
		t.Fatalf("without Warn: got %v", err)
	}
	var warnings []string
	docs, err := Reader{Warn: func(s string) { warnings = append(warnings, s) }}.Read([]string{dir}, nil)
	if err != nil || len(docs) != 1 || len(warnings) != 1 || !strings.Contains(warnings[0], "b.yaml: not a regular file") {
		t.Fatalf("with Warn: got %v %v %v", docs, warnings, err)
	}
}
