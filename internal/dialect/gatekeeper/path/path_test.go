package path

import (
	"errors"
	"reflect"
	"testing"
)

func TestParseValid(t *testing.T) {
	tests := []struct {
		in    string
		nodes []Node
		print string
	}{
		{"spec.priority", []Node{{Kind: Field, Name: "spec"}, {Kind: Field, Name: "priority"}}, "spec.priority"},
		{"spec.containers[name: foo].imagePullPolicy", []Node{{Kind: Field, Name: "spec"}, {Kind: Field, Name: "containers"}, {Kind: List, Name: "name", Value: "foo"}, {Kind: Field, Name: "imagePullPolicy"}}, "spec.containers[name: foo].imagePullPolicy"},
		{"spec.containers[name:foo].imagePullPolicy", []Node{{Kind: Field, Name: "spec"}, {Kind: Field, Name: "containers"}, {Kind: List, Name: "name", Value: "foo"}, {Kind: Field, Name: "imagePullPolicy"}}, "spec.containers[name: foo].imagePullPolicy"},
		{"spec.containers[name: *].image", []Node{{Kind: Field, Name: "spec"}, {Kind: Field, Name: "containers"}, {Kind: List, Name: "name", Glob: true}, {Kind: Field, Name: "image"}}, "spec.containers[name: *].image"},
		{`spec.containers[name: "foo"].volumeMounts[mountPath: "/my/mount"].readOnly`, []Node{{Kind: Field, Name: "spec"}, {Kind: Field, Name: "containers"}, {Kind: List, Name: "name", Value: "foo"}, {Kind: Field, Name: "volumeMounts"}, {Kind: List, Name: "mountPath", Value: "/my/mount"}, {Kind: Field, Name: "readOnly"}}, "spec.containers[name: foo].volumeMounts[mountPath: /my/mount].readOnly"},
		{`metadata.labels."example.com/cost-center"`, []Node{{Kind: Field, Name: "metadata"}, {Kind: Field, Name: "labels"}, {Kind: Field, Name: "example.com/cost-center"}}, `metadata.labels."example.com/cost-center"`},
		{`metadata.annotations.'a b'`, []Node{{Kind: Field, Name: "metadata"}, {Kind: Field, Name: "annotations"}, {Kind: Field, Name: "a b"}}, `metadata.annotations."a b"`},
		{`a."Use \" to escape and \\\" to escape"`, []Node{{Kind: Field, Name: "a"}, {Kind: Field, Name: `Use " to escape and \" to escape`}}, `a."Use \" to escape and \\\" to escape"`},
		{`a.'it\'s'`, []Node{{Kind: Field, Name: "a"}, {Kind: Field, Name: "it's"}}, `a."it's"`},
		{"spec.containers[name: app].ports[containerPort: 80].protocol", []Node{{Kind: Field, Name: "spec"}, {Kind: Field, Name: "containers"}, {Kind: List, Name: "name", Value: "app"}, {Kind: Field, Name: "ports"}, {Kind: List, Name: "containerPort", Value: int64(80)}, {Kind: Field, Name: "protocol"}}, "spec.containers[name: app].ports[containerPort: 80].protocol"},
		{`x[port: "80"].y`, []Node{{Kind: Field, Name: "x"}, {Kind: List, Name: "port", Value: "80"}, {Kind: Field, Name: "y"}}, `x[port: "80"].y`},
		{`x[k: "*"].y`, []Node{{Kind: Field, Name: "x"}, {Kind: List, Name: "k", Value: "*"}, {Kind: Field, Name: "y"}}, `x[k: "*"].y`},
		{"  spec . containers [ name : * ] ", []Node{{Kind: Field, Name: "spec"}, {Kind: Field, Name: "containers"}, {Kind: List, Name: "name", Glob: true}}, "spec.containers[name: *]"},
		{"spec.containers[name: networking]", []Node{{Kind: Field, Name: "spec"}, {Kind: Field, Name: "containers"}, {Kind: List, Name: "name", Value: "networking"}}, "spec.containers[name: networking]"},
		{"x[k: 007].y", []Node{{Kind: Field, Name: "x"}, {Kind: List, Name: "k", Value: "007"}, {Kind: Field, Name: "y"}}, "x[k: 007].y"},
		{"x[k: -3].y", []Node{{Kind: Field, Name: "x"}, {Kind: List, Name: "k", Value: int64(-3)}, {Kind: Field, Name: "y"}}, "x[k: -3].y"},
		{"données.clé", []Node{{Kind: Field, Name: "données"}, {Kind: Field, Name: "clé"}}, "données.clé"},
		{`a.""`, nil, ""},
	}
	for _, tc := range tests {
		t.Run(tc.in, func(t *testing.T) {
			p, err := Parse(tc.in)
			if tc.nodes == nil {
				if err == nil {
					t.Fatalf("Parse(%q) = %v, want an error", tc.in, p)
				}
				return
			}
			if err != nil {
				t.Fatalf("Parse(%q): %v", tc.in, err)
			}
			if !reflect.DeepEqual(p.Nodes, tc.nodes) {
				t.Fatalf("Parse(%q) = %#v, want %#v", tc.in, p.Nodes, tc.nodes)
			}
			if got := p.String(); got != tc.print {
				t.Fatalf("String() = %q, want %q", got, tc.print)
			}
			again, err := Parse(p.String())
			if err != nil || !reflect.DeepEqual(again, p) {
				t.Fatalf("round trip of %q: %v, %#v", p.String(), err, again)
			}
		})
	}
}

