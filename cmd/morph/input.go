package main

import (
	"github.com/spf13/cobra"
	"k8s.io/apimachinery/pkg/api/resource"

	"github.com/morph-dev/morph/internal/policy"
)

// maxInputFlag is the root's --max-input: the largest input (a file or standard input)
// any command reads, and the most a document's YAML aliases may expand to.
const maxInputFlag = "max-input"

func addMaxInputFlag(cmd *cobra.Command) {
	cmd.PersistentFlags().String(maxInputFlag, resource.NewQuantity(policy.DefaultMaxInput, resource.BinarySI).String(),
		"largest input file or standard input read, and the most a document's YAML aliases may expand to (bytes, or a quantity such as 64Mi)")
}

// inputReader returns the document reader the command's --max-input asks for.
func inputReader(cmd *cobra.Command) (policy.Reader, error) {
	f := cmd.Flag(maxInputFlag)
	if f == nil {
		return policy.Reader{}, nil
	}
	q, err := resource.ParseQuantity(f.Value.String())
	if err != nil || q.Sign() <= 0 {
		return policy.Reader{}, usagef("--max-input %q is not a positive size: use bytes or a quantity such as 64Mi", f.Value.String())
	}
	return policy.Reader{MaxBytes: q.Value()}, nil
}
