package cel

import (
	"fmt"
	"regexp"
	"strings"
)

// imageRef is a parsed container image reference.
type imageRef struct {
	Registry   string
	Repository string
	Tag        string
	Digest     string
}

// Identifier is the digest when the reference has one, else the tag.
func (r imageRef) Identifier() string {
	if r.Digest != "" {
		return r.Digest
	}
	return r.Tag
}

// String prints the reference in its canonical, fully qualified form.
func (r imageRef) String() string {
	s := r.Registry + "/" + r.Repository
	if r.Tag != "" {
		s += ":" + r.Tag
	}
	if r.Digest != "" {
		s += "@" + r.Digest
	}
	return s
}

const (
	defaultRegistry = "docker.io"
	defaultTag      = "latest"
	maxImageLength  = 4096
)

var (
	pathComponent = regexp.MustCompile(`^[a-z0-9]+(?:(?:\.|_|__|-+)[a-z0-9]+)*$`)
	tagPattern    = regexp.MustCompile(`^[A-Za-z0-9_][A-Za-z0-9_.-]{0,127}$`)
	digestPattern = regexp.MustCompile(`^[A-Za-z][A-Za-z0-9]*(?:[-_+.][A-Za-z][A-Za-z0-9]*)*:[0-9A-Fa-f]{32,}$`)
	hostPattern   = regexp.MustCompile(`^(?:[A-Za-z0-9](?:[A-Za-z0-9-]*[A-Za-z0-9])?(?:\.[A-Za-z0-9](?:[A-Za-z0-9-]*[A-Za-z0-9])?)*|\[[0-9A-Fa-f:.]+\])(?::[0-9]+)?$`)
)

// parseImage parses an image reference as the container runtimes do: a registry is the
// first component when it holds a "." or a ":" or is "localhost", else docker.io, where
// one-component names live under "library/". A reference with neither tag nor digest
// has the tag "latest".
func parseImage(s string) (imageRef, error) {
	if s == "" {
		return imageRef{}, fmt.Errorf("empty image reference")
	}
	if len(s) > maxImageLength {
		return imageRef{}, fmt.Errorf("image reference longer than %d characters", maxImageLength)
	}
	var ref imageRef
	name := s
	if i := strings.IndexByte(name, '@'); i >= 0 {
		ref.Digest = name[i+1:]
		name = name[:i]
		if !digestPattern.MatchString(ref.Digest) {
			return imageRef{}, fmt.Errorf("invalid digest %q in image %q", ref.Digest, s)
		}
	}
	if i := strings.LastIndexByte(name, ':'); i >= 0 && !strings.Contains(name[i+1:], "/") {
		ref.Tag = name[i+1:]
		name = name[:i]
		if !tagPattern.MatchString(ref.Tag) {
			return imageRef{}, fmt.Errorf("invalid tag %q in image %q", ref.Tag, s)
		}
	}
	parts := strings.Split(name, "/")
	if len(parts) > 1 && (strings.ContainsAny(parts[0], ".:") || parts[0] == "localhost") {
		ref.Registry = parts[0]
		parts = parts[1:]
		if !hostPattern.MatchString(ref.Registry) {
			return imageRef{}, fmt.Errorf("invalid registry %q in image %q", ref.Registry, s)
		}
	} else {
		ref.Registry = defaultRegistry
		if len(parts) == 1 {
			parts = []string{"library", parts[0]}
		}
	}
	for _, p := range parts {
		if !pathComponent.MatchString(p) {
			return imageRef{}, fmt.Errorf("invalid repository component %q in image %q", p, s)
		}
	}
	ref.Repository = strings.Join(parts, "/")
	if ref.Tag == "" && ref.Digest == "" {
		ref.Tag = defaultTag
	}
	return ref, nil
}
