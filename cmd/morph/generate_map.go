package main

import (
	"errors"
	"fmt"
	"io"

	"github.com/spf13/cobra"
	"sigs.k8s.io/yaml"

	"github.com/morph-dev/morph/internal/dialect/cel"
	"github.com/morph-dev/morph/internal/policy"
)

// newGenerateMapCommand is `morph generate map -p FILE`: it prints the
// MutatingAdmissionPolicy and binding equivalent to each Kyverno MutatingPolicy.
func newGenerateMapCommand(stdin io.Reader, stdout, stderr io.Writer) *cobra.Command {
	var paths []string
	cmd := &cobra.Command{
		Use:   "map -p FILE",
		Short: "Print the MutatingAdmissionPolicy and binding equivalent to Kyverno MutatingPolicies",
		Long: `Print, for each Kyverno MutatingPolicy in the given files, the Kubernetes
MutatingAdmissionPolicy and MutatingAdmissionPolicyBinding that do the same, for the
API server to run. A policy using a feature only Kyverno has (its CEL libraries
resource., http., globalContext., image(), parseServiceAccount(); mutateExisting;
autogen for pod controllers; PolicyExceptions; namespaced policies) is an error
naming the feature.

A Pod policy without spec.autogen gets, in Kyverno 1.19, rules for the pod templates
of CronJobs, DaemonSets, Deployments, Jobs, ReplicaSets and StatefulSets too (autogen
is on by default); the MutatingAdmissionPolicy matches Pods only. The map says so in
a note (on the standard error and as a comment in the output).`,
		Args:          cobra.NoArgs,
		SilenceUsage:  true,
		SilenceErrors: true,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if len(paths) == 0 {
				return errors.New("give the policies with -p FILE (- for standard input)")
			}
			rd, err := inputReader(cmd)
			if err != nil {
				return err
			}
			docs, err := rd.Read(paths, stdin)
			if err != nil {
				return err
			}
			objs, notes, genErr := cel.GenerateMutatingAdmissionPolicies(docs)
			// The notes go to the standard error and, as comments, at the head of the
			// map itself, so that whoever applies it reads them.
			for _, n := range notes {
				fmt.Fprintln(stderr, "note:", n)
				fmt.Fprintln(stdout, "# note:", n)
			}
			for i, o := range objs {
				if i > 0 {
					fmt.Fprintln(stdout, "---")
				}
				y, err := yaml.Marshal(o)
				if err != nil {
					return fmt.Errorf("printing the generated policy: %w", err)
				}
				if _, err := stdout.Write(y); err != nil {
					return err
				}
			}
			if genErr != nil {
				for _, e := range policy.Errors(genErr) {
					fmt.Fprintln(stderr, "error:", e)
				}
				return errors.New("some policies have no MutatingAdmissionPolicy equivalent")
			}
			return nil
		},
	}
	cmd.SetIn(stdin)
	cmd.SetOut(stdout)
	cmd.SetErr(stderr)
	cmd.Flags().StringArrayVarP(&paths, "policy", "p", nil, "a policy file or folder (- for standard input); may be repeated")
	return cmd
}
