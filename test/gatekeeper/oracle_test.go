package gatekeeper

import (
	"bufio"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"sync"
	"testing"
)

// oracleResult is one answer of hack/gatekeeper (its caseOut).
type oracleResult struct {
	ID      string `json:"id"`
	Refused []struct {
		Index  int    `json:"index"`
		Kind   string `json:"kind"`
		Name   string `json:"name"`
		Stage  string `json:"stage"`
		Reason string `json:"reason"`
	} `json:"refused"`
	Replaced     []string       `json:"replaced"`
	Accepted     []string       `json:"accepted"`
	Conflicts    []string       `json:"conflicts"`
	Failed       []string       `json:"failed"`
	Object       map[string]any `json:"object"`
	Mutated      bool           `json:"mutated"`
	NotConverged bool           `json:"notConverged"`
	Error        string         `json:"error"`
}

// oracle is a running hack/gatekeeper process.
type oracle struct {
	cmd *exec.Cmd
	in  io.WriteCloser
	out *bufio.Reader
	mu  sync.Mutex
}

// oracleBinary returns the oracle's path, $GATEKEEPER_ORACLE (set by TestMain from
// hack/build-gatekeeper.sh). It skips the test when MORPH_E2E=0, the one switch that
// turns off the tests needing reference binaries built from the module proxy.
func oracleBinary(t testing.TB) string {
	t.Helper()
	if os.Getenv("MORPH_E2E") == "0" {
		t.Skip("Gatekeeper differential test skipped: MORPH_E2E=0 (it needs the oracle built by hack/build-gatekeeper.sh)")
	}
	p := os.Getenv("GATEKEEPER_ORACLE")
	if p == "" {
		t.Fatal("GATEKEEPER_ORACLE is not set: TestMain builds the oracle unless MORPH_E2E=0")
	}
	return p
}

func findScript(rel string) (string, error) {
	dir, err := os.Getwd()
	if err != nil {
		return "", err
	}
	for {
		p := filepath.Join(dir, rel)
		if _, err := os.Stat(p); err == nil {
			return p, nil
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			return "", fmt.Errorf("%s not found above the working directory", rel)
		}
		dir = parent
	}
}

// startOracle starts the oracle; it is stopped at the test's cleanup.
func startOracle(t testing.TB) *oracle {
	t.Helper()
	bin := oracleBinary(t)
	cmd := exec.Command(bin, "-crds", filepath.Join(filepath.Dir(bin), "crds"))
	cmd.Stderr = os.Stderr
	in, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatalf("starting %s: %v", bin, err)
	}
	o := &oracle{cmd: cmd, in: in, out: bufio.NewReaderSize(out, 1<<20)}
	t.Cleanup(func() {
		_ = o.in.Close()
		if err := cmd.Wait(); err != nil {
			t.Errorf("oracle exited: %v", err)
		}
	})
	return o
}

// oracleCase is a Case as the oracle reads it.
type oracleCase struct {
	ID               string         `json:"id"`
	Mutators         string         `json:"mutators"`
	Object           map[string]any `json:"object"`
	RequestNamespace string         `json:"requestNamespace,omitempty"`
	Namespace        map[string]any `json:"namespace,omitempty"`
	Operation        string         `json:"operation"`
	Source           string         `json:"source"`
	Isolate          bool           `json:"isolate"`
}

func toOracle(c Case) oracleCase {
	return oracleCase{ID: c.Name, Mutators: c.Mutators, Object: c.Object, RequestNamespace: c.RequestNamespace,
		Namespace: c.Namespace, Operation: c.Operation, Source: c.Source, Isolate: true}
}

// runAll sends every case and reads the answers in order.
func (o *oracle) runAll(cases []Case) ([]oracleResult, error) {
	o.mu.Lock()
	defer o.mu.Unlock()
	errc := make(chan error, 1)
	go func() {
		w := bufio.NewWriterSize(o.in, 1<<20)
		enc := json.NewEncoder(w)
		for _, c := range cases {
			if err := enc.Encode(toOracle(c)); err != nil {
				errc <- err
				return
			}
		}
		errc <- w.Flush()
	}()
	res := make([]oracleResult, len(cases))
	for i := range cases {
		line, err := o.out.ReadBytes('\n')
		if err != nil {
			return nil, fmt.Errorf("reading the oracle's answer %d: %w", i, err)
		}
		if err := json.Unmarshal(line, &res[i]); err != nil {
			return nil, fmt.Errorf("oracle answer %d: %w: %s", i, err, line)
		}
		if res[i].ID != cases[i].Name {
			return nil, fmt.Errorf("oracle answered %q for case %q", res[i].ID, cases[i].Name)
		}
	}
	return res, <-errc
}

func (o *oracle) run(c Case) (oracleResult, error) {
	r, err := o.runAll([]Case{c})
	if err != nil {
		return oracleResult{}, err
	}
	return r[0], nil
}
