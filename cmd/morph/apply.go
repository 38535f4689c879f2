package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"slices"
	"strings"

	"github.com/pmezard/go-difflib/difflib"
	"github.com/spf13/cobra"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"sigs.k8s.io/yaml"

	"github.com/morph-dev/morph/internal/engine"
	"github.com/morph-dev/morph/internal/objects"
	"github.com/morph-dev/morph/internal/offline"
	"github.com/morph-dev/morph/internal/policy"
	"github.com/morph-dev/morph/internal/request"
)

type applyOptions struct {
	policies  []string
	files     []string
	contexts  []string
	operation string
	old       []string
	userinfo  string
	source    string
	output    string
	explain   bool
	mode      string
	namespace string
	// subresource submits the inputs as requests for a subresource ("binding", or
	// "pods/binding" to name the parent resource).
	subresource string
	existing    []string
	reader      policy.Reader // bounded by --max-input
}

func newApplyCommand(newLoader func(*objects.Store) *policy.Loader, stdin io.Reader, stdout, stderr io.Writer) *cobra.Command {
	o := &applyOptions{}
	cmd := &cobra.Command{
		Use:   "apply -p POLICY... -f FILE...",
		Short: "Mutate YAML or JSON objects with policies, offline",
		Long: `Mutate objects with policies, offline, and print them in input order.

POLICY and FILE are files, folders (their .yaml, .yml and .json files) or - for
standard input. Context objects (--context) stand for what exists in the cluster:
Namespaces (for namespaceSelector), CRDs (schemas), params and other objects
policies read. Non-policy documents found among the policies are context too.

Exit codes: 0 done (changed or not), 1 a policy or input could not be loaded or
evaluated, 2 usage, 3 an object was denied by a validation rule.`,
		Example: `  morph apply -p examples/gatekeeper/policies -f examples/gatekeeper/pod.yaml
  kustomize build . | morph apply -p policies/ -f -
  morph apply -p policies/ -f deploy.yaml -o patch
  morph apply -p policies/ -f deploy.yaml --explain -o diff
  morph apply -p mutate-existing.yaml -f trigger.yaml --existing configmaps.yaml`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			rd, err := inputReader(cmd)
			if err != nil {
				return err
			}
			o.reader = rd
			return o.run(cmd.Context(), newLoader, stdin, stdout, stderr)
		},
	}
	f := cmd.Flags()
	f.StringSliceVarP(&o.policies, "policy", "p", nil, "policy files or folders (repeatable)")
	f.StringSliceVarP(&o.files, "filename", "f", nil, "objects to mutate: files, folders or - for stdin (repeatable)")
	f.StringSliceVar(&o.contexts, "context", nil, "objects that exist in the cluster: Namespaces, CRDs, params (repeatable)")
	f.StringVar(&o.operation, "operation", "CREATE", "admission operation: CREATE, UPDATE or DELETE")
	f.StringSliceVar(&o.old, "old", nil, "the stored objects, for UPDATE and DELETE (matched by kind, namespace and name)")
	f.StringVar(&o.userinfo, "userinfo", "", "file with the requesting user: username, uid, groups, extra")
	f.StringVar(&o.source, "source", "Original", "object source for Gatekeeper's match.source: All, Original or Generated")
	f.StringVarP(&o.output, "output", "o", "yaml", "output: yaml, json, patch (one RFC 6902 patch per object per line) or diff")
	f.BoolVar(&o.explain, "explain", false, "print to stderr which mutator changed which paths, in which pass")
	f.StringVar(&o.mode, "mode", "admission", "admission (mutate, then validate) or reconcile (validate first unless the policy says mutateFirst)")
	f.StringVarP(&o.namespace, "namespace", "n", "default", "namespace for namespaced objects that name none")
	f.StringVar(&o.subresource, "subresource", "", "submit the inputs as requests for this subresource: NAME (binding, eviction, status), RESOURCE/NAME or GROUP/VERSION/RESOURCE/NAME (apps/v1/deployments/scale)")
	f.StringSliceVar(&o.existing, "existing", nil, "objects that exist, mutated after admission as the background controller does (Kyverno mutateExisting); without -f, the policies' creation scan")
	return cmd
}

