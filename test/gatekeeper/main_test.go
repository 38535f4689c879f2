package gatekeeper

import (
	"fmt"
	"os"
	"os/exec"
	"strings"
	"testing"
)

// TestMain builds (or finds in its cache) the Gatekeeper oracle before the tests run,
// so that a cold build does not count against go test's -timeout. MORPH_E2E=0 skips the
// build and the tests that need the oracle; TestCorpus still runs.
func TestMain(m *testing.M) {
	if os.Getenv("MORPH_E2E") != "0" && os.Getenv("GATEKEEPER_ORACLE") == "" {
		script, err := findScript("hack/build-gatekeeper.sh")
		if err != nil {
			fmt.Fprintln(os.Stderr, "gatekeeper differential test:", err)
			os.Exit(1)
		}
		cmd := exec.Command(script)
		cmd.Stderr = os.Stderr
		out, err := cmd.Output()
		if err != nil {
			fmt.Fprintf(os.Stderr, "gatekeeper differential test: %s: %v\n", script, err)
			os.Exit(1)
		}
		os.Setenv("GATEKEEPER_ORACLE", strings.TrimSpace(string(out)))
	}
	os.Exit(m.Run())
}
