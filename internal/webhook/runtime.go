package webhook

import (
	"context"
	"encoding/json"
	"fmt"
	"time"

	"k8s.io/apimachinery/pkg/runtime/schema"

	"github.com/morph-dev/morph/internal/engine"
)

// runtime is everything built from one snapshot. It is immutable once built and swapped
// as a whole, so that a request sees one consistent policy set from start to end.
type runtime struct {
	set        *engine.Set
	validators *engine.Validators
	converters map[schema.GroupKind]engine.Converter
	namespaces NamespaceLookup
	// failure is the failure policy of every mutator, by ID, to answer a deadline.
	failure map[engine.ID]engine.FailurePolicy
	// describers are the mutators that word their own failure's log line.
	describers map[engine.ID]FailureDescriber
	// entries maps a /katalog entry to the policies exposing statistics under it.
	entries map[string][]statsSource
	counts  PolicyCounts
	notes   []string
	loaded  time.Time
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
	id    engine.ID
	stats StatsProvider
}

// newRuntime builds the engine structures of a snapshot.
func newRuntime(snap *Snapshot, now time.Time) (*runtime, error) {
	b := snap.Bundle
	rt := &runtime{
		converters: make(map[schema.GroupKind]engine.Converter, len(b.Converters)),
		namespaces: snap.Namespaces,
		failure:    make(map[engine.ID]engine.FailurePolicy, len(b.Mutators)),
		entries:    map[string][]statsSource{},
		counts: PolicyCounts{
			Mutators: len(b.Mutators), Finalizers: len(b.Finalizers),
			Validators: len(b.Validators), Converters: len(b.Converters),
		},
		notes:  snap.Notes,
		loaded: now,
	}
	mutators := make([]engine.Mutator, 0, len(b.Mutators))
	for _, m := range b.Mutators {
		rt.addStats(m.ID(), m)
		if !atAdmission(m) {
			continue
		}
		rt.failure[m.ID()] = m.FailurePolicy()
		if d, ok := m.(FailureDescriber); ok {
			if rt.describers == nil {
				rt.describers = map[engine.ID]FailureDescriber{}
			}
			rt.describers[m.ID()] = d
		}
		mutators = append(mutators, withDeadline(m))
	}
	rt.counts.Mutators = len(mutators)
	set, err := engine.NewSet(mutators, b.Finalizers...)
	if err != nil {
		return nil, fmt.Errorf("building the policy set: %w", err)
	}
	rt.set = set
	validators := make([]engine.Validator, 0, len(b.Validators))
	for _, v := range b.Validators {
		rt.addStats(v.ID(), v)
		if atAdmission(v) {
			validators = append(validators, v)
		}
	}
	rt.validators = engine.NewValidators(validators)
	for _, c := range b.Converters {
		gk := c.GroupKind()
		if prev, dup := rt.converters[gk]; dup {
			return nil, fmt.Errorf("%s and %s both convert %s: keep one conversion policy per kind", prev.ID(), c.ID(), gk)
		}
		rt.converters[gk] = c
		rt.addStats(c.ID(), c)
	}
	return rt, nil
}

// atAdmission reports whether a mutator or validator runs at admission (see
// AdmissionApplier).
func atAdmission(m any) bool {
	a, ok := m.(AdmissionApplier)
	return !ok || a.AppliesAtAdmission()
}

func (rt *runtime) addStats(id engine.ID, policy any) {
	if multi, ok := policy.(EntryStatsProvider); ok {
		for entry := range multi.EntryStats() {
			rt.entries[entry] = append(rt.entries[entry], statsSource{id: id, stats: entryStats{multi, entry}})
		}
	}
	sp, ok := policy.(StatsProvider)
	if !ok {
		return
	}
	entry := id.Name
	if en, ok := policy.(EntryNamer); ok && en.Entry() != "" {
		entry = en.Entry()
	}
	rt.entries[entry] = append(rt.entries[entry], statsSource{id: id, stats: sp})
}

// entryStats reads one entry of an EntryStatsProvider.
type entryStats struct {
	p     EntryStatsProvider
	entry string
}

func (e entryStats) Stats() any { return e.p.EntryStats()[e.entry] }

// entryStats merges the statistics of one entry into one JSON object.
func (rt *runtime) entryStats(entry string) (map[string]any, bool, error) {
	sources, ok := rt.entries[entry]
	if !ok {
		return nil, false, nil
	}
	out := map[string]any{}
	for _, s := range sources {
		data, err := json.Marshal(s.stats.Stats())
		if err != nil {
			return nil, true, fmt.Errorf("statistics of %s: %w", s.id, err)
		}
		var obj map[string]any
		if json.Unmarshal(data, &obj) == nil && obj != nil {
			for k, v := range obj {
				out[k] = v
			}
			continue
		}
		out[s.id.String()] = json.RawMessage(data)
	}
	return out, true, nil
}

// failClose reports whether any of the mutators named fails closed.
func (rt *runtime) failClose(ids []engine.ID) bool {
	for _, id := range ids {
		if rt.failure[id] == engine.FailClose {
			return true
		}
	}
	return false
}

// withDeadline bounds each call of a mutator that asks for its own deadline.
func withDeadline(m engine.Mutator) engine.Mutator {
	tp, ok := m.(TimeoutPolicy)
	if !ok || tp.Timeout() <= 0 {
		return m
	}
	return &deadlineMutator{Mutator: m, timeout: tp.Timeout()}
}

// deadlineMutator runs Matches and Mutate of its mutator under the policy's deadline.
type deadlineMutator struct {
	engine.Mutator
	timeout time.Duration
}

func (d *deadlineMutator) Matches(ctx context.Context, req *engine.Request, obj map[string]any) (bool, error) {
	ctx, cancel := context.WithTimeout(ctx, d.timeout)
	defer cancel()
	return d.Mutator.Matches(ctx, req, obj)
}

func (d *deadlineMutator) Mutate(ctx context.Context, req *engine.Request, obj map[string]any, w *engine.Writer) (map[string]any, error) {
	ctx, cancel := context.WithTimeout(ctx, d.timeout)
	defer cancel()
	return d.Mutator.Mutate(ctx, req, obj, w)
}
