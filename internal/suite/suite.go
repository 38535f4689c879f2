// Package suite runs policy test suites: the Kyverno CLI's (kyverno-test.yaml, as
// `kyverno test` runs them) and morph's own (morph-test.yaml, for every dialect). It
// finds the test files under the given paths, runs each test with the offline engine
// and reports one Case per check. It knows no dialect: the caller passes Hooks.
package suite

import (
	"context"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"

	"github.com/morph-dev/morph/internal/engine"
	"github.com/morph-dev/morph/internal/objects"
	"github.com/morph-dev/morph/internal/policy"
)

// The file names Discover looks for in folders.
const (
	KyvernoFileName = "kyverno-test.yaml"
	MorphFileName   = "morph-test.yaml"
	// morphFileSuffix also names morph tests: "pod-defaults.morph-test.yaml".
	morphFileSuffix = ".morph-test.yaml"
)

// Format is the format of a test file.
type Format string

// The formats.
const (
	FormatKyverno Format = "kyverno"
	FormatMorph   Format = "morph"
)

// File is a test file found by Discover.
type File struct {
	Path   string
	Format Format
}

// Discover finds the test files of the given paths: a folder is searched recursively
// (hidden folders skipped) for kyverno-test.yaml, morph-test.yaml and
// *.morph-test.yaml, in lexical order; a file is taken as it is, its format told by its
// name or, failing that, its apiVersion. A path that does not exist is an error.
func Discover(paths []string) ([]File, error) {
	var files []File
	seen := map[string]bool{}
	add := func(f File) {
		if clean := filepath.Clean(f.Path); !seen[clean] {
			seen[clean] = true
			files = append(files, f)
		}
	}
	for _, p := range paths {
		info, err := os.Stat(p)
		if err != nil {
			return nil, err
		}
		if !info.IsDir() {
			format, ok := formatOfName(filepath.Base(p))
			if !ok {
				if format, err = formatOfContent(p); err != nil {
					return nil, err
				}
			}
			add(File{Path: p, Format: format})
			continue
		}
		var found []File
		err = policy.WalkFiles(p, func(path string, d fs.DirEntry) error {
			if format, ok := formatOfName(d.Name()); ok {
				found = append(found, File{Path: path, Format: format})
			}
			return nil
		})
		if err != nil {
			return nil, err
		}
		slices.SortFunc(found, func(a, b File) int { return strings.Compare(a.Path, b.Path) })
		for _, f := range found {
			add(f)
		}
	}
	return files, nil
}

func formatOfName(name string) (Format, bool) {
	switch {
	case name == KyvernoFileName:
		return FormatKyverno, true
	case name == MorphFileName || strings.HasSuffix(name, morphFileSuffix):
		return FormatMorph, true
	}
	return "", false
}

func formatOfContent(path string) (Format, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return "", err
	}
	docs, err := policy.Decode(path, data)
	if err != nil {
		return "", err
	}
	for _, d := range docs {
		if policy.Group(d.APIVersion()) == morphGroup {
			return FormatMorph, nil
		}
	}
	return FormatKyverno, nil
}

// Case is the outcome of one check: one expectation of a morph test, one result of a
// Kyverno test for one resource.
type Case struct {
	// File is the test file.
	File string `json:"file"`
	// Test is the name of the test in the file.
	Test string `json:"test"`
	// Name says what was checked.
	Name   string `json:"name"`
	Passed bool   `json:"passed"`
	// Message says why the case failed.
	Message string `json:"message,omitempty"`
	// Diff is a unified diff of the expected and the actual object, for a failure.
	Diff string `json:"diff,omitempty"`
}

// Report is the outcome of a run.
type Report struct {
	Cases []Case `json:"cases"`
	// Updated lists the files --update rewrote, with the diff of each.
	Updated []Update `json:"updated,omitempty"`
}

// Update is one file rewritten by --update.
type Update struct {
	File string `json:"file"`
	Diff string `json:"diff"`
}

