package suite

import (
	"encoding/json"
	"encoding/xml"
	"fmt"
	"io"
	"strings"
)

// WriteTable writes one line per case (PASS or FAIL, the file, the test and the case),
// each failure's message and diff indented below it, then a summary line.
func WriteTable(w io.Writer, rep *Report) error {
	var b strings.Builder
	for _, u := range rep.Updated {
		fmt.Fprintf(&b, "updated %s\n", u.File)
		b.WriteString(indent(u.Diff))
	}
	for _, c := range rep.Cases {
		result := "PASS"
		if !c.Passed {
			result = "FAIL"
		}
		fmt.Fprintf(&b, "%s  %s  %s  %s\n", result, c.File, c.Test, c.Name)
		if !c.Passed {
			b.WriteString(indent(c.Message))
			b.WriteString(indent(c.Diff))
		}
	}
	failed := rep.Failed()
	fmt.Fprintf(&b, "\n%d passed, %d failed\n", len(rep.Cases)-failed, failed)
	_, err := io.WriteString(w, b.String())
	return err
}

func indent(text string) string {
	if text == "" {
		return ""
	}
	var b strings.Builder
	for _, line := range strings.Split(strings.TrimRight(text, "\n"), "\n") {
		b.WriteString("    ")
		b.WriteString(line)
		b.WriteByte('\n')
	}
	return b.String()
}

// WriteJSON writes the report as one JSON object: passed, failed, cases, updated.
func WriteJSON(w io.Writer, rep *Report) error {
	failed := rep.Failed()
	cases := rep.Cases
	if cases == nil {
		cases = []Case{}
	}
	out := struct {
		Passed  int      `json:"passed"`
		Failed  int      `json:"failed"`
		Cases   []Case   `json:"cases"`
		Updated []Update `json:"updated,omitempty"`
	}{len(rep.Cases) - failed, failed, cases, rep.Updated}
	data, err := json.MarshalIndent(out, "", "  ")
	if err != nil {
		return err
	}
	_, err = fmt.Fprintf(w, "%s\n", data)
	return err
}

type junitSuites struct {
	XMLName  xml.Name     `xml:"testsuites"`
	Name     string       `xml:"name,attr"`
	Tests    int          `xml:"tests,attr"`
	Failures int          `xml:"failures,attr"`
	Suites   []junitSuite `xml:"testsuite"`
}

type junitSuite struct {
	Name     string      `xml:"name,attr"`
	Tests    int         `xml:"tests,attr"`
	Failures int         `xml:"failures,attr"`
	Cases    []junitCase `xml:"testcase"`
}

type junitCase struct {
	Name      string        `xml:"name,attr"`
	ClassName string        `xml:"classname,attr"`
	Failure   *junitFailure `xml:"failure,omitempty"`
}

type junitFailure struct {
	Message string `xml:"message,attr"`
	Type    string `xml:"type,attr"`
	Text    string `xml:",cdata"`
}

// WriteJUnit writes the report as JUnit XML: one testsuite per test file and test, one
// testcase per case, a failure element (message, then the diff) for each failure.
func WriteJUnit(w io.Writer, rep *Report) error {
	out := junitSuites{Name: "morph test"}
	index := map[string]int{}
	for _, c := range rep.Cases {
		key := c.File + "\x00" + c.Test
		i, ok := index[key]
		if !ok {
			name := c.File
			if c.Test != "" {
				name += ": " + c.Test
			}
			out.Suites = append(out.Suites, junitSuite{Name: name})
			i = len(out.Suites) - 1
			index[key] = i
		}
		s := &out.Suites[i]
		jc := junitCase{Name: c.Name, ClassName: strings.TrimSuffix(c.File, ".yaml")}
		if !c.Passed {
			firstLine, _, _ := strings.Cut(c.Message, "\n")
			jc.Failure = &junitFailure{Message: firstLine, Type: "failure", Text: strings.TrimSpace(c.Message + "\n" + c.Diff)}
			s.Failures++
			out.Failures++
		}
		s.Tests++
		out.Tests++
		s.Cases = append(s.Cases, jc)
	}
	if _, err := io.WriteString(w, xml.Header); err != nil {
		return err
	}
	enc := xml.NewEncoder(w)
	enc.Indent("", "  ")
	if err := enc.Encode(out); err != nil {
		return err
	}
	_, err := io.WriteString(w, "\n")
	return err
}
