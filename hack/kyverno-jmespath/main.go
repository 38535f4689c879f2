// Command kyverno-jmespath-oracle evaluates JMESPath queries with Kyverno 1.19.1's own
// JMESPath (pkg/engine/jmespath: its go-jmespath fork with Kyverno's functions, as its
// GlobalContextEntry projections use it), for the differential test of morph's
// implementation (internal/dialect/cel TestKyvernoJMESPathDifferential). It is a
// separate module so that Kyverno never enters morph's dependency graph.
//
// Each line of standard input is one case {"query": ..., "data": ...}; each line of
// standard output is its answer {"result": ...} or {"error": "..."}, in order.
package main

import (
	"bufio"
	"encoding/json"
	"fmt"
	"os"

	"github.com/kyverno/kyverno/pkg/config"
	"github.com/kyverno/kyverno/pkg/engine/jmespath"
)

type caseIn struct {
	Query string `json:"query"`
	Data  any    `json:"data"`
}

type caseOut struct {
	Result any    `json:"result,omitempty"`
	Error  string `json:"error,omitempty"`
}

func main() {
	jp := jmespath.New(config.NewDefaultConfiguration(false))
	in := bufio.NewScanner(os.Stdin)
	in.Buffer(make([]byte, 1<<20), 16<<20)
	out := json.NewEncoder(os.Stdout)
	for in.Scan() {
		var c caseIn
		var res caseOut
		if err := json.Unmarshal(in.Bytes(), &c); err != nil {
			res.Error = "bad case: " + err.Error()
		} else if v, err := jp.Search(c.Query, c.Data); err != nil {
			res.Error = err.Error()
		} else {
			res.Result = v
		}
		if err := out.Encode(res); err != nil {
			fmt.Fprintln(os.Stderr, "kyverno-jmespath-oracle:", err)
			os.Exit(1)
		}
	}
	if err := in.Err(); err != nil {
		fmt.Fprintln(os.Stderr, "kyverno-jmespath-oracle:", err)
		os.Exit(1)
	}
}
