package cel

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"time"

	"github.com/google/go-containerregistry/pkg/name"
	"github.com/kyverno/sdk/extensions/imagedataloader"
)

// imageDataReader answers image.getMetadata, offline and in a cluster alike: first from
// the Kyverno CLI Context objects (spec.images) among the context objects, then from
// the image's registry when its host is allowed (--allow-registry), with the sdk's
// image data loader (the definition of the data's shape: image, resolvedImage,
// registry, repository, identifier, tag, digest, imageIndex, manifest, config).
// Registries are read anonymously: morph uses no pull secret and no credential helper.
type imageDataReader struct {
	store   storeReader
	allow   []string
	timeout time.Duration
}

// ImageData implements ImageDataReader.
func (r imageDataReader) ImageData(ctx context.Context, image string) (map[string]any, error) {
	if d, ok := r.store.contextImage(image); ok {
		return d, nil
	}
	ref, err := name.ParseReference(image)
	if err != nil {
		return nil, fmt.Errorf("image %q: %w", image, err)
	}
	registry := ref.Context().RegistryStr()
	if !slices.Contains(r.allow, registry) {
		return nil, fmt.Errorf("image data for %s: registry %q is not allowed: allow it with --allow-registry, or pass a cli.kyverno.io/v1alpha1 Context with spec.images with --context", image, registry)
	}
	timeout := r.timeout
	if timeout <= 0 {
		timeout = 10 * time.Second
	}
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	fetcher, err := imagedataloader.New(nil, nil, nil)
	if err != nil {
		return nil, err
	}
	data, err := fetcher.FetchImageData(ctx, image, nil, nil)
	if err != nil {
		return nil, fmt.Errorf("image data for %s from %s: %w", image, registry, err)
	}
	// As Kyverno (pkg/cel/libs GetImageData): the descriptor's JSON as a value.
	raw, err := json.Marshal(data.Data())
	if err != nil {
		return nil, err
	}
	var out map[string]any
	if err := json.Unmarshal(raw, &out); err != nil {
		return nil, err
	}
	return out, nil
}