// Failed is the number of failed cases.
func (r *Report) Failed() int {
	n := 0
	for _, c := range r.Cases {
		if !c.Passed {
			n++
		}
	}
	return n
}

// Decisions is what the dialects decided about one object beyond the engine's Result.
type Decisions struct {
	// Exempted names the policies a policy exception kept from the object.
	Exempted map[engine.ID]bool
	// Matched names the policies whose constraints matched the object; ConditionsMet
	// those of them that also passed their match conditions.
	Matched, ConditionsMet map[engine.ID]bool
	// Tracked says whether Matched and ConditionsMet were recorded for the policy's
	// dialect (CEL records them; for the others a policy that changed nothing is
	// reported as not matched).
	Tracked func(engine.ID) bool
}

// Hooks are what the runner needs from the dialects, supplied by the command.
type Hooks struct {
	// NewLoader returns the loader of every dialect; kyvernoCLI asks for the Kyverno
	// CLI's conventions where they differ from the cluster's.
	NewLoader func(store *objects.Store, kyvernoCLI bool) *policy.Loader
}

// decisionsOf reads the Decisions of one request from the notes the policies reported:
// exemptions, and (under the Kyverno CLI's conventions) the policies that matched.
func decisionsOf(res *engine.Result) Decisions {
	d := Decisions{
		Exempted: map[engine.ID]bool{}, Matched: map[engine.ID]bool{}, ConditionsMet: map[engine.ID]bool{},
		Tracked: func(id engine.ID) bool { return id.Dialect == "cel" },
	}
	if res == nil {
		return d
	}
	for _, n := range res.Notes {
		switch {
		case n.Kind == engine.NoteExemption:
			d.Exempted[n.ID] = true
		case n.Kind == engine.NoteMatched && n.Reason == "constraints":
			d.Matched[n.ID] = true
		case n.Kind == engine.NoteMatched && n.Reason == "conditions":
			d.Matched[n.ID], d.ConditionsMet[n.ID] = true, true
		}
	}
	return d
}

// Runner runs test files.
type Runner struct {
	Hooks Hooks
	// Update rewrites the expected objects of morph tests from the results.
	Update bool
}

// Run runs every test of the files in order.
func (r *Runner) Run(ctx context.Context, files []File) *Report {
	rep := &Report{}
	for _, f := range files {
		switch f.Format {
		case FormatKyverno:
			rep.Cases = append(rep.Cases, r.runKyvernoFile(ctx, f.Path)...)
		case FormatMorph:
			cases, upd := r.runMorphFile(ctx, f.Path)
			rep.Cases = append(rep.Cases, cases...)
			if upd != nil {
				rep.Updated = append(rep.Updated, *upd)
			}
		}
	}
	return rep
}

// fileError is the one case of a file that could not be read or run.
func fileError(file, test string, err error) Case {
	return Case{File: file, Test: test, Name: "load", Message: err.Error()}
}

// readDocs reads the documents of paths relative to dir.
func readDocs(dir string, paths []string) ([]policy.Document, error) {
	if len(paths) == 0 {
		return nil, nil
	}
	full := make([]string, len(paths))
	for i, p := range paths {
		full[i] = resolve(dir, p)
	}
	return policy.Read(full, nil)
}

func resolve(dir, p string) string {
	if filepath.IsAbs(p) {
		return p
	}
	return filepath.Join(dir, p)
}

// loadErrorText joins the errors of a failed load, one per line.
func loadErrorText(err error) string {
	var lines []string
	for _, e := range policy.Errors(err) {
		lines = append(lines, e.Error())
	}
	return strings.Join(lines, "\n")
}

func describe(d policy.Document) string {
	if ns := d.Namespace(); ns != "" {
		return fmt.Sprintf("%s %s/%s", d.Kind(), ns, d.Name())
	}
	return fmt.Sprintf("%s %s", d.Kind(), d.Name())
}
