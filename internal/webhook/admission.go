package webhook

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"net/http"
	"strings"

	admissionv1 "k8s.io/api/admission/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"

	"github.com/morph-dev/morph/internal/engine"
	"github.com/morph-dev/morph/internal/jsonvalue"
	"github.com/morph-dev/morph/internal/request"
)

// AuditAnnotationMutatedBy is the audit annotation listing the policies that changed the
// object. The API server prefixes it with the webhook's name.
const AuditAnnotationMutatedBy = "mutated-by"

var admissionGV = admissionv1.SchemeGroupVersion.String()

// admissionReview is a decoded AdmissionReview: the typed review, and its request's
// object and oldObject, decoded once with the engine's number rules.
type admissionReview struct {
	*admissionv1.AdmissionReview
	object, oldObject map[string]any
}

// decodeAdmissionReview decodes and checks an AdmissionReview admission.k8s.io/v1.
//
// The body is read once, by jsonvalue, into the generic model: the request's object and
// oldObject (most of the bytes) are taken from it as they are, and the typed fields are
// read from the rest (reviewFromJSON). Decoding the whole body with encoding/json and
// then the object again cost a third of a /mutate.
func decodeAdmissionReview(body []byte) (*admissionReview, error) {
	if len(bytes.TrimSpace(body)) == 0 {
		return nil, errors.New("empty body: send an AdmissionReview admission.k8s.io/v1")
	}
	value, err := jsonvalue.Options{Normalize: true}.Decode(body)
	if err != nil {
		return nil, fmt.Errorf("not an AdmissionReview: %w", err)
	}
	out := &admissionReview{}
	if m, ok := value.(map[string]any); ok {
		if request, ok := m["request"].(map[string]any); ok {
			if out.object, err = takeObject(request, "object"); err != nil {
				return nil, err
			}
			if out.oldObject, err = takeObject(request, "oldObject"); err != nil {
				return nil, err
			}
		}
	}
	if out.AdmissionReview, err = reviewFromJSON(value); err != nil {
		return nil, fmt.Errorf("not an AdmissionReview: %w", err)
	}
	review := out.AdmissionReview
	if review.APIVersion != admissionGV || review.Kind != "AdmissionReview" {
		return nil, fmt.Errorf("expected apiVersion %s kind AdmissionReview, got apiVersion %q kind %q: list only v1 in admissionReviewVersions", admissionGV, review.APIVersion, review.Kind)
	}
	r := review.Request
	switch {
	case r == nil:
		return nil, errors.New("AdmissionReview has no request")
	case r.UID == "":
		return nil, errors.New("request.uid is empty")
	case r.Kind.Kind == "" || r.Kind.Version == "":
		return nil, errors.New("request.kind needs version and kind")
	}
	return out, nil
}

// takeObject removes request[field] and returns it: an object, or nil for null and absent.
func takeObject(request map[string]any, field string) (map[string]any, error) {
	v, ok := request[field]
	if !ok {
		return nil, nil
	}
	delete(request, field)
	switch x := v.(type) {
	case nil:
		return nil, nil
	case map[string]any:
		return x, nil
	}
	return nil, typeError("request."+field, "a JSON object", v)
}

// decodeObject decodes an embedded object, keeping integers exact: numbers are int64
// when whole and in range (also 1.0 and 2e3, as engine.Normalize has them), float64
// otherwise, and a number no float64 holds (1e400) is an error. JSON null and empty
// bytes are no object.
func decodeObject(field string, raw []byte) (map[string]any, error) {
	if len(raw) == 0 {
		return nil, nil
	}
	obj, err := jsonvalue.Options{Normalize: true}.DecodeObject(raw)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", field, err)
	}
	return obj, nil
}

// engineRequest turns an admission request into the engine's request.
func engineRequest(review *admissionReview, namespaces NamespaceLookup) (*engine.Request, error) {
	ar := review.Request
	op, err := engine.ParseOperation(string(ar.Operation))
	if err != nil {
		return nil, fmt.Errorf("request.operation: %w", err)
	}
	obj, old := review.object, review.oldObject
	req := &engine.Request{
		UID:         string(ar.UID),
		Kind:        schema.GroupVersionKind(ar.Kind),
		Resource:    schema.GroupVersionResource(ar.Resource),
		SubResource: ar.SubResource,
		Operation:   op,
		Namespace:   ar.Namespace,
		Name:        ar.Name,
		Object:      obj,
		OldObject:   old,
		UserInfo: engine.UserInfo{
			Username: ar.UserInfo.Username,
			UID:      ar.UserInfo.UID,
			Groups:   ar.UserInfo.Groups,
		},
		Source: engine.SourceOriginal,
		DryRun: ar.DryRun != nil && *ar.DryRun,
	}
	if len(ar.UserInfo.Extra) > 0 {
		req.UserInfo.Extra = make(map[string][]string, len(ar.UserInfo.Extra))
		for k, v := range ar.UserInfo.Extra {
			req.UserInfo.Extra[k] = v
		}
	}
	req.NamespaceObject = request.NamespaceObject(namespaces, req.Kind, req.Namespace, obj, old, request.Unknown)
	return req, nil
}

