package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"slices"
	"strings"

	"github.com/spf13/cobra"
	"sigs.k8s.io/yaml"

	"github.com/morph-dev/morph/internal/dialect/katalog"
	"github.com/morph-dev/morph/internal/engine"
	"github.com/morph-dev/morph/internal/objects"
	"github.com/morph-dev/morph/internal/policy"
)

type convertOptions struct {
	policies []string
	files    []string
	contexts []string
	to       string
	output   string
	reader   policy.Reader // bounded by --max-input
}

// newConvertCommand is `morph convert`: CRD conversion offline, with the conversion
// paths of Katalogs, as the /convert webhook would do it.
func newConvertCommand(stdin io.Reader, stdout, stderr io.Writer) *cobra.Command {
	o := &convertOptions{}
	cmd := &cobra.Command{
		Use:   "convert -p KATALOG... -f FILE... --to GROUP/VERSION",
		Short: "Convert custom resources between versions with Katalog conversion paths, offline",
		Long: `Convert objects to another version of their custom resource with the
conversion paths of Katalogs (conversion.paths), and print them in input order.

KATALOG and FILE are files, folders (their .yaml, .yml and .json files) or - for
standard input. --to is GROUP/VERSION, or VERSION alone for each object's own group.
Fields a path does not declare pass through unchanged; when no path leads directly to
the target, the conversion goes through the storage version. Objects already at the
target version are printed unchanged. Non-Katalog documents among the policies, and
--context files, are context: the CRDs among them type the converted fields.

Nothing is printed unless every object converts. Exit codes: 0 done, 1 a Katalog or
object could not be loaded or converted, 2 usage.`,
		Example: `  morph convert -p katalog.yaml -f cronjob-v1.yaml --to demo.orkestra.io/v2
  kubectl get cronjobs.demo.orkestra.io -o yaml | morph convert -p katalogs/ -f - --to v1 -o json`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			ctx := cmd.Context()
			if ctx == nil {
				ctx = context.Background()
			}
			rd, err := inputReader(cmd)
			if err != nil {
				return err
			}
			o.reader = rd
			return o.run(ctx, stdin, stdout, stderr)
		},
	}
	f := cmd.Flags()
	f.StringSliceVarP(&o.policies, "policy", "p", nil, "Katalog files or folders (repeatable)")
	f.StringSliceVarP(&o.files, "filename", "f", nil, "objects to convert: files, folders or - for stdin (repeatable)")
	f.StringSliceVar(&o.contexts, "context", nil, "objects that exist in the cluster, such as the CRDs (repeatable)")
	f.StringVar(&o.to, "to", "", "target GROUP/VERSION, or VERSION for each object's own group")
	f.StringVarP(&o.output, "output", "o", "yaml", "output: yaml or json")
	cmd.SetFlagErrorFunc(func(_ *cobra.Command, err error) error { return usageError{err} })
	return cmd
}

func (o *convertOptions) validate() error {
	switch {
	case len(o.policies) == 0:
		return usagef("--policy/-p is required: give the Katalogs that declare conversion.paths")
	case len(o.files) == 0:
		return usagef("--filename/-f is required: give the objects to convert")
	case o.to == "":
		return usagef("--to is required: give the target GROUP/VERSION, such as demo.orkestra.io/v2")
	case strings.Count(o.to, "/") > 1 || strings.HasPrefix(o.to, "/") || strings.HasSuffix(o.to, "/"):
		return usagef("--to %q: give GROUP/VERSION or VERSION", o.to)
	case o.output != "yaml" && o.output != "json":
		return usagef("--output %q: use yaml or json", o.output)
	}
	stdins := 0
	for _, p := range slices.Concat(o.policies, o.files, o.contexts) {
		if p == "-" {
			stdins++
		}
	}
	if stdins > 1 {
		return usagef("standard input (-) can be read only once: give it to one of -p, -f and --context")
	}
	return nil
}

func (o *convertOptions) run(ctx context.Context, stdin io.Reader, stdout, stderr io.Writer) error {
	if err := o.validate(); err != nil {
		return err
	}
	converters, err := o.load(stdin, stderr)
	if err != nil {
		return err
	}
	inputs, err := o.reader.Read(o.files, stdin)
	if err != nil {
		return err
	}
	var out []map[string]any
	var errs []error
	for _, d := range inputs {
		obj, err := convertDocument(ctx, converters, d, o.to)
		if err != nil {
			errs = append(errs, err)
			continue
		}
		out = append(out, obj)
	}
	if len(errs) > 0 {
		return errors.Join(errs...)
	}
	return writeConverted(stdout, out, o.output)
}

// load compiles the Katalogs, with the context objects and the non-Katalog documents
// among the policies as context.
func (o *convertOptions) load(stdin io.Reader, stderr io.Writer) (*engine.Conversions, error) {
	store := objects.NewStore()
	ctxDocs, err := o.reader.Read(o.contexts, stdin)
	if err != nil {
		return nil, err
	}
	docs, err := o.reader.Read(o.policies, stdin)
	if err != nil {
		return nil, err
	}
	dialect := katalog.New(katalog.Options{Objects: store})
	var katalogs []policy.Document
	for _, d := range slices.Concat(ctxDocs, docs) {
		if dialect.Handles(d.APIVersion(), d.Kind()) {
			katalogs = append(katalogs, d)
			continue
		}
		if err := store.Add(d.Object); err != nil {
			return nil, fmt.Errorf("%s: context object: %w", d.Where(), err)
		}
	}
	if len(katalogs) == 0 {
		return nil, fmt.Errorf("no Katalog found in %s: give files holding %s %s documents", strings.Join(o.policies, ", "), katalog.APIVersion, katalog.Kind)
	}
	bundle, err := dialect.Compile(katalogs)
	if err != nil {
		return nil, err
	}
	for _, w := range bundle.Warnings {
		fmt.Fprintln(stderr, "warning:", w)
	}
	if len(bundle.Converters) == 0 {
		return nil, fmt.Errorf("the Katalogs in %s declare no conversion paths", strings.Join(o.policies, ", "))
	}
	return engine.NewConversions(bundle.Converters)
}

// convertDocument converts one object to target (GROUP/VERSION or VERSION) with the
// one conversion function the webhook's /convert uses too.
func convertDocument(ctx context.Context, conversions *engine.Conversions, d policy.Document, target string) (map[string]any, error) {
	out, _, err := conversions.Convert(ctx, d.Object, target)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", d.Where(), err)
	}
	return out, nil
}

// writeConverted prints YAML documents separated by ---, or JSON: one object as is,
// several as a v1 List.
func writeConverted(w io.Writer, objs []map[string]any, output string) error {
	if output == "json" {
		var v any = map[string]any{"apiVersion": "v1", "kind": "List", "items": objs}
		if len(objs) == 1 {
			v = objs[0]
		}
		b, err := json.MarshalIndent(v, "", "  ")
		if err != nil {
			return fmt.Errorf("encoding the output: %w", err)
		}
		_, err = fmt.Fprintf(w, "%s\n", b)
		return err
	}
	for i, obj := range objs {
		b, err := yaml.Marshal(obj)
		if err != nil {
			return fmt.Errorf("encoding the output: %w", err)
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
	return nil
}
