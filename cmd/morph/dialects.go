package main

import (
	"io"

	"github.com/spf13/cobra"

	"github.com/morph-dev/morph/internal/dialect/gatekeeper"
	"github.com/morph-dev/morph/internal/engine"
	"github.com/morph-dev/morph/internal/objects"
	"github.com/morph-dev/morph/internal/policy"
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
	)
}

// addDialectCommands adds the commands that belong to one dialect.
func addDialectCommands(root *cobra.Command, newLoader func(*objects.Store) *policy.Loader, stdin io.Reader, stdout, stderr io.Writer) {
}

// explainNotes returns dialect-specific lines for --explain.
func explainNotes(d policy.Document, res *engine.Result) []string {
	return nil
}