func (o *applyOptions) validate() error {
	if len(o.policies) == 0 {
		return usagef("--policy/-p is required")
	}
	if len(o.files) == 0 && len(o.existing) == 0 {
		return usagef("--filename/-f (or --existing) is required")
	}
	stdins := 0
	for _, p := range slices.Concat(o.policies, o.files, o.contexts, o.existing, o.old) {
		if p == "-" {
			stdins++
		}
	}
	if stdins > 1 {
		return usagef("only one of --policy, --filename and --context may read standard input (-)")
	}
	switch o.output {
	case "yaml", "json", "patch", "diff":
	default:
		return usagef("--output %q: use yaml, json, patch or diff", o.output)
	}
	switch o.mode {
	case "admission", "reconcile":
	default:
		return usagef("--mode %q: use admission or reconcile", o.mode)
	}
	switch engine.Source(o.source) {
	case engine.SourceAll, engine.SourceOriginal, engine.SourceGenerated:
	default:
		return usagef("--source %q: use All, Original or Generated", o.source)
	}
	if _, err := engine.ParseOperation(o.operation); err != nil {
		return usageError{fmt.Errorf("--operation: %w", err)}
	}
	return nil
}

// loadRuntime reads context and policies. Every problem is printed; the error only
// carries the exit code.
func loadRuntime(rd policy.Reader, newLoader func(*objects.Store) *policy.Loader, policyPaths, contextPaths []string, stdin io.Reader, stderr io.Writer) (*offline.Runtime, error) {
	ctxDocs, err := rd.Read(contextPaths, stdin)
	if err != nil {
		return nil, err
	}
	docs, err := rd.Read(policyPaths, stdin)
	if err != nil {
		return nil, err
	}
	rt, err := offline.Load(newLoader, ctxDocs, docs, strings.Join(policyPaths, ", "))
	var loadErr *offline.LoadError
	if errors.As(err, &loadErr) {
		for _, w := range loadErr.Warnings {
			fmt.Fprintln(stderr, "warning:", w)
		}
		for _, e := range loadErr.Errs {
			fmt.Fprintln(stderr, "error:", e)
		}
		return nil, reportedError{errors.New("policies could not be loaded")}
	}
	if err != nil {
		return nil, err
	}
	for _, w := range rt.Warnings {
		fmt.Fprintln(stderr, "warning:", w)
	}
	return rt, nil
}

