package katalog

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"time"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"

	"github.com/morph-dev/morph/internal/engine"
	"github.com/morph-dev/morph/internal/policy"

	"k8s.io/apimachinery/pkg/util/validation/field"
)

// pathField is one spec field a conversion path computes.
type pathField struct {
	field Path // from the object's root: spec.<key>
	value *Value
	typ   string // schema type at the target version, "" when unknown
}

// Converter converts the objects of one group and kind between the versions the
// conversion paths of a Katalog's entries declare (spec 003).
//
// A conversion copies the object, sets apiVersion to the target and computes the
// fields the path declares from the source object; everything else, status included,
// passes through unchanged, and metadata is never touched. A field whose expression
// resolves to nothing (an absent field, null or "") is left absent, so that absent
// fields stay absent in both directions. When no path leads directly from the object's
// version to the target, the conversion goes through the storage version.
type Converter struct {
	id      engine.ID
	gk      schema.GroupKind
	storage string
	owner   *Entry
	members []*Entry
	paths   map[[2]string]*ConversionPath
}

// converters groups the entries with a conversion by group and kind, one Converter each.
func (c *compiler) converters(entries []*Entry) {
	byGK := map[schema.GroupKind][]*Entry{}
	var order []schema.GroupKind
	for _, e := range entries {
		if e.Conversion == nil {
			continue
		}
		gk := schema.GroupKind{Group: e.APITypes.Group, Kind: e.APITypes.Kind}
		if _, ok := byGK[gk]; !ok {
			order = append(order, gk)
		}
		byGK[gk] = append(byGK[gk], e)
	}
	for _, gk := range order {
		members := byGK[gk]
		conv := &Converter{gk: gk, members: members, paths: map[[2]string]*ConversionPath{}}
		ok := true
		for _, e := range members {
			if e.Conversion.StorageVersion != "" {
				if conv.storage != "" && conv.storage != e.Conversion.StorageVersion {
					c.errs = append(c.errs, e.doc.Err(field.Invalid(rel(e.field).Child("conversion", "storageVersion"), e.Conversion.StorageVersion, fmt.Sprintf("differs from %q declared by entry %q of the same kind %s; declare one storage version", conv.storage, conv.owner.Name, gk))))
					ok = false
					continue
				}
				conv.storage = e.Conversion.StorageVersion
			}
			for i, p := range e.Conversion.Paths {
				key := [2]string{p.From, p.To}
				if _, dup := conv.paths[key]; dup {
					c.errs = append(c.errs, e.doc.Err(policy.Duplicate(rel(e.field).Child("conversion", "paths").Index(i), p.From+" to "+p.To, fmt.Sprintf("the path from %s to %s of %s is declared by two entries; keep one", p.From, p.To, gk))))
					ok = false
					continue
				}
				conv.paths[key] = p
			}
			if len(e.Conversion.Paths) > 0 && conv.owner == nil {
				conv.owner = e
			}
			if e.Conversion.StorageVersion != "" && conv.owner == nil {
				conv.owner = e
			}
		}
		if !ok {
			continue
		}
		if len(conv.paths) == 0 {
			for _, e := range members {
				c.warn(e.doc, e.field+".conversion", "participant: no entry of %s declares conversion paths, so nothing converts", gk)
			}
			continue
		}
		conv.id = conv.owner.id
		c.bundle.Converters = append(c.bundle.Converters, conv.compiled())
	}
}

// Convert returns obj at toAPIVersion ("group/version"). obj is not modified; the
// result shares unchanged subtrees with it, so treat both as read-only. The time taken
// is recorded in the statistics of the entry of the target version (the owner's when
// no entry declares that version).
func (c *Converter) Convert(ctx context.Context, obj map[string]any, toAPIVersion string) (map[string]any, error) {
	start := time.Now()
	out, to, err := c.convert(ctx, obj, toAPIVersion)
	c.statsFor(to).Record(time.Since(start), err)
	return out, err
}

func (c *Converter) statsFor(version string) *ConversionStats {
	for _, e := range c.members {
		if e.APITypes.Version == version {
			return e.stats
		}
	}
	return c.owner.stats
}

