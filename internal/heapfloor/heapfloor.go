// Package heapfloor keeps the Go garbage collector from collecting a small heap many
// times a second.
//
// Go's collector runs when the heap has grown by GOGC percent (100 by default) over what
// survived the last collection, and never below 4 MiB. A webhook server holds little: its
// policies and caches come to a few MiB, while each request allocates tens of KiB. At
// 1,000 requests a second the default pacing collects about 25 times a second, and every
// collection slows the requests it overlaps (mark assists, the mark worker taking one of
// the process's cores, two short stops of the world): that is most of a webhook's tail
// latency. A heap floor lets the heap grow to Size before a collection, so collections
// come a few times a minute instead, each marking the same small live heap.
//
// The floor is kept by raising GOGC (runtime/debug.SetGCPercent) after each collection
// so that the next heap goal is Size, never lowering it below the process's own GOGC:
// once the live heap is large, the floor has no effect and GOGC paces as usual. A memory
// limit (GOMEMLIMIT, runtime/debug.SetMemoryLimit) still wins: the runtime collects
// before the limit whatever GOGC says, so the floor never takes a process past it.
// GOGC=off turns the floor off, as it turns the collector off.
package heapfloor

import (
	"context"
	"log/slog"
	"os"
	"runtime/debug"
	"runtime/metrics"
	"slices"
	"strconv"
	"time"
)

// DefaultSize is the floor morph serve keeps unless told otherwise: a webhook
// Deployment's memory request is typically 128 MiB or more.
const DefaultSize = 64 << 20

// maxPercent bounds the GOGC the floor sets.
const maxPercent = 1_000_000

// minimumHeap is the runtime's minimum heap goal at GOGC=100, scaled by GOGC/100.
const minimumHeap = 4 << 20

// checkEvery is how often the collector's cycle count is read; the floor is set again
// only after a collection.
const checkEvery = 100 * time.Millisecond

var sampleNames = []string{
	"/gc/cycles/total:gc-cycles",
	"/gc/heap/live:bytes",
	"/memory/classes/heap/stacks:bytes", // the pacer counts whole stacks, not the scanned part
	"/gc/scan/globals:bytes",
}

// Keep holds the heap floor at size bytes until ctx ends, then gives the process back its
// own GOGC. It returns at once when size is 0 or GOGC is off. Only one Keep should run
// in a process: GOGC is the process's.
func Keep(ctx context.Context, size uint64, log *slog.Logger) {
	base, on := percentFromEnv(os.Getenv("GOGC"))
	if size == 0 || !on {
		return
	}
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	defer debug.SetGCPercent(base)
	samples := make([]metrics.Sample, len(sampleNames))
	for i, name := range sampleNames {
		samples[i].Name = name
	}
	current := base
	var lastCycle uint64
	// recent are the live heaps of the last collections. A server's live heap is small
	// and moves with the requests in flight when a collection ends (0.6 to 1.2 MiB
	// here); a GOGC sized on the smallest would put the next goal at twice the floor, so
	// it is sized on the largest: the goal stays at or a little under the floor.
	var recent [4]uint64
	set := func() {
		metrics.Read(samples)
		cycle := value(samples[0])
		if cycle == lastCycle && lastCycle != 0 {
			return
		}
		lastCycle = cycle
		recent[cycle%uint64(len(recent))] = value(samples[1])
		live := slices.Max(recent[:])
		p := Percent(size, live, value(samples[2])+value(samples[3]), base)
		if p != current && (p > current+current/20 || p < current-current/20 || p == base) {
			debug.SetGCPercent(p)
			log.Debug("heap floor: GOGC set", "percent", p, "liveBytes", live, "floorBytes", size)
			current = p
		}
	}
	set()
	t := time.NewTicker(checkEvery)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
			set()
		}
	}
}

// Percent is the GOGC that puts the heap goal at floor bytes, given the live heap and the
// roots the pacer counts, goroutine stacks and globals, and never below base.
//
// The runtime's goal is the larger of live + (live + roots) x GOGC / 100 and a minimum
// heap of 4 MiB x GOGC / 100 (runtime/debug.SetGCPercent scales both). So GOGC is the
// smaller of the percent that puts the first at the floor and floor / 4 MiB x 100, which
// puts the minimum at the floor: whichever term rules, the goal is the floor, never
// several times it. The stacks are the memory they hold, not the part the last
// collection scanned: counting only that put the goal at 1.8 times the floor.
func Percent(floor, live, roots uint64, base int) int {
	if live >= floor {
		return base
	}
	p := min((floor-live)*100/max(live+roots, 1), floor*100/minimumHeap, maxPercent)
	return max(int(p), base)
}

// percentFromEnv reads GOGC as the runtime does: unset or unreadable is 100, "off" is
// the collector turned off.
func percentFromEnv(v string) (percent int, on bool) {
	if v == "off" {
		return 0, false
	}
	p, err := strconv.ParseInt(v, 10, 32)
	switch {
	case err != nil:
		return 100, true
	case p < 0:
		return 0, false
	}
	return int(p), true
}

func value(s metrics.Sample) uint64 {
	if s.Value.Kind() == metrics.KindUint64 {
		return s.Value.Uint64()
	}
	return 0
}
