package engine

import (
	"context"
	"encoding/json"
	"fmt"

	"k8s.io/apimachinery/pkg/runtime/schema"

	"github.com/morph-dev/morph/internal/jsonvalue"
)

// Objects reads objects that exist: offline the --existing and --context objects, in a
// cluster informers or the API server. A policy's Background functions read targets and
// triggers through it.
type Objects interface {
	// List lists the objects of a resource in a namespace ("" for all namespaces or a
	// cluster-scoped resource).
	List(ctx context.Context, gvr schema.GroupVersionResource, namespace string) ([]map[string]any, error)
	// Get reads one object; nil, nil when it does not exist.
	Get(ctx context.Context, gvr schema.GroupVersionResource, namespace, name string) (map[string]any, error)
}

// ObjectRef names one existing object and the route of a write to it: Resource (with
// SubResource, e.g. "status") is where the update goes, Kind what the object is.
type ObjectRef struct {
	Resource    schema.GroupVersionResource `json:"resource"`
	Kind        schema.GroupVersionKind     `json:"kind"`
	SubResource string                      `json:"subResource,omitempty"`
	Namespace   string                      `json:"namespace,omitempty"`
	Name        string                      `json:"name"`
}

func (r ObjectRef) String() string {
	name := r.Name
	if r.Namespace != "" {
		name = r.Namespace + "/" + name
	}
	res := r.Resource.Resource
	if r.SubResource != "" {
		res += "/" + r.SubResource
	}
	return fmt.Sprintf("%s %s [%s]", r.Kind.Kind, name, res)
}

// Background describes how a policy mutates objects that already exist (Kyverno's
// evaluation.mutateExisting): what triggers it, which objects it then mutates, which
// resources it reads and writes. The dialect supplies the functions; the surfaces (the
// offline apply, the cluster controller) call them through internal/request.
type Background struct {
	// Triggers reports whether an admitted request (CREATE, UPDATE or DELETE, its
	// object as admitted, after mutation; on DELETE Object is nil and OldObject the
	// deleted object) triggers the policy: its match constraints and match conditions
	// on the request. Policies off at admission (Descriptor.AdmissionOff) are never
	// triggered by admission.
	Triggers func(ctx context.Context, req *Request) (bool, error)
	// Targets lists the existing objects a trigger selects for mutation; trigger is nil
	// for the scan when the policy is created or changed. Policies whose targets come
	// from an expression (Expression) need a trigger.
	Targets func(ctx context.Context, trigger *Request, objs Objects) ([]ObjectRef, error)
	// SkipBackgroundRequests: the writes of the background controller itself do not
	// trigger the policy (Kyverno's evaluation.skipBackgroundRequests, default true),
	// so that its own writes do not trigger it again and again.
	SkipBackgroundRequests bool
	// Expression says the targets are computed from each trigger (Kyverno's
	// targetMatchConstraints.expression): the policy-creation scan then runs once per
	// existing trigger object, each as the UPDATE request ScanTriggers builds.
	Expression bool
	// ScanTriggers lists the existing objects that trigger the policy, each as an
	// UPDATE request of the object (what Kyverno's policy controller builds for an
	// expression policy's scan). Set when Expression is.
	ScanTriggers func(ctx context.Context, objs Objects) ([]*Request, error)
	// TargetResources are the resources the policy may mutate in the background, with
	// the route of the write (SubResource); TriggerResources those whose objects
	// trigger it. "*" stands for any group, version or resource.
	TargetResources  []ObjectRef
	TriggerResources []ObjectRef
}

// requestWire is the JSON form of a Request: objects as raw JSON, decoded back into
// the engine's value model (int64 for whole numbers) by UnmarshalJSON.
type requestWire struct {
	UID             string                      `json:"uid,omitempty"`
	Kind            schema.GroupVersionKind     `json:"kind"`
	Resource        schema.GroupVersionResource `json:"resource"`
	SubResource     string                      `json:"subResource,omitempty"`
	Operation       Operation                   `json:"operation"`
	Namespace       string                      `json:"namespace,omitempty"`
	Name            string                      `json:"name,omitempty"`
	Object          json.RawMessage             `json:"object,omitempty"`
	OldObject       json.RawMessage             `json:"oldObject,omitempty"`
	NamespaceObject json.RawMessage             `json:"namespaceObject,omitempty"`
	UserInfo        UserInfo                    `json:"userInfo"`
	Source          Source                      `json:"source,omitempty"`
	DryRun          bool                        `json:"dryRun,omitempty"`
	Background      bool                        `json:"background,omitempty"`
	Reconcile       bool                        `json:"reconcile,omitempty"`
	WriteBudget     int64                       `json:"writeBudget,omitempty"`
	Policy          *ID                         `json:"policy,omitempty"`
	Trigger         *Request                    `json:"trigger,omitempty"`
}

// MarshalJSON encodes the request, so that background work can be persisted.
func (r Request) MarshalJSON() ([]byte, error) {
	w := requestWire{
		UID: r.UID, Kind: r.Kind, Resource: r.Resource, SubResource: r.SubResource,
		Operation: r.Operation, Namespace: r.Namespace, Name: r.Name, UserInfo: r.UserInfo,
		Source: r.Source, DryRun: r.DryRun, Background: r.Background, Reconcile: r.Reconcile,
		WriteBudget: r.WriteBudget, Trigger: r.Trigger, Policy: r.Policy,
	}
	for _, o := range []struct {
		dst *json.RawMessage
		obj map[string]any
	}{{&w.Object, r.Object}, {&w.OldObject, r.OldObject}, {&w.NamespaceObject, r.NamespaceObject}} {
		if o.obj == nil {
			continue
		}
		b, err := jsonvalue.Append(nil, o.obj)
		if err != nil {
			return nil, err
		}
		*o.dst = b
	}
	return json.Marshal(w)
}

// UnmarshalJSON decodes a request encoded by MarshalJSON, its objects into the engine's
// value model, whole numbers as int64 (as the webhook decodes them), so that a request
// encodes and decodes back to itself.
func (r *Request) UnmarshalJSON(data []byte) error {
	var w requestWire
	if err := json.Unmarshal(data, &w); err != nil {
		return err
	}
	*r = Request{
		UID: w.UID, Kind: w.Kind, Resource: w.Resource, SubResource: w.SubResource,
		Operation: w.Operation, Namespace: w.Namespace, Name: w.Name, UserInfo: w.UserInfo,
		Source: w.Source, DryRun: w.DryRun, Background: w.Background, Reconcile: w.Reconcile,
		WriteBudget: w.WriteBudget, Trigger: w.Trigger, Policy: w.Policy,
	}
	for _, o := range []struct {
		src json.RawMessage
		dst *map[string]any
	}{{w.Object, &r.Object}, {w.OldObject, &r.OldObject}, {w.NamespaceObject, &r.NamespaceObject}} {
		if len(o.src) == 0 || string(o.src) == "null" {
			continue
		}
		obj, err := jsonvalue.Options{Normalize: true}.DecodeObject(o.src)
		if err != nil {
			return err
		}
		*o.dst = obj
	}
	return nil
}
