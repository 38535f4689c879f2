// Package webhook serves morph's policies over HTTPS as Kubernetes admission and CRD
// conversion webhooks, and generates the webhook configurations that register them.
//
// The package is a transport: it knows no policy dialect. It receives a Source that
// compiles a policy folder into a policy.Bundle, builds an engine.Set, engine.Validators and
// a converter index from it, and swaps the whole runtime atomically when the folder changes.
//
// # Endpoints
//
//   - POST /mutate, /mutate/<group>: AdmissionReview admission.k8s.io/v1. Runs the engine and answers its
//     RFC 6902 patch (patchType JSONPatch; no patch when nothing changed), warnings for
//     skipped policies and for warn-level validation rules on the mutated object, and the
//     audit annotation "mutated-by" (the API server prefixes it with the webhook name,
//     giving "<webhook>/mutated-by: Assign/foo, ModifySet/bar").
//   - POST /validate, /validate/<group>: AdmissionReview. Deny violations refuse the object with code 403 and
//     the rules' messages; warn violations and validators' own errors are warnings (a
//     validator's error is also logged and counted, as a FailIgnore policy's is).
//   - POST /convert: ConversionReview apiextensions.k8s.io/v1. Each object is converted, in
//     request order, to desiredAPIVersion by the converter of its group and kind. An object
//     already at desiredAPIVersion is returned unchanged. Any error fails the whole review
//     (result Failure, a message naming the object, no convertedObjects).
//   - GET /healthz: the process is alive. GET /readyz: 200 once a policy set is loaded,
//     503 otherwise; both answer JSON details (policy counts, last load error and time).
//   - GET /metrics: Prometheus metrics from a registry owned by the server.
//   - GET /<route>/<entry>: the statistics JSON a policy keeps (engine.Stats; Katalog's
//     /katalog/<entry>, spec 003), 404 when no policy exposes statistics there.
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
// (engine.Descriptor.Timeout) bounds each of its calls; exceeding it is that policy's error,
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
// # What the server reads of a policy
//
// Everything the server and the configuration generator know about a policy is its
// engine.Descriptor (engine/engine.go): Timeout (each call's deadline, applied by the
// engine, and the webhook's timeoutSeconds, at most 30; default 10), Resources (the
// webhook rules; default: meta.UnsafeGuessKindToResource of each target kind),
// FailurePolicy (of a validator: the validating webhook's failurePolicy), AdmissionOff
// (kept out of /mutate, /validate and the configurations), Stats (served as JSON under
// /<route>/<entry>) and DescribeFailure (the log line of the policy's failure). The
// server names no dialect.
//
// # Webhook groups
//
// Configurations groups policies by what a webhook must say (failure policy,
// reinvocation, timeout): each group is one webhook calling /mutate/<group> (or
// /validate/<group>), where the server runs that group's policies only, so that one
// group's failure policy never decides for another's policies. /mutate and /validate
// without a group run every policy, for configurations written by hand. A group no
// loaded policy belongs to (a configuration not yet updated) admits the object unchanged.
//
// When several policies share a statistics entry, their statistics are merged: the
// members of every statistics object are combined into one object; statistics that are
// not JSON objects are placed under the policy's ID.
package webhook

import "github.com/morph-dev/morph/internal/request"

// NamespaceLookup finds the Namespace object a namespaced request's object lives in, for
// policies with a namespaceSelector. *objects.Store implements it for --context objects;
// a cluster implementation reads an informer's cache.
type NamespaceLookup = request.NamespaceLookup
