package katalog

import (
	"slices"
	"testing"
)

func TestCABundleCRDs(t *testing.T) {
	b := compileDir(t, "testdata/convert/cronjob-v1-to-v2")
	got := b.Converters[0].(*Converter).CABundleCRDs()
	if want := []string{"cronjobs.demo.orkestra.io"}; !slices.Equal(got, want) {
		t.Errorf("CABundleCRDs() = %v; want %v (the entry with updateCRD: true)", got, want)
	}
	none, err := compileText(t, `apiVersion: orkestra.orkspace.io/v1
kind: Katalog
metadata: {name: k}
spec:
  crds:
    a:
      apiTypes: {group: g.io, version: v2, kind: K, plural: ks}
      conversion: {storageVersion: v1, paths: [{from: v1, to: v2, spec: {}}, {from: v2, to: v1, spec: {}}]}
`, Options{})
	if err != nil {
		t.Fatal(err)
	}
	if got := none.Converters[0].(*Converter).CABundleCRDs(); len(got) != 0 {
		t.Errorf("CABundleCRDs() without updateCRD = %v; want none", got)
	}
}
