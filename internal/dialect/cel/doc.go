// Package cel is morph's CEL dialect: Kubernetes MutatingAdmissionPolicy with its
// MutatingAdmissionPolicyBindings (admissionregistration.k8s.io v1, v1beta1, v1alpha1) and
// Kyverno's MutatingPolicy and NamespacedMutatingPolicy with PolicyExceptions
// (policies.kyverno.io v1alpha1, v1beta1, v1).
//
// Semantics come from k8s.io/apiserver itself: the CEL environment, the composited
// compiler (variables, lazily evaluated), match conditions, the resource-rule matcher and
// the JSONPatch and ApplyConfiguration patchers are the API server's own, called on
// unstructured objects, so that a policy mutates here as it does in the API server.
// Every expression is compiled at load, with the API server's cost limits; a policy that
// does not compile is rejected with the field, line and column of the error.
//
// # Binding
//
// A MutatingAdmissionPolicy runs once per binding (engine.ID.Part is the binding's name),
// and not at all without one, as in Kubernetes. A Kyverno MutatingPolicy binds itself.
// Params (paramKind/paramRef) are read from the context objects: by name or selector,
// with parameterNotFoundAction Allow or Deny; a selector matching several params runs the
// mutations once per param.
//
// # Kyverno libraries
//
// Kyverno policies (only) see these functions besides the Kubernetes CEL libraries:
//
//	image("nginx:1.25").registry()       // "docker.io"
//	image("nginx:1.25").repository()     // "library/nginx"
//	image("nginx:1.25").tag()            // "1.25" ("latest" when neither tag nor digest)
//	image("ghcr.io/a/b@sha256:…").digest() // "sha256:…"; identifier() is digest or tag
//	image("nginx").containsDigest()      // false
//	isImage("not an image!")             // false
//	parseServiceAccount("system:serviceaccount:team:builder").Namespace // "team" (.Name "builder")
//	jsonpatch.escapeKey("app.kubernetes.io/name") // "app.kubernetes.io~1name"
//	resource.Get("v1", "configmaps", "kube-system", "allowed-registry").data.registry
//	resource.List("apps/v1", "deployments", "").items.size()
//	globalContext.Get("team-cluster-values", "").team
//	http.Get("http://127.0.0.1:8080/team").metadata.team
//	http.Post("http://127.0.0.1:8080/log", {"kind": object.kind}, {"X-Token": "t"})
//
// resource.Get/List read the context objects (--context) offline, through a
// ResourceReader in a cluster. globalContext.Get reads a GlobalContextEntry (kyverno.io or
// policies.kyverno.io) from the context objects: offline its value is the entry's
// top-level "data" field, and a projection's value is under "projections.<name>".
// http.Get/Post are off unless Options.HTTPAllowHosts lists the host; each call has
// Options.HTTPTimeout, follows no redirect, reads at most 2 MiB and decodes JSON.
//
// # Kyverno fields
//
// evaluation.admission.enabled (default true) turns admission off; with
// evaluation.mutateExisting.enabled the policy mutates existing objects matched by
// targetMatchConstraints (or matchConstraints), under ExistingContext.
// webhookConfiguration.timeoutSeconds (1-30, default 10) is the evaluation deadline.
// autogen.podControllers.controllers applies a Pod policy to the pod templates of
// Deployments, DaemonSets, StatefulSets, ReplicaSets, Jobs and CronJobs: object and
// oldObject are the templates seen as Pods, ApplyConfiguration merges with the Pod schema
// there and JSONPatch paths are relative to the template. A PolicyException exempts the
// objects passing its matchConditions (and holding one of its images, when it lists
// some) from the policies its policyRefs name; WithTrace records which.
//
// # Built-in objects
//
// The API server's policies see a built-in object after its decoding into the Go type of
// its kind: quantities canonical ("0.5" is "500m", "0.5Gi" is "512Mi"), unknown fields
// dropped, status: {} present. So do morph's, for every kind the client-go scheme knows
// (object and oldObject alike); custom resources, and objects that do not fit their Go
// type, are seen as given. What the policy changed is then applied to the object as
// given: fields the policy did not touch keep the form they were written in, and the
// values it wrote are its own.
//
// # Offline differences
//
// The API server runs its defaulting after every mutation, which needs the API server's
// own code (k8s.io/kubernetes); morph does not, so a policy does not see defaulted fields
// (imagePullPolicy, terminationMessagePath, ...). The authorizer variable has no opinion
// offline.
// matchPolicy Equivalent reaches the other versions of a CRD converting with strategy
// None only.
package cel
