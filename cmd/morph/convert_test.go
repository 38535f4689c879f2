package main

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// katalogTestdata holds the Katalog dialect's golden cases, which convert reuses.
const katalogTestdata = "../../internal/dialect/katalog/testdata/convert"

// runConvert runs `morph convert` through newConvertCommand and maps its error to the
// exit code as main does.
func runConvert(t *testing.T, stdin string, args ...string) (stdout, stderr string, code int) {
	t.Helper()
	var out, errOut bytes.Buffer
	cmd := newConvertCommand(strings.NewReader(stdin), &out, &errOut)
	cmd.SetArgs(args)
	cmd.SetOut(&errOut)
	cmd.SetErr(&errOut)
	cmd.SilenceUsage, cmd.SilenceErrors = true, true
	err := cmd.Execute()
	if err != nil {
		errOut.WriteString("error: " + err.Error() + "\n")
	}
	return out.String(), errOut.String(), exitCode(err)
}

func readFile(t *testing.T, path string) string {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// TestConvertGolden converts each golden case of the dialect and compares with its
// expected output.
func TestConvertGolden(t *testing.T) {
	dirs, _ := filepath.Glob(filepath.Join(katalogTestdata, "*"))
	if len(dirs) == 0 {
		t.Fatal("no cases")
	}
	for _, dir := range dirs {
		t.Run(filepath.Base(dir), func(t *testing.T) {
			to := strings.TrimSpace(readFile(t, filepath.Join(dir, "to")))
			out, errOut, code := runConvert(t, "", "-p", filepath.Join(dir, "katalog.yaml"), "-f", filepath.Join(dir, "input.yaml"), "--to", to)
			if code != 0 {
				t.Fatalf("exit %d: %s", code, errOut)
			}
			if want := readFile(t, filepath.Join(dir, "expected.yaml")); out != want {
				t.Errorf("output\n%s\nwant\n%s", out, want)
			}
		})
	}
}

func TestConvertStdinAndJSON(t *testing.T) {
	dir := filepath.Join(katalogTestdata, "cronjob-v1-to-v2")
	input := readFile(t, filepath.Join(dir, "input.yaml")) + "---\n" + readFile(t, filepath.Join(katalogTestdata, "cronjob-macro", "input.yaml"))
	out, errOut, code := runConvert(t, input, "-p", filepath.Join(dir, "katalog.yaml"), "-f", "-", "--to", "v2", "-o", "json")
	if code != 0 {
		t.Fatalf("exit %d: %s", code, errOut)
	}
	for _, want := range []string{`"kind": "List"`, `"apiVersion": "demo.orkestra.io/v2"`, `"name": "nightly"`, `"name": "daily"`, `"dayOfWeek": "1-5"`} {
		if !strings.Contains(out, want) {
			t.Errorf("output lacks %s:\n%s", want, out)
		}
	}
}

func TestConvertErrors(t *testing.T) {
	dir := filepath.Join(katalogTestdata, "cronjob-v1-to-v2")
	katalogFile := filepath.Join(dir, "katalog.yaml")
	tmp := t.TempDir()
	bad := filepath.Join(tmp, "bad.yaml")
	if err := os.WriteFile(bad, []byte("apiVersion: demo.orkestra.io/v1\nkind: CronJob\nmetadata: {name: bad, namespace: ns}\nspec: {schedule: \"0 2 * *\"}\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	brokenKatalog := filepath.Join(tmp, "katalog.yaml")
	if err := os.WriteFile(brokenKatalog, []byte("apiVersion: orkestra.orkspace.io/v1\nkind: Katalog\nmetadata: {name: k}\nspec:\n  crds:\n    a:\n      apiTypes: {group: g.io, version: v1, kind: K}\n      conversion: {paths: [{from: v1, to: v2, spec: {x: \"{{ env \\\"HOME\\\" }}\"}}]}\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name string
		args []string
		code int
		want string
	}{
		{"no --to", []string{"-p", katalogFile, "-f", bad}, 2, "--to is required"},
		{"no -p", []string{"-f", bad, "--to", "v2"}, 2, "--policy/-p is required"},
		{"bad output", []string{"-p", katalogFile, "-f", bad, "--to", "v2", "-o", "xml"}, 2, `--output "xml": use yaml or json`},
		{"bad flag", []string{"--nope"}, 2, "unknown flag: --nope"},
		{"stdin twice", []string{"-p", "-", "-f", "-", "--to", "v2"}, 2, "standard input (-) can be read only once"},
		{"conversion fails", []string{"-p", katalogFile, "-f", bad, "--to", "demo.orkestra.io/v2"}, 1,
			bad + `: document 1 (CronJob "bad"): converting demo.orkestra.io/v1 to demo.orkestra.io/v2 with Katalog/cronjobs[cronjob-v2]: converting CronJob ns/bad from v1 to v2: spec.schedule: resolving "{{ cronToMap .spec.schedule }}": error calling cronToMap: cron expression "0 2 * *" has 4 fields`},
		{"no path", []string{"-p", katalogFile, "-f", bad, "--to", "v3"}, 1, "no conversion path from v1 to v3"},
		{"katalog does not load", []string{"-p", brokenKatalog, "-f", bad, "--to", "v2"}, 1, `spec.crds.a.conversion.paths[0].spec.x: Invalid value: "{{ env \"HOME\" }}": template: spec.x:1: function "env" not defined`},
		{"not a katalog", []string{"-p", bad, "-f", bad, "--to", "v2"}, 1, "no Katalog found"},
		{"missing file", []string{"-p", katalogFile, "-f", filepath.Join(tmp, "nope.yaml"), "--to", "v2"}, 1, "no such file"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			out, errOut, code := runConvert(t, "", tt.args...)
			if code != tt.code || !strings.Contains(errOut, tt.want) {
				t.Errorf("exit %d, stderr:\n%s\nwant exit %d and %q", code, errOut, tt.code, tt.want)
			}
			if code != 0 && out != "" {
				t.Errorf("output on failure: %s", out)
			}
		})
	}
}

// TestConvertPassThrough: an object already at the target, of a kind no Katalog
// converts, is printed unchanged.
func TestConvertPassThrough(t *testing.T) {
	dir := filepath.Join(katalogTestdata, "cronjob-v1-to-v2")
	cm := "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: x\n"
	out, errOut, code := runConvert(t, cm, "-p", filepath.Join(dir, "katalog.yaml"), "-f", "-", "--to", "v1")
	if code != 0 || out != cm {
		t.Errorf("exit %d %s\n%s", code, errOut, out)
	}
}
