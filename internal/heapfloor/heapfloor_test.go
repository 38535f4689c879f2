package heapfloor

import (
	"context"
	"runtime"
	"runtime/metrics"
	"testing"
	"time"
)

func TestPercent(t *testing.T) {
	const mib = 1 << 20
	tests := []struct {
		name               string
		floor, live, roots uint64
		base, want         int
	}{
		{"small live heap: the minimum heap is the floor", 64 * mib, 1 * mib, 0, 100, 1600},
		{"the goal formula rules once live and roots pass 4 MiB", 64 * mib, 4 * mib, 4 * mib, 100, 750},
		{"never below the process's GOGC", 64 * mib, 40 * mib, 0, 100, 100},
		{"a higher GOGC wins", 64 * mib, 1 * mib, 0, 2000, 2000},
		{"live heap over the floor", 64 * mib, 80 * mib, 0, 100, 100},
		{"nothing live yet: the minimum heap is the floor", 64 * mib, 0, 0, 100, 1600},
		{"a large floor", 1024 * mib, 2 * mib, 1 * mib, 100, 25600},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := Percent(tt.floor, tt.live, tt.roots, tt.base); got != tt.want {
				t.Errorf("Percent(%d, %d, %d, %d) = %d, want %d", tt.floor, tt.live, tt.roots, tt.base, got, tt.want)
			}
		})
	}
}

func TestPercentFromEnv(t *testing.T) {
	tests := []struct {
		env  string
		want int
		on   bool
	}{{"", 100, true}, {"50", 50, true}, {" 300 ", 100, true}, {"off", 0, false}, {"-1", 0, false}, {"junk", 100, true}}
	for _, tt := range tests {
		if got, on := percentFromEnv(tt.env); got != tt.want || on != tt.on {
			t.Errorf("percentFromEnv(%q) = %d, %v; want %d, %v", tt.env, got, on, tt.want, tt.on)
		}
	}
}

func readUint(name string) uint64 {
	s := []metrics.Sample{{Name: name}}
	metrics.Read(s)
	return s[0].Value.Uint64()
}

// waitFor polls cond for up to a minute, collecting garbage between polls so that Keep
// sees new cycles.
func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	for deadline := time.Now().Add(time.Minute); !cond(); {
		if time.Now().After(deadline) {
			t.Fatalf("gave up waiting for %s: GOGC %d, heap goal %d bytes", what, readUint("/gc/gogc:percent"), readUint("/gc/heap/goal:bytes"))
		}
		runtime.GC()
		time.Sleep(20 * time.Millisecond)
	}
}

// TestKeepRaisesTheGoalAndRestores runs the floor on this test process: the heap goal
// reaches the floor, a live heap above the floor brings GOGC back, and the end of Keep
// restores the process's GOGC.
func TestKeepRaisesTheGoalAndRestores(t *testing.T) {
	t.Setenv("GOGC", "100")
	const floor = 256 << 20
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { Keep(ctx, floor, nil); close(done) }()

	waitFor(t, "the heap goal to reach the floor", func() bool {
		return readUint("/gc/heap/goal:bytes") >= floor*9/10 && readUint("/gc/gogc:percent") > 100
	})
	if goal := readUint("/gc/heap/goal:bytes"); goal > floor*11/10 {
		t.Errorf("heap goal %d bytes with a floor of %d: the floor must not multiply the heap", goal, floor)
	}

	live := make([][]byte, 0, 40)
	for range 40 {
		live = append(live, make([]byte, 8<<20)) // 320 MiB live, over the floor
	}
	waitFor(t, "GOGC back at 100 with a live heap over the floor", func() bool {
		return readUint("/gc/gogc:percent") == 100
	})
	runtime.KeepAlive(live)
	clear(live) // the 320 MiB are garbage from here on

	waitFor(t, "the floor again once the heap is small", func() bool {
		return readUint("/gc/gogc:percent") > 100
	})
	cancel()
	<-done
	if got := readUint("/gc/gogc:percent"); got != 100 {
		t.Errorf("GOGC after Keep ended = %d, want 100", got)
	}
}

func TestKeepOff(t *testing.T) {
	for _, tt := range []struct {
		name, gogc string
		size       uint64
	}{{"size 0", "100", 0}, {"GOGC=off", "off", 64 << 20}} {
		t.Run(tt.name, func(t *testing.T) {
			t.Setenv("GOGC", tt.gogc)
			done := make(chan struct{})
			go func() { Keep(context.Background(), tt.size, nil); close(done) }()
			select {
			case <-done:
			case <-time.After(time.Minute):
				t.Fatal("Keep did not return at once")
			}
		})
	}
}
