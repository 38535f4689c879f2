package cel

import (
	"fmt"
	"strings"

	"github.com/distribution/reference"
)

// Kyverno's default image registry (its ConfigMap's defaultRegistry, with
// enableDefaultRegistryMutation true: the defaults morph evaluates with).
const kyvernoDefaultRegistry = "docker.io"

// jpImageNormalize is Kyverno's image_normalize: the image reference with Kyverno's
// default registry when it names none and the tag latest when it has neither tag nor
// digest ("nginx" is "docker.io/nginx:latest", with no "library/"; a digest wins over
// a tag). References are parsed by github.com/distribution/reference, as Kyverno
// parses them (pkg/utils/image); CEL's image() (the Kyverno sdk's, on
// go-containerregistry) answers index.docker.io/library/nginx instead, so it is not
// used here.
func jpImageNormalize(args []any) (any, error) {
	image, err := jpString("image_normalize", args, 0)
	if err != nil {
		return nil, err
	}
	full := withDefaultRegistry(image)
	ref, err := reference.Parse(full)
	if err != nil {
		return nil, fmt.Errorf(jpErrGeneric, "image_normalize", fmt.Sprintf(
			"bad image: %s, defaultRegistry: %s, enableDefaultRegistryMutation: %t: %v",
			full, kyvernoDefaultRegistry, true, err))
	}
	var name string
	if named, ok := ref.(reference.Named); ok {
		name = reference.Path(named)
		if domain := reference.Domain(named); domain != "" {
			name = domain + "/" + name
		}
	}
	if digested, ok := ref.(reference.Digested); ok {
		return name + "@" + digested.Digest().String(), nil
	}
	tag := "latest"
	if tagged, ok := ref.(reference.Tagged); ok && tagged.Tag() != "" {
		tag = tagged.Tag()
	}
	return name + ":" + tag, nil
}

// withDefaultRegistry prefixes an image with the default registry unless its first
// path component names one: it holds a "." or a ":", is "localhost", or has an
// upper-case letter.
func withDefaultRegistry(image string) string {
	first, _, found := strings.Cut(image, "/")
	if found && (strings.ContainsAny(first, ".:") || first == "localhost" || strings.ToLower(first) != first) {
		return image
	}
	return kyvernoDefaultRegistry + "/" + image
}
