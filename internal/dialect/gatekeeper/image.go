package gatekeeper

import (
	"fmt"
	"regexp"
	"strings"

	"k8s.io/apimachinery/pkg/util/validation/field"
)

// image is a container image reference split as Gatekeeper's AssignImage splits it
// (mutators/assignimage/imageparser.go): "my.registry.io:2000/repo/app:latest" is domain
// "my.registry.io:2000", path "repo/app" and tag ":latest". The tag starts at the first
// ":" or "@" after the domain, so a digest is a tag too, and "app:1.0@sha256:..." has the
// tag ":1.0@sha256:...".
type image struct {
	domain, path, tag string
}

// parseImage splits a reference. The domain is the part before the first "/" when it
// contains "." or ":" or is "localhost".
func parseImage(ref string) image {
	var img image
	rest := ref
	if i := strings.IndexByte(ref, '/'); i >= 0 && looksLikeDomain(ref[:i]) {
		img.domain, rest = ref[:i], ref[i+1:]
	}
	img.path, img.tag = splitTag(rest)
	return img
}

func splitTag(rest string) (path, tag string) {
	if i := strings.IndexAny(rest, ":@"); i >= 0 {
		return rest[:i], rest[i:]
	}
	return rest, ""
}

func looksLikeDomain(s string) bool {
	return strings.ContainsAny(s, ".:") || s == "localhost"
}

func (img image) String() string {
	var b strings.Builder
	b.Grow(len(img.domain) + len(img.path) + len(img.tag) + 1)
	if img.domain != "" {
		b.WriteString(img.domain)
		b.WriteByte('/')
	}
	b.WriteString(img.path)
	b.WriteString(img.tag)
	return b.String()
}

// is reports whether img prints as ref, without building the string.
func (img image) is(ref string) bool {
	if img.domain != "" {
		if len(ref) <= len(img.domain) || ref[:len(img.domain)] != img.domain || ref[len(img.domain)] != '/' {
			return false
		}
		ref = ref[len(img.domain)+1:]
	}
	return strings.HasPrefix(ref, img.path) && ref[len(img.path):] == img.tag
}

// imageParts are AssignImage's parameters, compiled.
type imageParts struct {
	domain, path, tag string
}

// imageGrammar holds the shapes Gatekeeper accepts for the parts
// (mutators/assignimage/imageparser.go): a domain with a "." (or localhost) and an
// optional port, a path of lower-case components, a tag or a digest.
type imageGrammar struct {
	domain, path, tag *regexp.Regexp
}

func newImageGrammar() imageGrammar {
	return imageGrammar{
		domain: regexp.MustCompile(`(^\w[\w\-_]*\.[\w\-_\.]*[\w](:\d+)?$)|(^localhost(:\d+)?$)`),
		path:   regexp.MustCompile(`^[a-z0-9]+(?:(?:(?:[._/]|__|[-]*)[a-z0-9]+)+)?`),
		tag:    regexp.MustCompile(`(^:[\w][\w.-]{0,127}$)|(^@[A-Za-z][A-Za-z0-9]*([-_+.][A-Za-z][A-Za-z0-9]*)*[:][0-9A-Fa-f]{32,}$)`),
	}
}

// validate checks the parameters as Gatekeeper does (validateImageParts), in its words,
// as an error of the field at (spec.parameters) names.
func (p imageParts) validate(g imageGrammar, at *field.Path) *field.Error {
	domain, path, tag := at.Child("assignDomain"), at.Child("assignPath"), at.Child("assignTag")
	if p.domain == "" && p.path == "" && p.tag == "" {
		return field.Required(domain, "at least one of [assignDomain, assignPath, assignTag] must be set")
	}
	if p.domain != "" {
		if !g.domain.MatchString(p.domain) {
			return field.Invalid(domain, p.domain, fmt.Sprintf("assignDomain %q must be a fully-qualified domain name or localhost", p.domain))
		}
		if d := parseImage(p.domain + "/"); d.domain != p.domain || d.path != "" || d.tag != "" {
			return field.Invalid(domain, p.domain, fmt.Sprintf("domain %q could not be recognized as a valid domain", p.domain))
		}
	}
	if p.path != "" && g.path.FindString(p.path) != p.path {
		return field.Invalid(path, p.path, fmt.Sprintf("assignPath %q must be a valid docker image path", p.path))
	}
	if p.tag != "" {
		if !g.tag.MatchString(p.tag) {
			return field.Invalid(tag, p.tag, fmt.Sprintf("assignTag %q must be a valid docker image tag or digest starting with ':' or '@'", p.tag))
		}
		if pth, tg := splitTag(p.tag); pth != "" || tg != p.tag {
			return field.Invalid(tag, p.tag, fmt.Sprintf("tag %q could not be recognized as a valid tag or digest", p.tag))
		}
	}
	if p.domain == "" && p.path != "" {
		if i := strings.IndexByte(p.path, '/'); i >= 0 && looksLikeDomain(p.path[:i]) {
			return field.Invalid(path, p.path, fmt.Sprintf("assignDomain must be set if the first part of assignPath %q can be interpreted as part of a domain", p.path))
		}
	}
	return nil
}

// imageSetter is AssignImage: it replaces the given parts of the image string at the
// location, keeping the others. A missing field is built from the parts alone, as
// Gatekeeper does (":v2" from a tag alone, "gcr.io/" from a domain alone).
type imageSetter struct {
	parts imageParts
}

func (s *imageSetter) set(_ env, cur any, exists bool) (any, bool, error) {
	var ref string
	if exists {
		str, ok := cur.(string)
		if !ok {
			return nil, false, fmt.Errorf("expected an image string, found %s", describe(cur))
		}
		ref = str
	}
	img := parseImage(ref)
	if s.parts.domain != "" {
		img.domain = s.parts.domain
	}
	if s.parts.path != "" {
		img.path = s.parts.path
	}
	if s.parts.tag != "" {
		img.tag = s.parts.tag
	}
	if exists && img.is(ref) {
		// Nothing to replace: the converged case, decided without building a string.
		return cur, false, nil
	}
	next := img.String()
	if exists && next == ref {
		return cur, false, nil
	}
	return next, true, nil
}