func (o *applyOptions) run(ctx context.Context, newLoader func(*objects.Store) *policy.Loader, stdin io.Reader, stdout, stderr io.Writer) error {
	if err := o.validate(); err != nil {
		return err
	}
	if ctx == nil {
		ctx = context.Background()
	}
	rt, err := loadRuntime(o.reader, newLoader, o.policies, o.contexts, stdin, stderr)
	if err != nil {
		return err
	}
	inputs, err := o.reader.Read(o.files, stdin)
	if err != nil {
		return err
	}
	olds, err := o.reader.Read(o.old, stdin)
	if err != nil {
		return err
	}
	user, err := offline.ReadUserInfo(o.userinfo)
	if err != nil {
		return err
	}
	op, _ := engine.ParseOperation(o.operation)
	existing, err := o.reader.Read(o.existing, stdin)
	if err != nil {
		return err
	}
	mode := request.Admission
	if o.mode == "reconcile" {
		mode = request.Reconcile
	}
	// The --existing objects exist, as the context objects do: policies read them
	// (resource.get/list) and the background mutates them.
	bg, err := newBackgroundRun(rt, existing)
	if err != nil {
		return err
	}
	// Namespaced context (and --existing) objects that name no namespace are in
	// --namespace, as the API server would have put them.
	rt.Store.DefaultNamespace(o.namespace)
	bg.start(o.namespace)

	var outputs []map[string]any
	var patches []engine.Patch
	var work []request.Work
	failed, denied := 0, 0
	for _, d := range inputs {
		req, err := o.request(rt.Store, d, op, olds, user)
		if err != nil {
			fmt.Fprintf(stderr, "error: %s: %v\n", d.Where(), err)
			failed++
			continue
		}
		ev, err := request.Evaluate(ctx, rt.Policies(), req, mode)
		if err != nil {
			fmt.Fprintf(stderr, "error: %s: %v\n", d.Where(), err)
			failed++
			continue
		}
		res := ev.Result
		for _, w := range res.Warnings {
			fmt.Fprintf(stderr, "warning: %s: %s\n", d.Where(), w)
		}
		deniedHere := false
		for _, v := range ev.Violations {
			if v.Deny {
				deniedHere = true
				fmt.Fprintf(stderr, "denied: %s: %s: %s\n", d.Where(), v.ID, v.Message)
			} else {
				fmt.Fprintf(stderr, "warning: %s: %s: %s\n", d.Where(), v.ID, v.Message)
			}
		}
		if o.explain {
			explain(stderr, objectName(d.Object), d.Where(), res)
		}
		if deniedHere {
			denied++
			continue
		}
		outputs = append(outputs, res.Object)
		patches = append(patches, res.Patch)
		if o.output == "diff" {
			if err := writeDiff(stdout, objectName(d.Object), req.Object, res.Object); err != nil {
				return err
			}
		}
		if mode == request.Admission {
			// The admitted request triggers the policies that mutate existing objects,
			// as in a cluster once the API server stored the object.
			w, err := bg.admitted(ctx, req, res.Object)
			if err != nil {
				fmt.Fprintf(stderr, "error: %s: %v\n", d.Where(), err)
				failed++
			}
			work = append(work, w...)
		}
	}
	if len(inputs) == 0 && len(o.files) == 0 {
		// No triggers: the scan of every policy that mutates existing objects, as when
		// the policies are created.
		w, err := bg.scan(ctx)
		if err != nil {
			fmt.Fprintf(stderr, "error: %v\n", err)
			failed++
		}
		work = append(work, w...)
	}
	failed += bg.run(ctx, work, o.explain, stderr)
	for _, t := range bg.targets() {
		outputs = append(outputs, t.after)
		patches = append(patches, engine.Diff(t.before, t.after))
		if o.output == "diff" {
			if err := writeDiff(stdout, objectName(t.before), t.before, t.after); err != nil {
				return err
			}
		}
	}
	if err := o.print(stdout, outputs, patches); err != nil {
		return err
	}
	switch {
	case failed > 0:
		return reportedError{fmt.Errorf("%d object(s) failed", failed)}
	case denied > 0:
		return deniedError{denied}
	}
	return nil
}

func (o *applyOptions) request(store *objects.Store, d policy.Document, op engine.Operation, olds []policy.Document, user engine.UserInfo) (*engine.Request, error) {
	req, err := offline.NewRequest(store, d, offline.RequestOptions{
		Operation: op, Namespace: o.namespace, Source: engine.Source(o.source), Olds: olds, UserInfo: user,
	})
	if err == nil && o.subresource != "" {
		req.Resource, req.SubResource = subresourceRequest(req.Kind, o.subresource)
	}
	return req, err
}

// subresourceRequest names the resource and subresource of a subresource request for an
// object of kind gvk. The flag is NAME, RESOURCE/NAME (the parent in the kind's group and
// version), VERSION/RESOURCE/NAME (core group) or GROUP/VERSION/RESOURCE/NAME
// (apps/v1/deployments/scale). With NAME alone, a Binding or an Eviction is posted to
// pods (core v1), and any other kind to its own resource (a Pod's status).
func subresourceRequest(gvk schema.GroupVersionKind, flag string) (schema.GroupVersionResource, string) {
	parts := strings.Split(flag, "/")
	sub := parts[len(parts)-1]
	switch len(parts) {
	case 2:
		return gvk.GroupVersion().WithResource(parts[0]), sub
	case 3:
		return schema.GroupVersionResource{Version: parts[0], Resource: parts[1]}, sub
	case 4:
		return schema.GroupVersionResource{Group: parts[0], Version: parts[1], Resource: parts[2]}, sub
	}
	switch {
	case gvk.Group == "" && gvk.Kind == "Binding", gvk.Group == "policy" && gvk.Kind == "Eviction":
		return schema.GroupVersionResource{Version: "v1", Resource: "pods"}, sub
	}
	plural, _ := meta.UnsafeGuessKindToResource(gvk)
	return plural, sub
}

