package main

import (
	"context"
	"fmt"
	"io"

	"github.com/spf13/cobra"

	"github.com/morph-dev/morph/internal/suite"
)

type testOptions struct {
	output string
	update bool
}

func newTestCommand(hooks suite.Hooks, stdout io.Writer) *cobra.Command {
	o := &testOptions{}
	cmd := &cobra.Command{
		Use:   "test [PATH...]",
		Short: "Run policy test suites: morph's own and the Kyverno CLI's",
		Long: `Run the policy tests found in PATH (default: the current folder).

A folder is searched recursively for morph-test.yaml and *.morph-test.yaml (morph's
format, for every dialect: docs/testing.md) and kyverno-test.yaml (the Kyverno CLI's
format, run with the Kyverno CLI's conventions). A file is run whatever its name.

--update rewrites the expected objects of morph tests (expect.object, expect.objectFile)
from the current results and shows the diff: snapshot testing.

Exit codes: 0 every case passed, 1 a case failed, 2 usage.`,
		Example: `  morph test examples/
  morph test policies/ -o junit > report.xml
  morph test --update policies/pod-defaults.morph-test.yaml`,
		RunE: func(cmd *cobra.Command, args []string) error {
			return o.run(cmd.Context(), hooks, args, stdout)
		},
	}
	f := cmd.Flags()
	f.StringVarP(&o.output, "output", "o", "table", "output: table, json or junit")
	f.BoolVar(&o.update, "update", false, "rewrite the expected objects of morph tests from the results")
	return cmd
}

func (o *testOptions) run(ctx context.Context, hooks suite.Hooks, paths []string, stdout io.Writer) error {
	var write func(io.Writer, *suite.Report) error
	switch o.output {
	case "table":
		write = suite.WriteTable
	case "json":
		write = suite.WriteJSON
	case "junit":
		write = suite.WriteJUnit
	default:
		return usagef("--output %q: use table, json or junit", o.output)
	}
	if len(paths) == 0 {
		paths = []string{"."}
	}
	files, err := suite.Discover(paths)
	if err != nil {
		return usageError{err}
	}
	if len(files) == 0 {
		return usagef("no test files (morph-test.yaml, *.morph-test.yaml, kyverno-test.yaml) in %v", paths)
	}
	if ctx == nil {
		ctx = context.Background()
	}
	runner := &suite.Runner{Hooks: hooks, Update: o.update}
	rep := runner.Run(ctx, files)
	if err := write(stdout, rep); err != nil {
		return err
	}
	if n := rep.Failed(); n > 0 {
		return reportedError{fmt.Errorf("%d test case(s) failed", n)}
	}
	return nil
}
