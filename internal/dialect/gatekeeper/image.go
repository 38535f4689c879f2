package gatekeeper

import (
	"fmt"
	"regexp"
	"strings"
)

// image is a container image reference split as Gatekeeper's AssignImage splits it:
// "my.registry.io:2000/repo/app:latest" is domain "my.registry.io:2000", path "repo/app"
// and tag ":latest"; a digest ("@sha256:...") is a tag too.
type image struct {
	domain, path, tag string
}

// parseImage splits a reference. The domain is the first component when it contains "."
// or ":" or is "localhost"; the tag starts at the first "@" or else at the last ":" of
// the rest.
func parseImage(ref string) image {
	var img image
	rest := ref
	if i := strings.IndexByte(ref, '/'); i >= 0 && looksLikeDomain(ref[:i]) {
		img.domain, rest = ref[:i], ref[i+1:]
	}
	if i := strings.IndexByte(rest, '@'); i >= 0 {
		img.path, img.tag = rest[:i], rest[i:]
	} else if i := strings.LastIndexByte(rest, ':'); i >= 0 {
		img.path, img.tag = rest[:i], rest[i:]
	} else {
		img.path = rest
	}
	return img
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

// imageParts are AssignImage's parameters, compiled.
type imageParts struct {
	domain, path, tag string
}

// The shapes the parts must have (those of the OCI distribution reference grammar).
type imageGrammar struct {
	domain, path, tag, digest *regexp.Regexp
}

func newImageGrammar() imageGrammar {
	const component = `[a-z0-9]+(?:(?:[._]|__|-+)[a-z0-9]+)*`
	return imageGrammar{
		domain: regexp.MustCompile(`^(?:localhost|[a-zA-Z0-9](?:[a-zA-Z0-9-]*[a-zA-Z0-9])?(?:\.[a-zA-Z0-9](?:[a-zA-Z0-9-]*[a-zA-Z0-9])?)*)(?::[0-9]+)?$`),
		path:   regexp.MustCompile(`^` + component + `(?:/` + component + `)*$`),
		tag:    regexp.MustCompile(`^:[\w][\w.-]{0,127}$`),
		digest: regexp.MustCompile(`^@[A-Za-z][A-Za-z0-9]*(?:[-_+.][A-Za-z][A-Za-z0-9]*)*:[0-9a-fA-F]{32,}$`),
	}
}

// validate checks the parameters as Gatekeeper does; the error names the field.
func (p imageParts) validate(g imageGrammar) (string, error) {
	const base = "spec.parameters."
	if p.domain == "" && p.path == "" && p.tag == "" {
		return base + "assignDomain", fmt.Errorf("set at least one of assignDomain, assignPath and assignTag")
	}
	if p.domain != "" {
		if strings.Contains(p.domain, "/") {
			return base + "assignDomain", fmt.Errorf("%q must not contain \"/\": put the repository in assignPath", p.domain)
		}
		if !g.domain.MatchString(p.domain) || !looksLikeDomain(p.domain) {
			return base + "assignDomain", fmt.Errorf("%q is not a registry domain: it needs a \".\" or a \":port\", or must be localhost", p.domain)
		}
	}
	if p.path != "" {
		if strings.HasPrefix(p.path, "/") || strings.HasSuffix(p.path, "/") {
			return base + "assignPath", fmt.Errorf("%q must not start or end with \"/\"", p.path)
		}
		if first, _, _ := strings.Cut(p.path, "/"); p.domain == "" && looksLikeDomain(first) {
			return base + "assignPath", fmt.Errorf("%q could be read as a domain: set assignDomain too", p.path)
		}
		if !g.path.MatchString(p.path) {
			return base + "assignPath", fmt.Errorf("%q is not an image path (lower-case components separated by \"/\")", p.path)
		}
	}
	if p.tag != "" {
		switch p.tag[0] {
		case ':':
			if !g.tag.MatchString(p.tag) {
				return base + "assignTag", fmt.Errorf("%q is not a tag: after \":\" up to 128 letters, digits, \"_\", \".\" or \"-\"", p.tag)
			}
		case '@':
			if !g.digest.MatchString(p.tag) {
				return base + "assignTag", fmt.Errorf("%q is not a digest such as @sha256:<at least 32 hex digits>", p.tag)
			}
		default:
			return base + "assignTag", fmt.Errorf("%q must start with \":\" (a tag) or \"@\" (a digest)", p.tag)
		}
	}
	return "", nil
}

// imageSetter is AssignImage: it replaces the given parts of the image string at the
// location. A missing field is created from the parts alone, as Gatekeeper does.
type imageSetter struct {
	parts imageParts
}

func (s *imageSetter) set(_ env, cur any, exists bool) (any, bool, error) {
	var ref string
	if exists && cur != nil {
		str, ok := cur.(string)
		if !ok {
			return nil, false, fmt.Errorf("expected an image string, found %s", describe(cur))
		}
		ref = str
	}
	orig := parseImage(ref)
	img := orig
	if s.parts.domain != "" {
		img.domain = s.parts.domain
	}
	if s.parts.path != "" {
		img.path = s.parts.path
	}
	if s.parts.tag != "" {
		img.tag = s.parts.tag
	}
	if (exists && img == orig) || img.path == "" {
		return cur, false, nil // nothing to change, or no image to build (no path)
	}
	next := img.String()
	if parseImage(next) != img {
		return nil, false, fmt.Errorf("the image %q would become %q, which reads back differently; fix the image or the mutator's parts", ref, next)
	}
	return next, true, nil
}
