// Command morph applies Kubernetes mutation policies written as Gatekeeper mutators,
// CEL policies (Kyverno MutatingPolicy, Kubernetes MutatingAdmissionPolicy) or Katalog
// rules: offline on YAML (morph apply), as a webhook server (morph serve), and as CRD
// conversion (morph convert).
//
// Exit codes: 0 done, 1 a policy or input could not be loaded or evaluated, 2 usage,
// 3 an object was denied.
package main

import (
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"

	"github.com/spf13/cobra"

	"github.com/morph-dev/morph/internal/objects"
	"github.com/morph-dev/morph/internal/policy"
)

// Exit codes.
const (
	exitOK     = 0
	exitError  = 1
	exitUsage  = 2
	exitDenied = 3
)

// usageError is a mistake in the command line.
type usageError struct{ err error }

func (e usageError) Error() string { return e.err.Error() }
func (e usageError) Unwrap() error { return e.err }

func usagef(format string, args ...any) error { return usageError{fmt.Errorf(format, args...)} }

// deniedError means an object was refused by a validation rule; the messages were
// already printed.
type deniedError struct{ count int }

func (e deniedError) Error() string { return fmt.Sprintf("%d object(s) denied", e.count) }

// reportedError means the details were already printed; only the exit code is left.
type reportedError struct{ err error }

func (e reportedError) Error() string { return e.err.Error() }

func main() {
	os.Exit(runAs(displayName(os.Args[0]), os.Args[1:], os.Stdin, os.Stdout, os.Stderr))
}

// displayName is how usage and help name the command: "kubectl morph" when the binary
// runs as the kubectl plugin kubectl-morph, else "morph".
func displayName(argv0 string) string {
	if strings.HasPrefix(filepath.Base(argv0), "kubectl-") {
		return "kubectl morph"
	}
	return "morph"
}

func run(args []string, stdin io.Reader, stdout, stderr io.Writer) int {
	return runAs("morph", args, stdin, stdout, stderr)
}

func runAs(name string, args []string, stdin io.Reader, stdout, stderr io.Writer) int {
	root := newRootCommand(stdin, stdout, stderr)
	if name != root.Name() {
		root.Annotations = map[string]string{cobra.CommandDisplayNameAnnotation: name}
	}
	root.SetArgs(args)
	err := root.Execute()
	if err == nil {
		return exitOK
	}
	var reported reportedError
	if !errors.As(err, &reported) {
		fmt.Fprintln(stderr, "error:", err)
	}
	return exitCode(err)
}

func exitCode(err error) int {
	var usage usageError
	var denied deniedError
	switch {
	case err == nil:
		return exitOK
	case errors.As(err, &usage):
		return exitUsage
	case errors.As(err, &denied):
		return exitDenied
	}
	return exitError
}

// dialectOptions are the flags every command that loads policies shares.
type dialectOptions struct {
	allowExternalData   bool
	mutationAnnotations bool
	httpAllowHosts      []string
	registryAllowHosts  []string
	// cluster answers CEL resource.Get/List and globalContext.Get in a cluster (zero:
	// the context store).
	cluster clusterReaders
	// kyvernoCLI asks for the Kyverno CLI's conventions (morph test's kyverno-test.yaml).
	kyvernoCLI bool
}

func newRootCommand(stdin io.Reader, stdout, stderr io.Writer) *cobra.Command {
	opts := &dialectOptions{}
	root := &cobra.Command{
		Use:           "morph",
		Short:         "One mutation engine for Gatekeeper, CEL and Katalog policies",
		SilenceUsage:  true,
		SilenceErrors: true,
	}
	root.SetIn(stdin)
	root.SetOut(stdout)
	root.SetErr(stderr)
	root.SetFlagErrorFunc(func(_ *cobra.Command, err error) error { return usageError{err} })
	pf := root.PersistentFlags()
	pf.BoolVar(&opts.allowExternalData, "allow-external-data", false, "let Gatekeeper mutators call their ExternalDataProviders (off by default offline)")
	pf.BoolVar(&opts.mutationAnnotations, "mutation-annotations", false, "add Gatekeeper's gatekeeper.sh/mutation-id and gatekeeper.sh/mutations annotations")
	pf.StringSliceVar(&opts.httpAllowHosts, "allow-http-host", nil, "hosts CEL http.Get/http.Post may call (none by default)")
	pf.StringSliceVar(&opts.registryAllowHosts, "allow-registry", nil, "registries (host or host:port) CEL image.getMetadata may read, anonymously, for images the --context files do not describe (none by default)")
	addMaxInputFlag(root)

	newLoader := func(store *objects.Store) *policy.Loader { return newDialects(store, opts) }
	newClusterLoader := func(store *objects.Store, r clusterReaders) *policy.Loader {
		o := *opts
		o.cluster = r
		return newDialects(store, &o)
	}
	root.AddCommand(
		newApplyCommand(newLoader, stdin, stdout, stderr),
		newServeCommand(newLoader, newClusterLoader, stdout, stderr),
		newVersionCommand(stdout),
	)
	addDialectCommands(root, opts, newLoader, stdin, stdout, stderr)
	return root
}

func newVersionCommand(stdout io.Writer) *cobra.Command {
	return &cobra.Command{
		Use:   "version",
		Short: "Print morph's version",
		Args:  cobra.NoArgs,
		RunE: func(*cobra.Command, []string) error {
			_, err := fmt.Fprintln(stdout, "morph", version)
			return err
		},
	}
}

// version is set at build time with -ldflags "-X main.version=...".
var version = "dev"
