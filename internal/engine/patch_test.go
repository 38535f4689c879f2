package engine

import (
	"encoding/json"
	"math/rand/v2"
	"reflect"
	"strconv"
	"testing"

	jsonpatch "github.com/evanphx/json-patch"
)

func decode(t testing.TB, s string) map[string]any {
	t.Helper()
	var m map[string]any
	if err := json.Unmarshal([]byte(s), &m); err != nil {
		t.Fatal(err)
	}
	return Normalize(m).(map[string]any)
}

// applyWithLibrary applies p to from with the JSON-patch library the API server uses
// and decodes the result.
func applyWithLibrary(t testing.TB, from map[string]any, p Patch) map[string]any {
	t.Helper()
	doc, err := json.Marshal(from)
	if err != nil {
		t.Fatal(err)
	}
	pb, err := p.JSON()
	if err != nil {
		t.Fatal(err)
	}
	decoded, err := jsonpatch.DecodePatch(pb)
	if err != nil {
		t.Fatalf("patch %s does not decode: %v", pb, err)
	}
	out, err := decoded.Apply(doc)
	if err != nil {
		t.Fatalf("patch %s does not apply to %s: %v", pb, doc, err)
	}
	var m map[string]any
	if err := json.Unmarshal(out, &m); err != nil {
		t.Fatal(err)
	}
	return Normalize(m).(map[string]any)
}

func TestDiff(t *testing.T) {
	tests := []struct {
		name, from, to, want string
	}{
		{"equal", `{"a":1}`, `{"a":1}`, `[]`},
		{"add with escaping", `{"metadata":{}}`, `{"metadata":{"labels":{"app.kubernetes.io/name":"x","a~b":"y"}}}`,
			`[{"op":"add","path":"/metadata/labels","value":{"app.kubernetes.io/name":"x","a~b":"y"}}]`},
		{"replace and remove", `{"a":1,"b":"x"}`, `{"a":2}`, `[{"op":"replace","path":"/a","value":2},{"op":"remove","path":"/b"}]`},
		{"numbers compare by value", `{"a":1}`, `{"a":1.0}`, `[]`},
		{"null value kept", `{"a":1}`, `{"a":null}`, `[{"op":"replace","path":"/a","value":null}]`},
		{"append to list", `{"l":["a","b"]}`, `{"l":["a","b","c"]}`, `[{"op":"add","path":"/l/2","value":"c"}]`},
		{"remove from middle", `{"l":["a","--debug","b"]}`, `{"l":["a","b"]}`, `[{"op":"remove","path":"/l/1"}]`},
		{"change an element in place", `{"c":[{"name":"a","x":1},{"name":"b"}]}`, `{"c":[{"name":"a","x":2},{"name":"b"}]}`,
			`[{"op":"replace","path":"/c/0/x","value":2}]`},
		{"add element and change another", `{"c":[{"name":"a"}]}`, `{"c":[{"name":"a","p":"Always"},{"name":"b"}]}`,
			`[{"op":"add","path":"/c/0/p","value":"Always"},{"op":"add","path":"/c/1","value":{"name":"b"}}]`},
		{"type change", `{"a":{"b":1}}`, `{"a":[1]}`, `[{"op":"replace","path":"/a","value":[1]}]`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			from, to := decode(t, tt.from), decode(t, tt.to)
			p := Diff(from, to)
			got, _ := p.JSON()
			if string(got) != tt.want {
				t.Fatalf("got  %s\nwant %s", got, tt.want)
			}
			if applied := applyWithLibrary(t, from, p); !reflect.DeepEqual(applied, to) {
				t.Fatalf("applied %v, want %v", applied, to)
			}
		})
	}
}

// randomValue builds a small random JSON value; keys include the characters JSON
// Pointer must escape.
func randomValue(r *rand.Rand, depth int) any {
	keys := []string{"a", "b", "a/b", "m~n", "~1", "", "labels", "x.y"}
	switch k := r.IntN(8); {
	case depth <= 0 || k < 3:
		switch r.IntN(5) {
		case 0:
			return int64(r.IntN(4))
		case 1:
			return keys[r.IntN(len(keys))]
		case 2:
			return r.IntN(2) == 0
		case 3:
			return nil
		}
		return 1.5
	case k < 6:
		m := map[string]any{}
		for i := r.IntN(4); i > 0; i-- {
			m[keys[r.IntN(len(keys))]] = randomValue(r, depth-1)
		}
		return m
	default:
		l := make([]any, r.IntN(5))
		for i := range l {
			l[i] = randomValue(r, depth-1)
		}
		return l
	}
}

