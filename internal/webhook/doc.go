// Package webhook serves morph's policies over HTTPS as Kubernetes admission and CRD
// conversion webhooks, and generates the webhook configurations that register them.
//
// The package is a transport: it knows no policy dialect. It receives a Source that
// compiles a policy folder into a policy.Bundle, builds an engine.Set, engine.Validators and
// a converter index from it, and swaps the whole runtime atomically when the folder changes.
//
// # Endpoints
//
//   - POST /mutate: AdmissionReview admission.k8s.io/v1. Runs the engine and answers its
//     RFC 6902 patch (patchType JSONPatch; no patch when nothing changed), warnings for
//     skipped policies and for warn-level validation rules on the mutated object, and the
//     audit annotation "mutated-by" (the API server prefixes it with the webhook name,
//     giving "<webhook>/mutated-by: Assign/foo, ModifySet/bar").
//   - POST /validate: AdmissionReview. Deny violations refuse the object with code 403 and
//     the rules' messages; warn violations and validators' own errors are warnings (a
//     validator's error is also logged and counted, as a FailIgnore policy's is).
//   - POST /convert: ConversionReview apiextensions.k8s.io/v1. Each object is converted, in
//     request order, to desiredAPIVersion by the converter of its group and kind. An object
//     already at desiredAPIVersion is returned unchanged. Any error fails the whole review
//     (result Failure, a message naming the object, no convertedObjects).
//   - GET /healthz: the process is alive. GET /readyz: 200 once a policy set is loaded,
//     503 otherwise; both answer JSON details (policy counts, last load error and time).
//   - GET /metrics: Prometheus metrics from a registry owned by the server.
//   - GET /katalog/<entry>: the statistics JSON of the policies of that entry (see
//     StatsProvider), 404 when no policy exposes statistics under that name.
//
// # Answers to bad input
//
// A malformed review is 400, a body over the limit 413, a content type other than
// application/json 415, a method other than the endpoint's 405, a panic while serving a
// request 500 (logged with the request's uid). While no policy set has loaded, admission
// and conversion requests are answered 503, so the API server applies the webhook's
// failurePolicy, exactly as when the server is down.
//
// # Failures and deadlines
//
// A FailClose policy's error and an object that does not converge refuse the request:
// allowed false with code 500 (reason InternalError) and the engine's message, which
// names the policy. A FailIgnore policy's error drops its changes and adds a warning.
// Both policy errors are logged with the request's uid and counted, by policy, in
// morph_policy_errors_total.
//
// Every request stops its work at 90% of the API server's ?timeout= (--request-timeout,
// 10 s, when absent), counted from when the request arrives, so that the answer arrives
// before the API server gives up; reading the body counts. When that deadline passes,
// the request is answered as its candidates' failure policies say: refused with code 504
// when any candidate policy is FailClose, otherwise admitted unchanged with a warning
// (which is what the API server itself does when a failurePolicy Ignore webhook times
// out). A stage that does not look at the deadline (decoding, the diff, encoding a
// huge patch) is not waited for: shortly after the deadline (half the remaining tenth,
// at least 50 ms, never past the timeout) the answer is HTTP 504 naming the timeout,
// and the API server applies the webhook's failure policy. A policy's own deadline
// (TimeoutPolicy) bounds each of its calls; exceeding it is that policy's error,
// handled by its failure policy. The context's cause names the request's timeout, so a
// policy stopped by it says which timeout ended it.
//
// # The policy folder and certificates
//
// The folder is polled: its fingerprint is the names, modes, sizes, modification and
// change times and inodes of its files, never their contents. Files that are not
// regular (a FIFO named *.yaml) are skipped with a note, never opened. Every file is
// read within --max-input. With --cert-dir, a serving certificate morph generated is
// renewed under the same CA (ca.key is kept, 0600) when less than a third of its
// lifetime or 30 days remain, at start-up and hourly; the server reloads it.
//
// # Dry run
//
// A dry-run request is answered exactly like any other. engine.Request.DryRun is set, so
// that policies keep no statistics and emit no events for it; the server itself records
// only metrics. Calls a policy makes itself are reads morph does on every request
// (Gatekeeper external data, CEL http.Get) or, for CEL http.Post, the policy author's
// own: morph sends them on dry-run requests too, as Kyverno does, and they are off
// unless --allow-http-host names the host. Allow only hosts whose POST endpoints have no
// side effects, as the generated configurations declare sideEffects: None.
//
// # What dialects may add
//
// A mutator, validator or converter may implement these optional interfaces; the server
// and the configuration generator look for them with type assertions and fall back when
// they are absent. Dialects implement the methods without importing this package.
//
//   - TimeoutPolicy (Timeout() time.Duration): the policy's own deadline, applied to each
//     Matches and Mutate call, and the webhook configuration's timeoutSeconds (at most 30).
//     Default: no per-policy deadline, timeoutSeconds 10.
//   - ResourceLister (Resources() []schema.GroupVersionResource): the resources the
//     policy's targets name, for webhook rules. Default: meta.UnsafeGuessKindToResource of
//     each target kind.
//   - StatsProvider (Stats() any): statistics served as JSON under /katalog/<entry>.
//   - EntryNamer (Entry() string): the entry name for /katalog/<entry>. Default: ID().Name.
//   - EntryStatsProvider (EntryStats() map[string]any): statistics of several entries at
//     once, by entry name (a Katalog converter serves every entry of its version pair).
//   - AdmissionApplier (AppliesAtAdmission() bool) on a mutator: false keeps the policy
//     out of /mutate and out of the MutatingWebhookConfiguration (a Kyverno policy with
//     evaluation.admission.enabled false, a Katalog entry with webhooks.mutation false).
//   - ValidationFailurePolicy (FailurePolicy() engine.FailurePolicy) on a validator: the
//     validating webhook's failurePolicy. Default: Fail.
//
// When several policies share an entry, /katalog/<entry> merges their statistics: the
// members of every statistics object are combined into one object; statistics that are
// not JSON objects are placed under the policy's ID.
package webhook

