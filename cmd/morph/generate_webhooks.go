package main

import (
	"fmt"
	"io"
	"os"
	"strconv"
	"strings"

	"github.com/spf13/cobra"

	"github.com/morph-dev/morph/internal/objects"
	"github.com/morph-dev/morph/internal/policy"
	"github.com/morph-dev/morph/internal/webhook"
)

type generateWebhooksOptions struct {
	policies  string
	contexts  []string
	url       string
	service   string
	caFile    string
	namespace string
	name      string
}

func newGenerateWebhooksCommand(newLoader func(*objects.Store) *policy.Loader, stdout, stderr io.Writer) *cobra.Command {
	o := &generateWebhooksOptions{}
	cmd := &cobra.Command{
		Use:   "webhooks --policies DIR (--url https://HOST:PORT | --service NS/NAME[:PORT]) [--ca-file ca.crt]",
		Short: "Print the webhook configurations that send the policies' requests to morph serve",
		Long: `Print, as YAML, the MutatingWebhookConfiguration (when there are mutators) and the
ValidatingWebhookConfiguration (when there are validation rules) that register
morph serve for the policies of a folder.

Webhook rules come from the policies' targets (kinds become resources; operations
as the policies say, so CREATE-only Katalog entries register CREATE only).
Policies are grouped into one webhook per distinct (failurePolicy, reinvocation,
timeout): failurePolicy Fail for policies that fail closed, Ignore otherwise;
reinvocationPolicy IfNeeded for policies that run again when the object changed;
timeoutSeconds from the policies (at most 30, default 10). Every webhook has
sideEffects None, admissionReviewVersions [v1], matchPolicy Equivalent, and a
namespaceSelector excluding kube-system and morph's own --namespace.

The caBundle is --ca-file (the ca.crt morph serve --cert-dir writes), else the
file TLS_CERT names. With --service a caBundle is required.`,
		Example: `  morph generate webhooks --policies policies/ --url https://127.0.0.1:8443 --ca-file /tmp/morph-certs/ca.crt | kubectl apply -f -
  morph generate webhooks --policies policies/ --service morph-system/morph --ca-file ca.crt`,
		Args: cobra.NoArgs,
		RunE: func(*cobra.Command, []string) error {
			return o.run(newLoader, os.LookupEnv, stdout, stderr)
		},
	}
	f := cmd.Flags()
	f.StringVarP(&o.policies, "policies", "p", "", "folder (or file) of policies")
	f.StringSliceVar(&o.contexts, "context", nil, "objects that exist in the cluster: Namespaces, CRDs, params (repeatable)")
	f.StringVar(&o.url, "url", "", "base URL the API server calls: https://HOST:PORT")
	f.StringVar(&o.service, "service", "", "Service in front of morph serve: NAMESPACE/NAME or NAMESPACE/NAME:PORT (port 443 by default)")
	f.StringVar(&o.caFile, "ca-file", "", "PEM CA that signed the serving certificate (the caBundle)")
	f.StringVar(&o.namespace, "namespace", "morph-system", "namespace morph runs in (excluded from admission, as kube-system is)")
	f.StringVar(&o.name, "name", "morph", "name of the webhook configurations")
	return cmd
}

func parseService(s string) (*webhook.ServiceRef, error) {
	ns, rest, ok := strings.Cut(s, "/")
	if !ok || ns == "" || rest == "" {
		return nil, usagef("--service %q: use NAMESPACE/NAME or NAMESPACE/NAME:PORT", s)
	}
	ref := &webhook.ServiceRef{Namespace: ns, Name: rest}
	if name, port, ok := strings.Cut(rest, ":"); ok {
		p, err := strconv.ParseInt(port, 10, 32)
		if err != nil || p < 1 || p > 65535 {
			return nil, usagef("--service %q: port %q is not a port number", s, port)
		}
		ref.Name, ref.Port = name, int32(p)
	}
	return ref, nil
}

func (o *generateWebhooksOptions) run(newLoader func(*objects.Store) *policy.Loader, lookup func(string) (string, bool), stdout, stderr io.Writer) error {
	if o.policies == "" {
		return usagef("--policies is required: give the folder of policies to register")
	}
	opts := webhook.ConfigOptions{Name: o.name, Namespace: o.namespace, URL: o.url}
	if o.service != "" {
		ref, err := parseService(o.service)
		if err != nil {
			return err
		}
		opts.Service = ref
	}
	caFile := o.caFile
	if caFile == "" {
		caFile, _ = lookup(envTLSCert)
	}
	switch {
	case caFile != "":
		data, err := os.ReadFile(caFile)
		if err != nil {
			return fmt.Errorf("webhook registration: reading CA bundle: %w", err)
		}
		if !strings.Contains(string(data), "-----BEGIN CERTIFICATE-----") {
			return fmt.Errorf("webhook registration: reading CA bundle: %s holds no PEM certificate", caFile)
		}
		opts.CABundle = data
	case opts.Service != nil:
		return usagef("webhook registration: reading CA bundle: %s is required — give --ca-file FILE (morph serve --cert-dir writes ca.crt) or set %s", envTLSCert, envTLSCert)
	default:
		fmt.Fprintln(stderr, "warning: no caBundle (--ca-file): the API server must trust the serving certificate through its own roots")
	}
	src := &webhook.FolderSource{Policies: o.policies, Context: o.contexts, NewLoader: newLoader}
	snap, err := src.Load()
	if err != nil {
		for _, e := range policy.Errors(err) {
			fmt.Fprintln(stderr, "error:", e)
		}
		return reportedError{fmt.Errorf("the policies did not load")}
	}
	for _, n := range snap.Notes {
		fmt.Fprintln(stderr, "warning:", n)
	}
	out, err := webhook.ConfigurationsYAML(snap.Bundle, opts)
	if err != nil {
		return usageError{err}
	}
	if len(out) == 0 {
		fmt.Fprintln(stderr, "warning: the policies hold no mutators and no validation rules: no webhook configuration to print")
		return nil
	}
	_, err = stdout.Write(out)
	return err
}