func (o *applyOptions) print(w io.Writer, outputs []map[string]any, patches []engine.Patch) error {
	switch o.output {
	case "yaml":
		for i, obj := range outputs {
			b, err := yaml.Marshal(obj)
			if err != nil {
				return err
			}
			if i > 0 {
				if _, err := io.WriteString(w, "---\n"); err != nil {
					return err
				}
			}
			if _, err := w.Write(b); err != nil {
				return err
			}
		}
	case "json":
		var v any = map[string]any{"apiVersion": "v1", "kind": "List", "items": outputs}
		if len(outputs) == 1 {
			v = outputs[0]
		}
		b, err := json.MarshalIndent(v, "", "  ")
		if err != nil {
			return err
		}
		_, err = fmt.Fprintf(w, "%s\n", b)
		return err
	case "patch":
		for _, p := range patches {
			b, err := p.JSON()
			if err != nil {
				return err
			}
			if _, err := fmt.Fprintf(w, "%s\n", b); err != nil {
				return err
			}
		}
	}
	return nil
}

func writeDiff(w io.Writer, name string, before, after map[string]any) error {
	a, err := yaml.Marshal(before)
	if err != nil {
		return err
	}
	b, err := yaml.Marshal(after)
	if err != nil {
		return err
	}
	if bytes.Equal(a, b) {
		return nil
	}
	text, err := difflib.GetUnifiedDiffString(difflib.UnifiedDiff{
		A: difflib.SplitLines(string(a)), B: difflib.SplitLines(string(b)),
		FromFile: name + " (input)", ToFile: name + " (mutated)", Context: 3,
	})
	if err != nil {
		return err
	}
	_, err = io.WriteString(w, text)
	return err
}

// objectName names an object for users: Kind namespace/name, or Kind name.
func objectName(obj map[string]any) string {
	kind, _ := obj["kind"].(string)
	md, _ := obj["metadata"].(map[string]any)
	name, _ := md["name"].(string)
	if ns, _ := md["namespace"].(string); ns != "" {
		return fmt.Sprintf("%s %s/%s", kind, ns, name)
	}
	return fmt.Sprintf("%s %s", kind, name)
}

func explain(w io.Writer, name, where string, res *engine.Result) {
	mutated := res.Mutated()
	fmt.Fprintf(w, "%s (%s): ", name, where)
	if len(mutated) == 0 {
		fmt.Fprintf(w, "not mutated (%d passes)\n", res.Passes)
	} else {
		fmt.Fprintf(w, "changed by %d mutator(s) in %d pass(es)\n", len(mutated), res.Passes)
	}
	for _, c := range res.Trace {
		fmt.Fprintf(w, "  pass %d  %-40s %s\n", c.Pass, c.ID, strings.Join(c.Paths, ", "))
	}
	for _, f := range res.Failures {
		fmt.Fprintf(w, "  skipped %s: %v\n", f.ID, f.Err)
	}
	for _, n := range res.Notes {
		fmt.Fprintf(w, "  %s\n", explainNote(n))
	}
}

// explainNote words a policy's note for --explain.
func explainNote(n engine.Note) string {
	switch n.Kind {
	case engine.NoteEvent:
		return fmt.Sprintf("event Normal %s: %s", n.Reason, n.Message)
	case engine.NoteExemption:
		return fmt.Sprintf("exempted from %s: %s", n.ID, n.Message)
	case engine.NoteSkipped:
		return fmt.Sprintf("%s: part skipped (%s): %s", n.ID, n.Reason, n.Message)
	case engine.NoteRewrite:
		return fmt.Sprintf("%s autogen for %s evaluates: %s", n.ID, n.Reason, n.Message)
	case engine.NoteNondeterministic:
		return fmt.Sprintf("%s calls %s: its result may differ from run to run", n.ID, n.Message)
	}
	return n.String()
}
