package main

import (
	"archive/tar"
	"bytes"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"time"
)

// comparedBenchmarks are the benchmarks of package bench whose ratios the issues hold:
// the workload, its webhook path, and their common baseline.
const comparedBenchmarks = "^Benchmark(JSONRoundTrip|GatekeeperWorkload|GatekeeperWebhookPath)$"

// compareBase measures package bench at the revision base and in the working tree in
// the same run: both test binaries are built first, then run one after the other for
// rounds rounds, in alternating order, so that the shared machine's moods fall on both
// alike. Comparing a run of today with a docs/performance.md of another day compares
// two machines' moods more than two codes (the JSON round trip baseline alone moved
// from 70 to 140 µs between such runs). It returns the report section.
func compareBase(base string, rounds int) (string, error) {
	tmp, err := os.MkdirTemp("", "morph-bench-base-")
	if err != nil {
		return "", err
	}
	defer func() { _ = os.RemoveAll(tmp) }()
	tree := filepath.Join(tmp, "tree")
	if err := extractRevision(base, tree); err != nil {
		return "", err
	}
	wd, err := os.Getwd()
	if err != nil {
		return "", err
	}
	sides := []struct {
		name, dir, bin string
	}{
		{"before", tree, filepath.Join(tmp, "before.test")},
		{"after", wd, filepath.Join(tmp, "after.test")},
	}
	for _, s := range sides {
		build := exec.Command("go", "test", "-c", "-o", s.bin, "./bench/")
		build.Dir, build.Stdout, build.Stderr = s.dir, os.Stderr, os.Stderr
		if err := build.Run(); err != nil {
			return "", fmt.Errorf("building the %s benchmarks in %s: %w", s.name, s.dir, err)
		}
	}
	// runs[side][round] are one round's samples of one side.
	runs := [2][]map[string][]sample{}
	for r := range rounds {
		order := []int{0, 1}
		if r%2 == 1 {
			order = []int{1, 0}
		}
		for _, i := range order {
			s := sides[i]
			fmt.Fprintf(os.Stderr, "running: %s benchmarks (round %d of %d)\n", s.name, r+1, rounds)
			cmd := exec.Command(s.bin, "-test.run", "^$", "-test.bench", comparedBenchmarks, "-test.benchmem", "-test.count", "1", "-test.benchtime", "1s")
			cmd.Dir = filepath.Join(s.dir, "bench")
			var out bytes.Buffer
			cmd.Stdout, cmd.Stderr = io.MultiWriter(&out, os.Stderr), os.Stderr
			if err := cmd.Run(); err != nil {
				return "", fmt.Errorf("running the %s benchmarks: %w", s.name, err)
			}
			samples, _ := parse(out.Bytes())
			runs[i] = append(runs[i], samples)
		}
	}
	report := renderComparison(base, rounds, runs)
	cpu, err := compareCPU(sides[0].dir, sides[0].bin, sides[1].dir, sides[1].bin, rounds)
	if err != nil {
		return "", err
	}
	return report + renderCPU(rounds, cpu), nil
}

// cpuBenchmarks are the benchmarks whose CPU time per op is compared, with the ops each
// process runs (about a second of work).
var cpuBenchmarks = []struct {
	name string
	ops  int
}{
	{"JSONRoundTrip", 10000},
	{"GatekeeperWorkload/mutators-0", 1000000},
	{"GatekeeperWorkload/mutators-10", 20000},
	{"GatekeeperWorkload/mutators-100", 20000},
	{"GatekeeperWorkload/mutators-1000", 10000},
	{"GatekeeperWebhookPath/mutators-10", 10000},
	{"GatekeeperWebhookPath/mutators-100", 10000},
}

