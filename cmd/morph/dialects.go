package main

import (
	"io"

	"github.com/spf13/cobra"
	"k8s.io/apiserver/pkg/admission/plugin/policy/mutating/patch"

	"github.com/morph-dev/morph/internal/dialect/cel"
	"github.com/morph-dev/morph/internal/dialect/gatekeeper"
	"github.com/morph-dev/morph/internal/dialect/katalog"
	"github.com/morph-dev/morph/internal/objects"
	"github.com/morph-dev/morph/internal/policy"
	"github.com/morph-dev/morph/internal/suite"
)

// newDialects builds the loader for every dialect morph reads. This is the one place
// that knows the dialects.
func newDialects(store *objects.Store, opts *dialectOptions) *policy.Loader {
	return policy.NewLoader(
		gatekeeper.New(gatekeeper.Options{
			Objects:             store,
			MutationAnnotations: opts.mutationAnnotations,
			AllowExternalData:   opts.allowExternalData,
		}),
		cel.New(cel.Options{
			Objects:            store,
			Resources:          opts.cluster.resources,
			GlobalContext:      opts.cluster.globalContext,
			APICalls:           opts.cluster.apiCalls,
			APITypes:           opts.cluster.types,
			HTTPAllowHosts:     opts.httpAllowHosts,
			RegistryAllowHosts: opts.registryAllowHosts,
			KyvernoCLI:         opts.kyvernoCLI,
		}),
		katalog.New(katalog.Options{Objects: store}),
	)
}

// testHooks gives morph test what it needs from the dialects: loaders, with the Kyverno
// CLI's conventions for kyverno-test.yaml suites (which also make the CEL dialect note
// the policies that matched).
func testHooks(opts *dialectOptions) suite.Hooks {
	return suite.Hooks{
		NewLoader: func(store *objects.Store, kyvernoCLI bool) *policy.Loader {
			o := *opts
			o.kyvernoCLI = kyvernoCLI
			return newDialects(store, &o)
		},
	}
}

// addDialectCommands adds the commands that belong to one dialect.
func addDialectCommands(root *cobra.Command, opts *dialectOptions, newLoader func(*objects.Store) *policy.Loader, stdin io.Reader, stdout, stderr io.Writer) {
	root.AddCommand(newConvertCommand(stdin, stdout, stderr))
	root.AddCommand(newTestCommand(testHooks(opts), stdout))
	generate := &cobra.Command{
		Use:   "generate",
		Short: "Generate Kubernetes objects from policies",
	}
	generate.AddCommand(
		newGenerateMapCommand(stdin, stdout, stderr),
		newGenerateWebhooksCommand(newLoader, stdout, stderr),
		newGenerateCRDsCommand(stdout),
	)
	root.AddCommand(generate)
}

// clusterReaders answer the CEL libraries that read cluster objects, in cluster mode:
// resource.Get/List and globalContext.Get (informers and the API server).
type clusterReaders struct {
	resources     cel.ResourceReader
	globalContext cel.GlobalContextSource
	// apiCalls keeps GlobalContextEntry apiCall answers across reloads.
	apiCalls *cel.APICallCache
	// types answers the schemas of kinds morph has none of (the API server's OpenAPI).
	types cel.TypeConverterSource
}

// newClusterReaders returns the readers of cluster mode for GlobalContextEntries from
// global and schemas from the API server's OpenAPI (types, run by the caller), with one
// apiCall cache for every reload; the caller sets resources.
func newClusterReaders(global cel.GlobalContextSource, types patch.TypeConverterManager) clusterReaders {
	return clusterReaders{globalContext: global, apiCalls: cel.NewAPICallCache(), types: cel.TypeConverterManagerSource(types)}
}
