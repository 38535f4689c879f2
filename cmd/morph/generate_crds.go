package main

import (
	"io"

	"github.com/spf13/cobra"

	"github.com/morph-dev/morph/internal/cluster/crds"
)

// newGenerateCRDsCommand is `morph generate crds`: the CustomResourceDefinitions of the
// policy kinds morph serves from a cluster.
func newGenerateCRDsCommand(stdout io.Writer) *cobra.Command {
	return &cobra.Command{
		Use:   "crds",
		Short: "Print the CustomResourceDefinitions of the policy kinds morph serves from a cluster",
		Long: `Print, as YAML, the CustomResourceDefinitions of every policy kind morph serve
reads from the API server: mutations.gatekeeper.sh Assign, AssignMetadata, ModifySet
and AssignImage, externaldata.gatekeeper.sh Provider, policies.kyverno.io
MutatingPolicy, NamespacedMutatingPolicy and PolicyException, and
orkestra.orkspace.io Katalog. Each has a structural schema of the fields morph reads,
a status subresource (condition Ready, written by morph) and the label
app.kubernetes.io/managed-by=morph. It also prints morph's own
backgroundrequests.morph.dev (BackgroundRequest): the triggers of policies that
mutate existing objects, recorded by the replica that admitted them and processed by
the leader (docs/cluster.md).

morph serve does not install CRDs: create these once (or with the Helm chart). When
Gatekeeper or Kyverno already installed a CRD of the same name, keep theirs: morph
reads policies through it and says so in its log. kubectl create never replaces a
CRD (kubectl apply would), so create rather than apply (see docs/cluster.md).

MutatingAdmissionPolicies are served by kube-apiserver itself; morph serve does not
apply them in a cluster, so they have no CRD here.`,
		Example: `  morph generate crds | kubectl create -f -`,
		Args:    cobra.NoArgs,
		RunE: func(*cobra.Command, []string) error {
			return crds.Write(stdout)
		},
	}
}