func TestParseInvalid(t *testing.T) {
	tests := []struct {
		in     string
		column int
		msg    string
	}{
		{"", 1, "empty location: give a path such as spec.containers[name: *].image"},
		{"   ", 1, "empty location: give a path such as spec.containers[name: *].image"},
		{"spec.", 5, `the location ends with ".": a field name must follow it`},
		{"spec..x", 6, `unexpected ".": expected a field name`},
		{".spec", 1, `unexpected ".": expected a field name`},
		{"a[x: 1][y: 2]", 8, `unexpected "[": a list must be followed by "." and a field (lists of lists are not supported)`},
		{"spec.containers[*]", 17, `unexpected "*": expected the key field of the list, as in [name: value]`},
		{"spec.containers[name]", 21, `unexpected "]": expected ":" after the key field`},
		{"spec.containers[name: ]", 23, `unexpected "]": expected the key value or *`},
		{"spec.containers[name: x", 16, `unclosed "[": add "]"`},
		{"spec.containers[name: x y]", 25, `unexpected "y": expected "]"`},
		{"spec.containers[name: x]]", 25, `unexpected "]": expected "." or "["`},
		{"spec.containers[name: x]foo", 25, `unexpected "foo": expected "." or "["`},
		{"[name: x].y", 1, `unexpected "[": expected a field name`},
		{`spec."abc`, 6, "unterminated quoted string (add the closing \")"},
		{`spec.'abc\`, 10, "unterminated escape"},
		{`spec\x`, 5, `unexpected "\" outside quotes`},
		{"spec x", 6, `unexpected "x": expected "." or "["`},
		{"spec:x", 5, `unexpected ":": expected "." or "["`},
		{"spec.*", 6, `unexpected "*": expected a field name`},
		{"spec.containers[name: x].]", 26, `unexpected "]": expected a field name`},
		{"é.[", 3, `unexpected "[": expected a field name`},
		{`a.""`, 3, "empty field name"},
		{`a["": x].b`, 3, "empty key field name"},
	}
	for _, tc := range tests {
		t.Run(tc.in, func(t *testing.T) {
			_, err := Parse(tc.in)
			var pe *Error
			if !errors.As(err, &pe) {
				t.Fatalf("Parse(%q) error = %v, want a *Error", tc.in, err)
			}
			if pe.Column != tc.column || pe.Msg != tc.msg {
				t.Fatalf("Parse(%q) = %q at column %d, want %q at column %d", tc.in, pe.Msg, pe.Column, tc.msg, tc.column)
			}
		})
	}
}

func TestTester(t *testing.T) {
	loc := mustParse(t, "spec.containers[name: foo].securityContext.capabilities")
	tests := []struct {
		name  string
		tests []Test
		err   bool
		// allows[depth] for exists=true and exists=false
		exists, missing []bool
	}{
		{name: "none", exists: []bool{true, true, true, true, true}, missing: []bool{true, true, true, true, true}},
		{
			name:    "spec example",
			tests:   []Test{{mustParse(t, "spec.containers[name: foo]"), MustExist}, {mustParse(t, "spec.containers[name: foo].securityContext.capabilities"), MustNotExist}},
			exists:  []bool{true, true, true, true, false},
			missing: []bool{false, false, false, true, true},
		},
		{name: "not a prefix", tests: []Test{{mustParse(t, "spec.initContainers"), MustExist}}, err: true},
		{name: "glob is not a key", tests: []Test{{mustParse(t, "spec.containers[name: *]"), MustExist}}, err: true},
		{name: "contradiction at one depth", tests: []Test{{mustParse(t, "spec"), MustExist}, {mustParse(t, "spec"), MustNotExist}}, err: true},
		{name: "must not exist above must exist", tests: []Test{{mustParse(t, "spec.containers"), MustNotExist}, {mustParse(t, "spec.containers[name: foo]"), MustExist}}, err: true},
		{name: "bad condition", tests: []Test{{mustParse(t, "spec"), None}}, err: true},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			tr, err := NewTester(loc, tc.tests)
			if tc.err {
				if err == nil {
					t.Fatal("want an error")
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			for d := range loc.Nodes {
				if got := tr.Allows(d, true); got != tc.exists[d] {
					t.Errorf("Allows(%d, exists) = %v", d, got)
				}
				if got := tr.Allows(d, false); got != tc.missing[d] {
					t.Errorf("Allows(%d, missing) = %v", d, got)
				}
			}
		})
	}
}

func TestParseCondition(t *testing.T) {
	for in, want := range map[string]Condition{"MustExist": MustExist, "MustNotExist": MustNotExist} {
		if got, err := ParseCondition(in); err != nil || got != want {
			t.Errorf("ParseCondition(%q) = %v, %v", in, got, err)
		}
	}
	if _, err := ParseCondition("mustexist"); err == nil {
		t.Error("want an error for a lower-case condition")
	}
}

func mustParse(t testing.TB, s string) Path {
	t.Helper()
	p, err := Parse(s)
	if err != nil {
		t.Fatal(err)
	}
	return p
}

func FuzzParse(f *testing.F) {
	for _, s := range []string{
		"spec.containers[name: *].image", `metadata.labels."example.com/x"`, `a."Use \" to escape and \\\" to escape"`,
		"x[port: 80].y", `x[k: "80"]`, "a[x: 1][y: 2]", "spec.", "[*]", `a.'b\'c'`, "  a . b [ c : d ] ",
	} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		p, err := Parse(s)
		if err != nil {
			var pe *Error
			if !errors.As(err, &pe) || pe.Column < 1 {
				t.Fatalf("Parse(%q): error without a column: %v", s, err)
			}
			return
		}
		printed := p.String()
		again, err := Parse(printed)
		if err != nil {
			t.Fatalf("Parse(%q) printed %q, which does not parse: %v", s, printed, err)
		}
		if !reflect.DeepEqual(again, p) {
			t.Fatalf("Parse(%q) = %#v, but its print %q parses to %#v", s, p, printed, again)
		}
		if again.String() != printed {
			t.Fatalf("print is not stable: %q then %q", printed, again.String())
		}
	})
}