func describe(c *call, ar *admissionv1.AdmissionRequest) {
	c.uid = string(ar.UID)
	c.kind = schema.GroupVersionKind(ar.Kind).String()
	c.operation = string(ar.Operation)
	c.namespace = ar.Namespace
	c.name = ar.Name
}

func admissionAnswer(resp *admissionv1.AdmissionResponse) *admissionv1.AdmissionReview {
	return &admissionv1.AdmissionReview{
		TypeMeta: metav1.TypeMeta{APIVersion: admissionGV, Kind: "AdmissionReview"},
		Response: resp,
	}
}

func unavailable(what string, s *Server) reply {
	s.mu.Lock()
	why := s.reportedError().text
	s.mu.Unlock()
	if why == "" {
		why = "loading"
	}
	return reply{status: http.StatusServiceUnavailable, message: fmt.Sprintf("%s: policies are not loaded: %s", what, why), outcome: outcomeUnavailable}
}

// admissionRequest is where /mutate and /validate start: decode the review, take the
// current policies, build the engine's request. failed is the answer when one of them fails.
func (s *Server) admissionRequest(body []byte, c *call, endpoint string) (ar *admissionv1.AdmissionRequest, rt *runtime, req *engine.Request, failed *reply) {
	review, err := decodeAdmissionReview(body)
	if err != nil {
		r := badRequest("%v", err)
		return nil, nil, nil, &r
	}
	ar = review.Request
	describe(c, ar)
	if rt = s.rt.Load(); rt == nil {
		r := unavailable(endpoint, s)
		return nil, nil, nil, &r
	}
	if req, err = engineRequest(review, rt.namespaces); err != nil {
		r := badRequest("%v", err)
		return nil, nil, nil, &r
	}
	return ar, rt, req, nil
}

// mutate answers /mutate.
func (s *Server) mutate(ctx context.Context, body []byte, c *call) reply {
	ar, rt, req, failed := s.admissionRequest(body, c, "mutate")
	if failed != nil {
		return *failed
	}
	resp := &admissionv1.AdmissionResponse{UID: ar.UID, Allowed: true}
	set := rt.mutationSet(c.group)
	if set == nil {
		// A group no loaded policy belongs to: a webhook configuration not yet updated
		// after a policy changed its failure policy or timeout. Nothing to run; say so.
		s.metrics.unknownGroups.Inc()
		s.log.Warn("no loaded policy belongs to the webhook group", append(c.attrs(), "group", c.group)...)
		resp.Warnings = append(resp.Warnings, fmt.Sprintf("morph: no loaded policy belongs to webhook group %q: update the webhook configuration (morph generate webhooks)", c.group))
		return ok(admissionAnswer(resp), outcomeAllowed)
	}
	if req.Object == nil {
		// DELETE and CONNECT without options: nothing to mutate.
		s.admitted(ctx, req, c.group, nil)
		return ok(admissionAnswer(resp), outcomeAllowed)
	}
	res, err := set.Mutate(ctx, req)
	if err != nil {
		return s.mutationFailed(ctx, rt, set, req, resp, err, c)
	}
	s.metrics.passes.Observe(float64(res.Passes))
	for _, f := range res.Failures {
		msg := "policy skipped"
		if describe, ok := rt.describers[f.ID]; ok {
			msg = describe(req.Kind.Kind, req.Name, f.Err)
		}
		s.policyFailed(msg, f, c)
	}
	resp.Warnings = append(resp.Warnings, res.Warnings...)
	if s.opts.Mutated != nil && !req.DryRun {
		s.opts.Mutated(ctx, req, res)
	}
	s.admitted(ctx, req, c.group, res)
	if validators := rt.validatorsOf(c.group); c.group == "" && validators.Len() > 0 {
		// /mutate alone (no group) also warns of the validation rules the mutated
		// object breaks; a grouped webhook leaves that to its validating webhook.
		violations, warnings, failures := validators.Validate(ctx, req, res.Object)
		s.validatorsFailed(failures, c)
		resp.Warnings = append(resp.Warnings, warnings...)
		for _, v := range violations {
			if !v.Deny {
				resp.Warnings = append(resp.Warnings, violationText(v))
			}
		}
	}
	if !res.Changed() {
		return ok(admissionAnswer(resp), outcomeAllowed)
	}
	patch, err := res.Patch.JSON()
	if err != nil {
		c.err = fmt.Errorf("encoding the patch: %w", err)
		return reply{status: http.StatusInternalServerError, message: c.err.Error(), outcome: outcomeFailed}
	}
	pt := admissionv1.PatchTypeJSONPatch
	resp.Patch, resp.PatchType = patch, &pt
	mutated := res.Mutated()
	names := make([]string, len(mutated))
	for i, id := range mutated {
		names[i] = id.String()
		s.metrics.mutations.WithLabelValues(names[i]).Inc()
	}
	resp.AuditAnnotations = map[string]string{AuditAnnotationMutatedBy: strings.Join(names, ", ")}
	return ok(admissionAnswer(resp), outcomePatched)
}

