// Package cel is morph's CEL dialect: Kubernetes MutatingAdmissionPolicy with its
// MutatingAdmissionPolicyBindings (admissionregistration.k8s.io v1, v1beta1, v1alpha1) and
// Kyverno's MutatingPolicy and NamespacedMutatingPolicy with PolicyExceptions
// (policies.kyverno.io v1alpha1, v1beta1, v1).
//
// A MutatingAdmissionPolicy's semantics come from k8s.io/apiserver itself: the CEL
// environment, the composited compiler (variables, lazily evaluated), match conditions,
// the resource-rule matcher and the JSONPatch and ApplyConfiguration patchers are the API
// server's own, called on unstructured objects, so that a policy mutates here as it does
// in the API server. A Kyverno policy is compiled and evaluated as Kyverno 1.19 does it
// (kyverno_env.go, kyverno_program.go): Kyverno's environment, its request with object
// and oldObject, its exceptions variable and the libraries of github.com/kyverno/sdk,
// with the API server's patchers applying the mutations. Every expression is compiled at
// load, with the API server's cost limits; a policy that does not compile is rejected
// with the field, line and column of the error.
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
// Kyverno policies (only) see cel-go's Bindings, Encoders, Math, Protos and Regex
// extensions, the orValue macro, jsonpatch.escapeKey and the sdk's libraries: image,
// imagedata, resource, globalcontext, http, user, json, yaml, hash, math, random, time,
// transform, x509, gzip, each in PascalCase and camelCase:
//
//	image("nginx:1.25").registry()       // "index.docker.io"
//	parseServiceAccount("system:serviceaccount:team:builder").Namespace // "team"
//	jsonpatch.escapeKey("app.kubernetes.io/name") // "app.kubernetes.io~1name"
//	resource.get("v1", "configmaps", "kube-system", "allowed-registry").data.registry
//	globalContext.get("zones", "zoneNames")
//	image.getMetadata("nginx:1.25").config.config.User
//	http.get("http://127.0.0.1:8080/team").statusCode
//
// Their hosts are morph's: resource.* reads a ResourceReader (offline the context
// objects; a missing object is null), globalContext.* resolves GlobalContextEntries in
// their real shape from a GlobalContextSource (offline the context objects, in a
// cluster the API server; projections with Kyverno's JMESPath functions, jmespath.go),
// image.getMetadata an ImageDataReader (the spec.images of a Kyverno CLI Context file,
// else a registry named in Options.RegistryAllowHosts), http.* morph's allow-listed
// caller (Options.HTTPAllowHosts, with the sdk's blocked ranges on top).
//
// # Kyverno fields
//
// evaluation.admission.enabled (default true) turns admission off; with
// evaluation.mutateExisting.enabled the policy has an engine.Background: what triggers
// it, the existing objects it then mutates (targetMatchConstraints, else
// matchConstraints, or targetMatchConstraints.expression) and how a target is evaluated
// (background.go, after Kyverno 1.19's background controller).
// webhookConfiguration.timeoutSeconds (1-30, default 10) is the evaluation deadline.
// Autogen applies a Pod policy to the six pod controllers (or those
// autogen.podControllers.controllers names) with its expressions rewritten as Kyverno
// rewrites them, evaluated on the controller object (autogen.go). A PolicyException with
// neither images nor allowedValues exempts the objects passing its matchConditions from
// the policies its policyRefs name (an engine.NoteExemption says which); one with them fills the
// exceptions variable instead.
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
