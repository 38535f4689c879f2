package katalog

import (
	"math"
	"slices"
	"sync"
	"time"
)

// statsWindow is how many recent latencies the p95 is computed over.
const statsWindow = 1024

// ConversionStats counts an entry's conversions. It is safe for concurrent use and its
// memory is bounded: the p95 is taken over the last statsWindow conversions, the
// average over all of them.
type ConversionStats struct {
	mu       sync.Mutex
	total    uint64
	failures uint64
	sum      time.Duration
	recent   [statsWindow]time.Duration
	filled   int
	next     int
}

// ConversionSnapshot is spec 003's statistics document.
type ConversionSnapshot struct {
	Enabled      bool    `json:"enabled"`
	Total        uint64  `json:"total"`
	Failures     uint64  `json:"failures"`
	AvgLatencyMs float64 `json:"avgLatencyMs"`
	P95LatencyMs float64 `json:"p95LatencyMs"`
}

// Record counts one conversion that took d and failed when err is not nil.
func (s *ConversionStats) Record(d time.Duration, err error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.total++
	if err != nil {
		s.failures++
	}
	s.sum += d
	s.recent[s.next] = d
	s.next = (s.next + 1) % statsWindow
	s.filled = min(s.filled+1, statsWindow)
}

// Snapshot returns the statistics so far, latencies in milliseconds rounded to three
// decimals.
func (s *ConversionStats) Snapshot() ConversionSnapshot {
	s.mu.Lock()
	out := ConversionSnapshot{Enabled: true, Total: s.total, Failures: s.failures}
	recent := slices.Clone(s.recent[:s.filled])
	sum := s.sum
	s.mu.Unlock()
	if out.Total > 0 {
		out.AvgLatencyMs = millis(sum / time.Duration(out.Total))
	}
	if len(recent) > 0 {
		slices.Sort(recent)
		rank := int(math.Ceil(0.95*float64(len(recent)))) - 1
		out.P95LatencyMs = millis(recent[rank])
	}
	return out
}

func millis(d time.Duration) float64 {
	return math.Round(float64(d)/float64(time.Millisecond)*1000) / 1000
}
