// Module image builds morph's OCI image without Docker (make image). It is separate
// from the root module so that its dependencies stay out of morph's go.mod.
module github.com/morph-dev/morph/hack/image

go 1.26.0

require (
	github.com/google/go-containerregistry v0.21.5
	golang.org/x/crypto/x509roots/fallback v0.0.0-20261030153154-30a33513ff6d
)

require (
	github.com/containerd/stargz-snapshotter/estargz v0.18.2 // indirect
	github.com/klauspost/compress v1.18.5 // indirect
	github.com/opencontainers/go-digest v1.0.0 // indirect
	github.com/opencontainers/image-spec v1.1.1 // indirect
	github.com/vbatts/tar-split v0.12.2 // indirect
	golang.org/x/sync v0.20.0 // indirect
)