func (c *Converter) convert(ctx context.Context, obj map[string]any, toAPIVersion string) (map[string]any, string, error) {
	apiVersion, _ := obj["apiVersion"].(string)
	kind, _ := obj["kind"].(string)
	from, err := schema.ParseGroupVersion(apiVersion)
	if err != nil {
		return nil, "", fmt.Errorf("converting %s: apiVersion: %w", objectName(obj), err)
	}
	to, err := schema.ParseGroupVersion(toAPIVersion)
	if err != nil {
		return nil, "", fmt.Errorf("converting %s: target apiVersion: %w", objectName(obj), err)
	}
	if from.Group != c.gk.Group || kind != c.gk.Kind || to.Group != c.gk.Group {
		return nil, to.Version, fmt.Errorf("converting %s from %s to %s: this converter converts %s only", objectName(obj), apiVersion, toAPIVersion, c.gk)
	}
	steps, err := c.route(from.Version, to.Version)
	if err != nil {
		return nil, to.Version, fmt.Errorf("converting %s from %s to %s: %w", objectName(obj), apiVersion, toAPIVersion, err)
	}
	cur := obj
	for _, p := range steps {
		if err := ctx.Err(); err != nil {
			return nil, to.Version, fmt.Errorf("converting %s: %w", objectName(obj), err)
		}
		next, err := c.apply(ctx, p, cur)
		if err != nil {
			return nil, to.Version, fmt.Errorf("converting %s from %s to %s: %w", objectName(obj), p.From, p.To, err)
		}
		cur = next
	}
	return cur, to.Version, nil
}

// route finds the paths from one version to another: none when they are equal, the
// direct path, or the two paths through the storage version.
func (c *Converter) route(from, to string) ([]*ConversionPath, error) {
	if from == to {
		return nil, nil
	}
	if p, ok := c.paths[[2]string{from, to}]; ok {
		return []*ConversionPath{p}, nil
	}
	if s := c.storage; s != "" && s != from && s != to {
		a, okA := c.paths[[2]string{from, s}]
		b, okB := c.paths[[2]string{s, to}]
		if okA && okB {
			return []*ConversionPath{a, b}, nil
		}
	}
	declared := make([]string, 0, len(c.paths))
	for k := range c.paths {
		declared = append(declared, k[0]+"->"+k[1])
	}
	slices.Sort(declared)
	via := ""
	if c.storage != "" {
		via = " or through the storage version " + c.storage
	}
	return nil, fmt.Errorf("no conversion path from %s to %s%s: the declared paths are %s", from, to, via, strings.Join(declared, ", "))
}

// apply runs one path on src.
func (c *Converter) apply(ctx context.Context, p *ConversionPath, src map[string]any) (map[string]any, error) {
	w := engine.NewWriter()
	out := w.Map(src)
	if c.gk.Group == "" {
		out["apiVersion"] = p.To
	} else {
		out["apiVersion"] = c.gk.Group + "/" + p.To
	}
	for _, f := range p.fields {
		v, err := f.value.Eval(ctx, src, c.owner.budget)
		if err != nil {
			return nil, fmt.Errorf("%s: resolving %q: %w", f.field, f.value.raw, err)
		}
		if v == nil || v == "" {
			out, _ = f.field.remove(out, w)
			continue
		}
		if v, err = convertToType(v, f.typ); err != nil {
			return nil, fmt.Errorf("%s: %w", f.field, err)
		}
		if out, err = f.field.set(out, ownCopy(v), w); err != nil {
			return nil, fmt.Errorf("%s: %w", f.field, err)
		}
	}
	return out, nil
}

// objectName names an object for messages: CronJob default/nightly.
func objectName(obj map[string]any) string {
	kind, _, _ := unstructured.NestedString(obj, "kind")
	ns, _, _ := unstructured.NestedString(obj, "metadata", "namespace")
	name, _, _ := unstructured.NestedString(obj, "metadata", "name")
	if kind == "" {
		kind = "object"
	}
	if ns != "" {
		return kind + " " + ns + "/" + name
	}
	return kind + " " + name
}
