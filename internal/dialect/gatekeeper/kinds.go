package gatekeeper

// GroupKinds lists the kinds of the groups the dialect owns, so that a misspelled kind
// (`Assing`) is refused rather than taken for a context object (policy.GroupKinds).
func (d *Dialect) GroupKinds() map[string][]string {
	return map[string][]string{
		"mutations.gatekeeper.sh":    {kindAssign, kindAssignImage, kindAssignMetadata, kindModifySet},
		"externaldata.gatekeeper.sh": {"Provider", "ExternalDataProvider"},
	}
}