// compareCPU measures the CPU time (user and system, of the whole process: the
// collector's threads count) per op of each of cpuBenchmarks, before and after, in
// alternating order for rounds rounds. On a shared machine a benchmark's wall time
// counts the time it waited for a core; its CPU time does not. Each measurement is a
// process running the benchmark for a fixed number of ops, less a process running it
// for one op (the set-up: reading and compiling the workload). It returns, for each
// benchmark, side and round, the nanoseconds of CPU per op.
func compareCPU(beforeDir, beforeBin, afterDir, afterBin string, rounds int) (map[string][2][]float64, error) {
	sides := [2]struct{ dir, bin string }{{beforeDir, beforeBin}, {afterDir, afterBin}}
	out := map[string][2][]float64{}
	for r := range rounds {
		for _, b := range cpuBenchmarks {
			order := []int{0, 1}
			if r%2 == 1 {
				order = []int{1, 0}
			}
			for _, i := range order {
				fmt.Fprintf(os.Stderr, "running: CPU time of %s, %s (round %d of %d)\n", b.name, [2]string{"before", "after"}[i], r+1, rounds)
				full, err := cpuOf(sides[i].dir, sides[i].bin, b.name, b.ops)
				if err != nil {
					return nil, err
				}
				setup, err := cpuOf(sides[i].dir, sides[i].bin, b.name, 1)
				if err != nil {
					return nil, err
				}
				v := out[b.name]
				v[i] = append(v[i], float64(full-setup)/float64(b.ops-1))
				out[b.name] = v
			}
		}
	}
	return out, nil
}

// cpuOf runs one benchmark (a name such as GatekeeperWorkload/mutators-10) for ops ops
// and returns the process's CPU time.
func cpuOf(dir, bin, name string, ops int) (time.Duration, error) {
	pattern := "^Benchmark" + name + "$"
	if top, sub, ok := strings.Cut(name, "/"); ok {
		pattern = "^Benchmark" + top + "$/^" + sub + "$"
	}
	cmd := exec.Command(bin, "-test.run", "^$", "-test.bench", pattern, "-test.benchtime", fmt.Sprintf("%dx", ops))
	cmd.Dir = filepath.Join(dir, "bench")
	var stdout bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, os.Stderr
	if err := cmd.Run(); err != nil {
		return 0, fmt.Errorf("running %s %s: %w", bin, pattern, err)
	}
	if samples, _ := parse(stdout.Bytes()); len(samples["Benchmark"+name]) == 0 {
		return 0, fmt.Errorf("%s ran no benchmark %s: %s", bin, name, stdout.String())
	}
	return cmd.ProcessState.UserTime() + cmd.ProcessState.SystemTime(), nil
}

// renderCPU writes the CPU time table of compareCPU.
func renderCPU(rounds int, cpu map[string][2][]float64) string {
	const baseline = "JSONRoundTrip"
	var b strings.Builder
	fmt.Fprintf(&b, "\nThe same benchmarks by CPU time per op (user and system time of the process, whose set-up is measured alone and subtracted), %d rounds in alternating order. A benchmark's wall time on a shared machine counts the time it waited for a core; its CPU time does not. Ratio to baseline is each side's CPU per op over its own JSONRoundTrip's of the same round (median over rounds).\n\n", rounds)
	fmt.Fprintf(&b, "| benchmark | before CPU µs/op | after CPU µs/op | after/before (range) | before ratio to baseline | after ratio to baseline |\n|---|---:|---:|---:|---:|---:|\n")
	for _, bm := range cpuBenchmarks {
		v := cpu[bm.name]
		var paired []float64
		var toBase [2][]float64
		for r := range rounds {
			if r < len(v[0]) && r < len(v[1]) && v[0][r] > 0 {
				paired = append(paired, v[1][r]/v[0][r])
			}
			for i := range 2 {
				if bl := cpu[baseline][i]; bm.name != baseline && r < len(v[i]) && r < len(bl) && bl[r] > 0 {
					toBase[i] = append(toBase[i], v[i][r]/bl[r])
				}
			}
		}
		ratio, spread := medianRatio, pairedRatios(paired)
		fmt.Fprintf(&b, "| %s | %.2f | %.2f | %s | %s | %s |\n", bm.name, median(v[0])/1e3, median(v[1])/1e3, spread, ratio(toBase[0]), ratio(toBase[1]))
	}
	return b.String()
}

