package webhook

import (
	"encoding/json"
	"fmt"
	"maps"
	"time"

	"github.com/morph-dev/morph/internal/engine"
)

// runtime is everything built from one snapshot. It is immutable once built and swapped
// as a whole, so that a request sees one consistent policy set from start to end.
type runtime struct {
	// set holds every policy that runs at admission: what /mutate runs.
	set *engine.Set
	// groups hold the same policies by webhook group: what /mutate/<group> runs.
	groups     map[string]*engine.Set
	validators *engine.Validators
	valGroups  map[string]*engine.Validators
	// noValidators answers a validation group no loaded policy belongs to.
	noValidators *engine.Validators
	conversions  *engine.Conversions
	namespaces   NamespaceLookup
	// describers word the log line of a policy's failure, for the policies that do.
	describers map[engine.ID]func(kind, name string, err error) string
	// stats are the statistics sources by route and entry.
	stats  map[string]map[string][]statsSource
	counts PolicyCounts
	notes  []string
	loaded time.Time
}

// PolicyCounts is how many compiled policies of each sort a runtime serves (mutators
// turned off at admission are not counted).
type PolicyCounts struct {
	Mutators   int `json:"mutators"`
	Finalizers int `json:"finalizers"`
	Validators int `json:"validators"`
	Converters int `json:"converters"`
}

type statsSource struct {
	id      engine.ID
	entries func() map[string]any
}

// newRuntime builds the engine structures of a snapshot.
func newRuntime(snap *Snapshot, now time.Time) (*runtime, error) {
	b := snap.Bundle
	rt := &runtime{
		namespaces: snap.Namespaces,
		describers: map[engine.ID]func(string, string, error) string{},
		stats:      map[string]map[string][]statsSource{},
		counts: PolicyCounts{
			Finalizers: len(b.Finalizers), Validators: len(b.Validators), Converters: len(b.Converters),
		},
		notes:  snap.Notes,
		loaded: now,
	}
	var mutators []engine.Mutator
	byGroup := map[string][]engine.Mutator{}
	for _, m := range b.Mutators {
		rt.addStats(m.Descriptor)
		if m.AdmissionOff {
			continue
		}
		if m.DescribeFailure != nil {
			rt.describers[m.ID] = m.DescribeFailure
		}
		mutators = append(mutators, m)
		g := MutationGroup(m.Descriptor)
		byGroup[g] = append(byGroup[g], m)
	}
	rt.counts.Mutators = len(mutators)
	var err error
	if rt.set, err = engine.NewSet(mutators, b.Finalizers...); err != nil {
		return nil, fmt.Errorf("building the policy set: %w", err)
	}
	rt.groups = make(map[string]*engine.Set, len(byGroup))
	for g, ms := range byGroup {
		if rt.groups[g], err = engine.NewSet(ms, b.Finalizers...); err != nil {
			return nil, fmt.Errorf("building the policy set of webhook group %s: %w", g, err)
		}
	}
	var validators []engine.Validator
	valByGroup := map[string][]engine.Validator{}
	for _, v := range b.Validators {
		rt.addStats(v.Descriptor)
		if v.AdmissionOff {
			continue
		}
		validators = append(validators, v)
		g := ValidationGroup(v.Descriptor)
		valByGroup[g] = append(valByGroup[g], v)
	}
	rt.validators = engine.NewValidators(validators)
	rt.noValidators = engine.NewValidators(nil)
	rt.valGroups = make(map[string]*engine.Validators, len(valByGroup))
	for g, vs := range valByGroup {
		rt.valGroups[g] = engine.NewValidators(vs)
	}
	for _, c := range b.Converters {
		rt.addStats(c.Descriptor)
	}
	if rt.conversions, err = engine.NewConversions(b.Converters); err != nil {
		return nil, err
	}
	return rt, nil
}

// mutationSet is what /mutate (group "") or /mutate/<group> runs; nil for a group no
// policy of this runtime belongs to.
func (rt *runtime) mutationSet(group string) *engine.Set {
	if group == "" {
		return rt.set
	}
	return rt.groups[group]
}

// validatorsOf is what /validate (group "") or /validate/<group> runs.
func (rt *runtime) validatorsOf(group string) *engine.Validators {
	if group == "" {
		return rt.validators
	}
	if v := rt.valGroups[group]; v != nil {
		return v
	}
	return rt.noValidators
}

func (rt *runtime) addStats(d engine.Descriptor) {
	if d.Stats == nil || d.Stats.Route == "" || d.Stats.Entries == nil {
		return
	}
	route := rt.stats[d.Stats.Route]
	if route == nil {
		route = map[string][]statsSource{}
		rt.stats[d.Stats.Route] = route
	}
	for entry := range d.Stats.Entries() {
		route[entry] = append(route[entry], statsSource{id: d.ID, entries: d.Stats.Entries})
	}
}

// entryStats merges the statistics of one entry of a route into one JSON object.
func (rt *runtime) entryStats(route, entry string) (map[string]any, bool, error) {
	sources, ok := rt.stats[route][entry]
	if !ok {
		return nil, false, nil
	}
	out := map[string]any{}
	for _, s := range sources {
		data, err := json.Marshal(s.entries()[entry])
		if err != nil {
			return nil, true, fmt.Errorf("statistics of %s: %w", s.id, err)
		}
		var obj map[string]any
		if json.Unmarshal(data, &obj) == nil && obj != nil {
			maps.Copy(out, obj)
			continue
		}
		out[s.id.String()] = json.RawMessage(data)
	}
	return out, true, nil
}