// mutateRandomly derives a changed copy of v.
func mutateRandomly(r *rand.Rand, v any, depth int) any {
	switch x := v.(type) {
	case map[string]any:
		c := map[string]any{}
		for k, e := range x {
			switch r.IntN(6) {
			case 0: // drop
			case 1:
				c[k] = randomValue(r, depth)
			default:
				c[k] = mutateRandomly(r, e, depth-1)
			}
		}
		if r.IntN(3) == 0 {
			c["new"+strconv.Itoa(r.IntN(3))] = randomValue(r, depth)
		}
		return c
	case []any:
		var c []any
		for _, e := range x {
			switch r.IntN(6) {
			case 0:
			case 1:
				c = append(c, randomValue(r, depth), mutateRandomly(r, e, depth-1))
			default:
				c = append(c, mutateRandomly(r, e, depth-1))
			}
		}
		if c == nil {
			c = []any{}
		}
		return c
	}
	if r.IntN(3) == 0 {
		return randomValue(r, depth)
	}
	return v
}

func checkPatchProperty(t *testing.T, seed uint64) {
	r := rand.New(rand.NewPCG(seed, seed^0x9e3779b97f4a7c15))
	from, ok := randomValue(r, 4).(map[string]any)
	if !ok {
		from = map[string]any{"root": randomValue(r, 3)}
	}
	to, _ := mutateRandomly(r, from, 4).(map[string]any)
	// Round-trip both through JSON so they hold what the library will produce.
	from = applyWithLibrary(t, from, nil)
	to = applyWithLibrary(t, to, nil)
	p := Diff(from, to)
	if got := applyWithLibrary(t, from, p); !Equal(got, to) {
		pb, _ := p.JSON()
		t.Fatalf("seed %d: patch %s\nfrom %v\ngot  %v\nwant %v", seed, pb, from, got, to)
	}
}

func TestDiffPatchProperty(t *testing.T) {
	for seed := uint64(0); seed < 3000; seed++ {
		checkPatchProperty(t, seed)
	}
}

// FuzzDiffPatchProperty checks that the patch Diff computes, applied with
// github.com/evanphx/json-patch to the original, gives the final object.
func FuzzDiffPatchProperty(f *testing.F) {
	for _, s := range []uint64{1, 7, 42, 1 << 40} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, seed uint64) { checkPatchProperty(t, seed) })
}

// FuzzDiffJSON takes two JSON documents directly.
func FuzzDiffJSON(f *testing.F) {
	f.Add(`{"a":[1,2,3]}`, `{"a":[2,3,4],"b/c":{"~":null}}`)
	f.Add(`{"spec":{"containers":[{"name":"a"}]}}`, `{"spec":{"containers":[{"name":"b"},{"name":"a","x":1}]}}`)
	f.Fuzz(func(t *testing.T, a, b string) {
		var from, to map[string]any
		if json.Unmarshal([]byte(a), &from) != nil || json.Unmarshal([]byte(b), &to) != nil || from == nil || to == nil {
			return
		}
		Normalize(from)
		Normalize(to)
		p := Diff(from, to)
		if got := applyWithLibrary(t, from, p); !Equal(got, Normalize(to)) {
			pb, _ := p.JSON()
			t.Fatalf("patch %s from %s gives %v, want %s", pb, a, got, b)
		}
	})
}

func TestWriterCopiesOnce(t *testing.T) {
	orig := map[string]any{"spec": map[string]any{"a": 1}}
	w := NewWriter()
	c1 := w.Map(orig)
	c2 := w.Map(c1)
	if mapID(c1) != mapID(c2) || mapID(c1) == mapID(orig) {
		t.Fatal("Map must copy a foreign map once and then return the owned copy")
	}
	l := w.List([]any{1, 2}, 1)
	l = append(l, 3)
	if l2 := w.List(l, 0); listID(l2) != listID(l) {
		t.Fatal("List must return an owned list as is")
	}
	w.startInvocation()
	if c3 := w.Map(c1); mapID(c3) != mapID(c1) {
		t.Fatal("ownership lasts across invocations of one run")
	}
	w.reset()
	if c3 := w.Map(c1); mapID(c3) == mapID(c1) {
		t.Fatal("after reset (a new run), containers must be copied again")
	}
	// Past the scan limit ownership moves to a map and still answers.
	var ms []map[string]any
	for i := 0; i < 3*ownedScanLimit; i++ {
		ms = append(ms, w.NewMap(1))
	}
	for _, m := range ms {
		if mapID(w.Map(m)) != mapID(m) {
			t.Fatal("an owned map was copied after the switch to the owned set")
		}
	}
}

func TestAppendKeyMatchesPointer(t *testing.T) {
	for _, segs := range [][]string{{"spec", "containers"}, {"metadata", "labels", "a/b~c"}, {""}, {"~1", "/"}} {
		var b []byte
		for _, s := range segs {
			b = AppendKey(b, s)
		}
		if string(b) != Pointer(segs...) {
			t.Errorf("%q: AppendKey gives %q, Pointer %q", segs, b, Pointer(segs...))
		}
	}
}
