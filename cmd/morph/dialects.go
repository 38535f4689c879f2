package main

import (
	"context"
	"fmt"
	"io"
	"strings"

	"github.com/spf13/cobra"

	"github.com/morph-dev/morph/internal/dialect/cel"
	"github.com/morph-dev/morph/internal/dialect/gatekeeper"
	"github.com/morph-dev/morph/internal/dialect/katalog"
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
		cel.New(cel.Options{
			Objects:        store,
			HTTPAllowHosts: opts.httpAllowHosts,
		}),
		katalog.New(katalog.Options{Objects: store}),
	)
}

// addDialectCommands adds the commands that belong to one dialect.
func addDialectCommands(root *cobra.Command, newLoader func(*objects.Store) *policy.Loader, stdin io.Reader, stdout, stderr io.Writer) {
	root.AddCommand(newConvertCommand(stdin, stdout, stderr))
	generate := &cobra.Command{
		Use:   "generate",
		Short: "Generate Kubernetes objects from policies",
	}
	generate.AddCommand(
		newGenerateMapCommand(stdin, stdout, stderr),
		newGenerateWebhooksCommand(newLoader, stdout, stderr),
	)
	root.AddCommand(generate)
}

// explainRecorder prepares ctx so that the dialects record, for one object, what
// --explain reports beyond the engine's trace, and returns the function that turns the
// record into lines: the event a Katalog entry emits for the defaults it applied (spec
// 000: "defaults applied: spec.replicas=..."), the CEL PolicyExceptions that exempted
// the object.
func explainRecorder(ctx context.Context) (context.Context, func(*engine.Set, *engine.Result) []string) {
	trace := &cel.Trace{}
	return cel.WithTrace(ctx, trace), func(set *engine.Set, res *engine.Result) []string {
		notes := explainNotes(set, res)
		for _, e := range trace.Exemptions() {
			notes = append(notes, fmt.Sprintf("exempted from %s by PolicyException %s/%s", e.Policy, e.Namespace, e.Exception))
		}
		for _, n := range trace.Nondeterministic() {
			notes = append(notes, fmt.Sprintf("%s calls %s: its result may differ from run to run", n.Policy, strings.Join(n.Functions, ", ")))
		}
		for _, r := range trace.Rewritten() {
			for _, e := range r.Expressions {
				notes = append(notes, fmt.Sprintf("%s autogen for %s evaluates: %s", r.Policy, r.Kind, e))
			}
		}
		return notes
	}
}

// existingContext marks ctx as the mutation of existing objects (morph apply --existing,
// the background controller).
func existingContext(ctx context.Context) context.Context { return cel.ExistingContext(ctx) }

// mutatesExisting reports whether a mutator runs on existing objects: Kyverno
// MutatingPolicies with evaluation.mutateExisting.enabled.
func mutatesExisting(m engine.Mutator) bool {
	e, ok := m.(interface{ MutatesExisting() bool })
	return ok && e.MutatesExisting()
}

func explainNotes(set *engine.Set, res *engine.Result) []string {
	var notes []string
	for _, m := range set.Mutators() {
		km, ok := m.(*katalog.Mutator)
		if !ok {
			continue
		}
		if text := km.Event(res); text != "" {
			notes = append(notes, fmt.Sprintf("event Normal %s: %s", km.Entry().EventReason(), text))
		}
	}
	return notes
}
