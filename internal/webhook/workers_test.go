package webhook

import (
	"sync"
	"testing"
	"time"
)

// A handler that never returns holds only its own worker: the next review runs at
// once, on another, and handing a job over never waits.
func TestWorkersAStuckJobHoldsOnlyItsWorker(t *testing.T) {
	p := newWorkers()
	release := make(chan struct{})
	defer close(release)
	stuck := make(chan struct{})
	p.run(func() {
		close(stuck)
		<-release
	})
	<-stuck
	for i := range 3 {
		ran := make(chan struct{})
		p.run(func() { close(ran) })
		select {
		case <-ran:
		case <-time.After(10 * time.Second):
			t.Fatalf("job %d did not run while another was stuck", i)
		}
	}
}

// Jobs handed over from many goroutines all run, each once.
func TestWorkersRunEveryJobOnce(t *testing.T) {
	p := newWorkers()
	var mu sync.Mutex
	counts := make(map[int]int)
	var wg sync.WaitGroup
	for i := range 200 {
		wg.Add(1)
		p.run(func() {
			defer wg.Done()
			mu.Lock()
			counts[i]++
			mu.Unlock()
		})
	}
	wg.Wait()
	for i := range 200 {
		if counts[i] != 1 {
			t.Fatalf("job %d ran %d times", i, counts[i])
		}
	}
}
