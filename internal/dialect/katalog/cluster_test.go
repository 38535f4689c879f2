package katalog

import "testing"

func TestCABundleCRDs(t *testing.T) {
	b := compileDir(t, "testdata/convert/cronjob-v1-to-v2")
	if c := b.Converters[0]; !c.UpdateCRD || c.CRD != "cronjobs.demo.orkestra.io" {
		t.Errorf("converter CRD %q, UpdateCRD %v; want cronjobs.demo.orkestra.io (the entry with updateCRD: true)", c.CRD, c.UpdateCRD)
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
	if c := none.Converters[0]; c.UpdateCRD {
		t.Errorf("UpdateCRD without updateCRD: %+v", c)
	}
}