import (
	"time"

	"k8s.io/apimachinery/pkg/runtime/schema"

	"github.com/morph-dev/morph/internal/engine"
)

// TimeoutPolicy is implemented by a policy with its own deadline.
type TimeoutPolicy interface {
	Timeout() time.Duration
}

// ResourceLister is implemented by a policy that knows the resources (plural names) of
// the kinds it targets.
type ResourceLister interface {
	Resources() []schema.GroupVersionResource
}

// StatsProvider is implemented by a policy that keeps statistics (Katalog conversion and
// mutation counters). Stats must be safe to call concurrently with requests and must
// return a value encoding/json can marshal.
type StatsProvider interface {
	Stats() any
}

// EntryNamer is implemented by a policy compiled from a named entry (a Katalog CRD entry).
type EntryNamer interface {
	Entry() string
}

// EntryStatsProvider is implemented by a policy that keeps statistics for several named
// entries.
type EntryStatsProvider interface {
	EntryStats() map[string]any
}

// FailureDescriber is implemented by a policy whose dialect prescribes the log line of
// its failure at admission (Katalog, spec 000: "admission/mutate: error applying rules —
// allowing without mutation kind=... name=... err=...").
type FailureDescriber interface {
	DescribeFailure(kind, name string, err error) string
}

// AdmissionApplier is implemented by a mutator or validator that may be turned off at
// admission (Kyverno evaluation.admission.enabled, Katalog webhooks.mutation and
// webhooks.validation).
type AdmissionApplier interface {
	AppliesAtAdmission() bool
}

// ValidationFailurePolicy is implemented by a validator that says what the API server
// does when the validating webhook cannot be reached.
type ValidationFailurePolicy interface {
	FailurePolicy() engine.FailurePolicy
}

// NamespaceLookup finds the Namespace object a namespaced request's object lives in, for
// policies with a namespaceSelector. *objects.Store implements it for --context objects;
// a cluster implementation reads an informer's cache.
type NamespaceLookup interface {
	Namespace(name string) (map[string]any, bool)
}
