package katalog

import "slices"

// CABundleCRDs names the CustomResourceDefinitions (<plural>.<group>) whose conversion
// caBundle morph keeps current in a cluster: those of the converter's entries that
// declare updateCRD: true (spec 003). The cluster code finds this method through a small
// interface of its own, as the webhook server finds the methods of server.go.
func (c *Converter) CABundleCRDs() []string {
	var out []string
	for _, e := range c.members {
		if e.Conversion != nil && e.Conversion.UpdateCRD {
			out = append(out, e.APITypes.Plural+"."+e.APITypes.Group)
		}
	}
	slices.Sort(out)
	return slices.Compact(out)
}
