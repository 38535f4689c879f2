package gatekeeper

import "testing"

// FuzzImageIs holds image.is to what it stands for: img.String() == ref.
func FuzzImageIs(f *testing.F) {
	for _, seed := range []string{"", "nginx", "nginx:1.25", "gcr.io/app@sha256:abc", "localhost/x", "a.b:5000/p/q:t", ":v2", "gcr.io/", "reg.io//x"} {
		f.Add(seed, "registry.example.internal", "", "")
	}
	f.Fuzz(func(t *testing.T, ref, domain, path, tag string) {
		img := parseImage(ref)
		if got, want := img.is(ref), img.String() == ref; got != want {
			t.Fatalf("parseImage(%q).is = %v, String() %q", ref, got, img.String())
		}
		other := image{domain: domain, path: path, tag: tag}
		if got, want := other.is(ref), other.String() == ref; got != want {
			t.Fatalf("%+v.is(%q) = %v, String() %q", other, ref, got, other.String())
		}
	})
}
