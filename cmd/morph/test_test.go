package main

import (
	"encoding/json"
	"encoding/xml"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
)

// testReport is the -o json output of morph test.
type testReport struct {
	Passed int `json:"passed"`
	Failed int `json:"failed"`
	Cases  []struct {
		File    string `json:"file"`
		Name    string `json:"name"`
		Passed  bool   `json:"passed"`
		Message string `json:"message"`
	} `json:"cases"`
}

// TestTestExamples runs the example suites, as make suite does.
func TestTestExamples(t *testing.T) {
	out, errOut, code := runMorph(t, "", "test", examples)
	if code != exitOK {
		t.Fatalf("exit %d:\n%s%s", code, out, errOut)
	}
	if !strings.Contains(out, "14 passed, 0 failed") {
		t.Fatalf("summary:\n%s", out)
	}
}

func TestTestExitCodesAndOutputs(t *testing.T) {
	failing := filepath.Join("testdata", "test", "failing.morph-test.yaml")
	tests := []struct {
		name string
		args []string
		code int
		want string
	}{
		{"all pass", []string{"test", examples + "/tests/invalid"}, exitOK, "1 passed, 0 failed"},
		{"a case fails", []string{"test", failing}, exitError, "FAIL"},
		{"unknown output", []string{"test", "-o", "xml", examples}, exitUsage, ""},
		{"missing path", []string{"test", "no/such/folder"}, exitUsage, ""},
		{"no test files", []string{"test", examples + "/context"}, exitUsage, ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			out, errOut, code := runMorph(t, "", tt.args...)
			if code != tt.code {
				t.Fatalf("exit %d, want %d:\n%s%s", code, tt.code, out, errOut)
			}
			if !strings.Contains(out, tt.want) {
				t.Fatalf("output lacks %q:\n%s", tt.want, out)
			}
		})
	}
	out, _, _ := runMorph(t, "", "test", "-o", "table", failing)
	golden(t, "test/failing.table.txt", out)
	out, _, _ = runMorph(t, "", "test", "-o", "json", failing)
	golden(t, "test/failing.json", out)
	out, _, _ = runMorph(t, "", "test", "-o", "junit", failing)
	golden(t, "test/failing.junit.xml", out)
	var suites struct {
		XMLName  xml.Name `xml:"testsuites"`
		Tests    int      `xml:"tests,attr"`
		Failures int      `xml:"failures,attr"`
		Suites   []struct {
			Cases []struct {
				Name    string `xml:"name,attr"`
				Failure *struct {
					Message string `xml:"message,attr"`
				} `xml:"failure"`
			} `xml:"testcase"`
		} `xml:"testsuite"`
	}
	if err := xml.Unmarshal([]byte(out), &suites); err != nil {
		t.Fatalf("junit output is not valid XML: %v", err)
	}
	if suites.Tests != 2 || suites.Failures != 1 {
		t.Fatalf("junit: tests=%d failures=%d, want 2 and 1", suites.Tests, suites.Failures)
	}
}

// kyvernoModuleDir is Kyverno 1.19.1's module in the module cache, downloaded when
// missing.
func kyvernoModuleDir(t *testing.T) string {
	t.Helper()
	cmd := exec.Command("go", "mod", "download", "-json", "github.com/kyverno/kyverno@v1.19.1")
	cmd.Dir = t.TempDir()
	out, err := cmd.Output()
	if err != nil {
		t.Skipf("github.com/kyverno/kyverno@v1.19.1 is not in the module cache and cannot be downloaded: %v", err)
	}
	var mod struct{ Dir string }
	if err := json.Unmarshal(out, &mod); err != nil || mod.Dir == "" {
		t.Fatalf("go mod download: %s", out)
	}
	return mod.Dir
}

// kyvernoMutationSuites lists the folders of test/cli whose kyverno-test.yaml suites
// test CEL mutation policies: a YAML file beside the test declares a MutatingPolicy,
// NamespacedMutatingPolicy or MutatingAdmissionPolicy.
func kyvernoMutationSuites(t *testing.T, root string) []string {
	t.Helper()
	kinds := regexp.MustCompile(`(?m)^kind:\s*(MutatingPolicy|NamespacedMutatingPolicy|MutatingAdmissionPolicy)\s*$`)
	var dirs []string
	err := filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() || d.Name() != "kyverno-test.yaml" {
			return err
		}
		dir := filepath.Dir(path)
		entries, err := os.ReadDir(dir)
		if err != nil {
			return err
		}
		for _, e := range entries {
			if e.IsDir() || !strings.HasSuffix(e.Name(), ".yaml") {
				continue
			}
			data, err := os.ReadFile(filepath.Join(dir, e.Name()))
			if err != nil {
				return err
			}
			if kinds.Match(data) {
				dirs = append(dirs, dir)
				break
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	slices.Sort(dirs)
	return dirs
}

// kyvernoSuitesPassing is the number of result rows of Kyverno 1.19.1's CLI suites for
// CEL mutation policies that morph test passes, as measured (docs/conformance.md says
// why each of the others fails). It may rise, never fall.
const kyvernoSuitesPassing = 30

// TestKyvernoCLISuites runs Kyverno 1.19.1's own `kyverno test` suites for mutation
// policies, read from the module cache, under morph test.
func TestKyvernoCLISuites(t *testing.T) {
	root := filepath.Join(kyvernoModuleDir(t), "test", "cli")
	dirs := kyvernoMutationSuites(t, root)
	if len(dirs) < 20 {
		t.Fatalf("found %d suites under %s; expected the 25 of Kyverno 1.19.1", len(dirs), root)
	}
	out, errOut, code := runMorph(t, "", append([]string{"test", "-o", "json"}, dirs...)...)
	var rep testReport
	if err := json.Unmarshal([]byte(out), &rep); err != nil {
		t.Fatalf("exit %d, output not JSON: %v\n%s%s", code, err, out, errOut)
	}
	t.Logf("%d suites: %d of %d results pass", len(dirs), rep.Passed, rep.Passed+rep.Failed)
	for _, c := range rep.Cases {
		if !c.Passed {
			rel, _ := filepath.Rel(root, c.File)
			msg := strings.ReplaceAll(c.Message, "\n", " ")
			if len(msg) > 240 {
				msg = msg[:240] + "..."
			}
			t.Logf("FAIL %s: %s: %s", rel, c.Name, msg)
		}
	}
	if rep.Passed < kyvernoSuitesPassing {
		t.Errorf("%d results pass, fewer than the %d measured", rep.Passed, kyvernoSuitesPassing)
	}
	if (rep.Failed > 0) != (code == exitError) {
		t.Errorf("exit %d with %d failures", code, rep.Failed)
	}
}