// renderComparison writes the before/after table: for each benchmark the medians of
// both sides, the median (and range) of the rounds' after/before ratios, and each side's
// ratio to its own JSON round trip of the same round.
func renderComparison(base string, rounds int, runs [2][]map[string][]sample) string {
	const baseline = "BenchmarkJSONRoundTrip"
	var names []string
	for n := range runs[1][0] {
		if _, ok := runs[0][0][n]; ok {
			names = append(names, n)
		}
	}
	slices.Sort(names)
	var b strings.Builder
	fmt.Fprintf(&b, "\n## Before and after, in one run\n\n")
	fmt.Fprintf(&b, "Package bench at `%s` (before) and in this tree (after), built first and then run %d rounds, in alternating order (`-test.count 1 -test.benchtime 1s` per round and side). Ratio to baseline is each side's ns/op over its own JSONRoundTrip of the same round (median over rounds); after/before is the median of the rounds' ratios, with their range.\n\n", base, rounds)
	fmt.Fprintf(&b, "| benchmark | before ns/op | after ns/op | after/before (range) | before B/op, allocs | after B/op, allocs | before ratio to baseline | after ratio to baseline |\n|---|---:|---:|---:|---:|---:|---:|---:|\n")
	for _, n := range names {
		var side [2][]sample
		var toBase [2][]float64
		var paired []float64
		for r := range rounds {
			var ns [2]float64
			for i := range 2 {
				s := runs[i][r][n]
				bs := runs[i][r][baseline]
				if len(s) == 0 {
					continue
				}
				side[i] = append(side[i], s[0])
				ns[i] = s[0].ns
				if len(bs) > 0 && n != baseline {
					toBase[i] = append(toBase[i], s[0].ns/bs[0].ns)
				}
			}
			if ns[0] > 0 && ns[1] > 0 {
				paired = append(paired, ns[1]/ns[0])
			}
		}
		before, after := medians(side[0]), medians(side[1])
		ratio, spread := medianRatio, pairedRatios(paired)
		fmt.Fprintf(&b, "| %s | %.0f | %.0f | %s | %.0f, %.0f | %.0f, %.0f | %s | %s |\n", strings.TrimPrefix(n, "Benchmark"),
			before.ns, after.ns, spread, before.bytes, before.allocs, after.bytes, after.allocs, ratio(toBase[0]), ratio(toBase[1]))
	}
	return b.String()
}

// extractRevision writes the files of git revision rev into dir (git archive, read
// here rather than by tar, which the machine may lack).
func extractRevision(rev, dir string) error {
	cmd := exec.Command("git", "archive", "--format=tar", rev)
	var out, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &stderr
	if err := cmd.Run(); err != nil {
		return fmt.Errorf("git archive %s (is the revision in this clone? BENCH_BASE= skips the comparison): %w: %s", rev, err, strings.TrimSpace(stderr.String()))
	}
	tr := tar.NewReader(&out)
	for {
		h, err := tr.Next()
		if errors.Is(err, io.EOF) {
			return nil
		}
		if err != nil {
			return fmt.Errorf("reading git archive %s: %w", rev, err)
		}
		// git archive names only paths inside the tree; a name that leaves dir is refused.
		name := filepath.Join(dir, filepath.FromSlash(h.Name))
		if !strings.HasPrefix(name, filepath.Clean(dir)+string(filepath.Separator)) {
			return fmt.Errorf("git archive %s: path %q leaves the tree", rev, h.Name)
		}
		switch h.Typeflag {
		case tar.TypeDir:
			if err := os.MkdirAll(name, 0o755); err != nil {
				return err
			}
		case tar.TypeReg:
			if err := os.MkdirAll(filepath.Dir(name), 0o755); err != nil {
				return err
			}
			f, err := os.OpenFile(name, os.O_CREATE|os.O_WRONLY|os.O_TRUNC, os.FileMode(h.Mode)&0o755|0o600)
			if err != nil {
				return err
			}
			_, cerr := io.Copy(f, tr) // #nosec G110 -- our own repository's files
			if err := f.Close(); cerr == nil {
				cerr = err
			}
			if cerr != nil {
				return cerr
			}
		case tar.TypeSymlink:
			if err := os.Symlink(h.Linkname, name); err != nil {
				return err
			}
		}
	}
}

// medianRatio prints the median of ratios, or nothing without any.
func medianRatio(xs []float64) string {
	if len(xs) == 0 {
		return ""
	}
	return fmt.Sprintf("%.3fx", median(xs))
}

// pairedRatios prints the median of the rounds' after/before ratios and their range.
func pairedRatios(paired []float64) string {
	if len(paired) == 0 {
		return ""
	}
	return fmt.Sprintf("%.2fx (%.2f–%.2f)", median(paired), slices.Min(paired), slices.Max(paired))
}
