package main

import (
	"context"
	"fmt"
	"io"

	"github.com/spf13/cobra"

	"github.com/morph-dev/morph/internal/dialect/cel"
	"github.com/morph-dev/morph/internal/dialect/gatekeeper"
	"github.com/morph-dev/morph/internal/dialect/katalog"
	"github.com/morph-dev/morph/internal/engine"
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
			Objects:        store,
			HTTPAllowHosts: opts.httpAllowHosts,
		}),
		katalog.New(katalog.Options{Objects: store}),
	)
}

// testHooks gives morph test what it needs from the dialects: loaders (with the Kyverno
// CLI's conventions for kyverno-test.yaml suites) and the CEL dialect's per-policy
// decisions.
func testHooks(opts *dialectOptions) suite.Hooks {
	return suite.Hooks{
		NewLoader: func(store *objects.Store, kyvernoCLI bool) *policy.Loader {
			return policy.NewLoader(
				gatekeeper.New(gatekeeper.Options{
					Objects:             store,
					MutationAnnotations: opts.mutationAnnotations,
					AllowExternalData:   opts.allowExternalData,
				}),
				cel.New(cel.Options{
					Objects:        store,
					HTTPAllowHosts: opts.httpAllowHosts,
					KyvernoCLI:     kyvernoCLI,
				}),
				katalog.New(katalog.Options{Objects: store}),
			)
		},
		Observe: func(ctx context.Context) (context.Context, func() suite.Decisions) {
			trace, outcomes := &cel.Trace{}, &cel.Outcomes{}
			ctx = cel.WithOutcomes(cel.WithTrace(ctx, trace), outcomes)
			return ctx, func() suite.Decisions {
				d := suite.Decisions{
					Exempted: map[engine.ID]bool{}, Matched: map[engine.ID]bool{}, ConditionsMet: map[engine.ID]bool{},
					Tracked: func(id engine.ID) bool { return id.Dialect == "cel" },
				}
				for _, e := range trace.Exemptions() {
					d.Exempted[e.Policy] = true
				}
				d.Matched, d.ConditionsMet = outcomes.Snapshot()
				return d
			}
		},
		MutatesExisting: mutatesExisting,
		ExistingContext: existingContext,
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