// admitted calls Options.Admitted for a request /mutate admits, unless it is a dry run.
func (s *Server) admitted(ctx context.Context, req *engine.Request, group string, res *engine.Result) {
	if s.opts.Admitted != nil && !req.DryRun {
		s.opts.Admitted(ctx, req, group, res)
	}
}

// policyFailed logs, at warn level with the request's attributes, and counts in
// morph_policy_errors_total a policy whose error the request survived: a FailIgnore
// mutator whose changes were dropped, or a validator whose checks were skipped.
func (s *Server) policyFailed(msg string, f engine.Failure, c *call) {
	s.metrics.errors.WithLabelValues(f.ID.String()).Inc()
	s.log.Warn(msg, append(c.attrs(), "policy", f.ID.String(), "error", f.Err)...)
}

// validatorsFailed reports the validators whose errors skipped their checks (see
// policyFailed); the answer's warnings already name them.
func (s *Server) validatorsFailed(failures []engine.Failure, c *call) {
	for _, f := range failures {
		s.policyFailed("validation skipped", f, c)
	}
}

// mutationFailed answers a request the engine could not finish (see the package
// documentation, "Failures and deadlines"). Only the request's own deadline (ctx done)
// is a timeout: a FailClose policy past its own deadline (Descriptor.Timeout) while the
// request still has time is that policy's error, counted and answered like any other.
func (s *Server) mutationFailed(ctx context.Context, rt *runtime, set *engine.Set, req *engine.Request, resp *admissionv1.AdmissionResponse, err error, c *call) reply {
	c.err = err
	if ctx.Err() != nil {
		if !set.FailClose(req) {
			resp.Warnings = append(resp.Warnings, fmt.Sprintf("morph: mutation did not finish in time (%v); the object was admitted unchanged", err))
			return ok(admissionAnswer(resp), outcomeFailed)
		}
		resp.Allowed = false
		resp.Result = &metav1.Status{Status: metav1.StatusFailure, Code: http.StatusGatewayTimeout, Reason: metav1.StatusReasonTimeout,
			Message: fmt.Sprintf("morph: mutation did not finish in time: %v", err)}
		return ok(admissionAnswer(resp), outcomeFailed)
	}
	if me, ok := errors.AsType[*engine.MutatorError](err); ok {
		s.metrics.errors.WithLabelValues(me.ID.String()).Inc()
	}
	resp.Allowed = false
	resp.Result = &metav1.Status{Status: metav1.StatusFailure, Code: http.StatusInternalServerError, Reason: metav1.StatusReasonInternalError,
		Message: "morph: " + err.Error()}
	return ok(admissionAnswer(resp), outcomeFailed)
}

func violationText(v engine.Violation) string {
	if v.Field == "" {
		return fmt.Sprintf("%s: %s", v.ID, v.Message)
	}
	return fmt.Sprintf("%s: %s: %s", v.ID, v.Field, v.Message)
}

// validate answers /validate.
func (s *Server) validate(ctx context.Context, body []byte, c *call) reply {
	ar, rt, req, failed := s.admissionRequest(body, c, "validate")
	if failed != nil {
		return *failed
	}
	resp := &admissionv1.AdmissionResponse{UID: ar.UID, Allowed: true}
	obj := req.Object
	if obj == nil {
		obj = req.OldObject
	}
	validators := rt.validatorsOf(c.group)
	if obj == nil || validators.Len() == 0 {
		return ok(admissionAnswer(resp), outcomeAllowed)
	}
	violations, warnings, failures := validators.Validate(ctx, req, obj)
	s.validatorsFailed(failures, c)
	if err := engine.Stopped(ctx); err != nil {
		// Validation did not finish in time: a fail-closed validator refuses what it
		// could not check, as the API server does when it cannot reach the webhook.
		c.err = err
		if validators.FailClose(req) {
			resp.Allowed = false
			resp.Result = &metav1.Status{Status: metav1.StatusFailure, Code: http.StatusGatewayTimeout, Reason: metav1.StatusReasonTimeout,
				Message: fmt.Sprintf("morph: validation did not finish in time: %v", err)}
			return ok(admissionAnswer(resp), outcomeFailed)
		}
		resp.Warnings = append(resp.Warnings, fmt.Sprintf("morph: validation did not finish in time (%v); the object was admitted unchecked", err))
		return ok(admissionAnswer(resp), outcomeFailed)
	}
	resp.Warnings = warnings
	var denials []string
	for _, v := range violations {
		if v.Deny {
			denials = append(denials, violationText(v))
		} else {
			resp.Warnings = append(resp.Warnings, violationText(v))
		}
	}
	if len(denials) == 0 {
		return ok(admissionAnswer(resp), outcomeAllowed)
	}
	resp.Allowed = false
	resp.Result = &metav1.Status{Status: metav1.StatusFailure, Code: http.StatusForbidden, Reason: metav1.StatusReasonForbidden,
		Message: strings.Join(denials, "; ")}
	return ok(admissionAnswer(resp), outcomeDenied)
}
