package match

import "testing"

func TestGlob(t *testing.T) {
	tests := []struct {
		glob, s string
		want    bool
	}{
		{"*", "anything", true},
		{"*", "", true},
		{"app*", "apps", true},
		{"app*", "myapp", false},
		{"*-system", "kube-system", true},
		{"*-system", "system", false},
		{"*mid*", "a-mid-b", true},
		{"exact", "exact", true},
		{"exact", "exactly", false},
	}
	for _, tt := range tests {
		g, err := NewGlob(tt.glob)
		if err != nil {
			t.Fatal(err)
		}
		if got := g.Match(tt.s); got != tt.want {
			t.Errorf("%q.Match(%q) = %v, want %v", tt.glob, tt.s, got, tt.want)
		}
	}
	if _, err := NewGlob("a*b"); err == nil {
		t.Error("a * in the middle must be rejected")
	}
	if _, err := NewGlobs([]string{"ok", "x*y"}); err == nil || err.Error() != `[1]: "x*y": a * may only stand at the start or the end` {
		t.Errorf("got %v", err)
	}
}

func TestSelector(t *testing.T) {
	sel, err := NewSelector(map[string]any{
		"matchLabels":      map[string]any{"env": "prod"},
		"matchExpressions": []any{map[string]any{"key": "team", "operator": "In", "values": []any{"payments", "billing"}}},
	})
	if err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		labels map[string]any
		want   bool
	}{
		{map[string]any{"env": "prod", "team": "payments"}, true},
		{map[string]any{"env": "prod", "team": "web"}, false},
		{map[string]any{"env": "dev", "team": "billing"}, false},
		{nil, false},
	}
	for _, tt := range tests {
		if got := sel.Matches(tt.labels); got != tt.want {
			t.Errorf("%v: got %v, want %v", tt.labels, got, tt.want)
		}
	}
	var all *Selector
	if !all.Matches(nil) {
		t.Error("the nil selector matches everything")
	}
	for _, bad := range []any{
		map[string]any{"matchLabel": map[string]any{}},
		map[string]any{"matchExpressions": []any{map[string]any{"key": "a", "operator": "Nope"}}},
		"string",
	} {
		if _, err := NewSelector(bad); err == nil {
			t.Errorf("%v: want an error", bad)
		}
	}
}

func TestSelectorDoesNotAllocate(t *testing.T) {
	sel, _ := NewSelector(map[string]any{"matchLabels": map[string]any{"env": "prod"}})
	lbls := map[string]any{"env": "prod"}
	if n := testing.AllocsPerRun(100, func() { sel.Matches(lbls) }); n > 0 {
		t.Errorf("Matches allocates %v times", n)
	}
}
