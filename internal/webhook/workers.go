package webhook

import "time"

// workerIdle is how long an idle handler worker waits for the next review before it
// ends.
const workerIdle = 10 * time.Second

// workers runs review handlers on goroutines kept between reviews. A handler runs off
// the request's goroutine, so that the answer never waits for it past the deadline
// (see answerReview); a fresh goroutine per review grew its stack from the minimum on
// every review, since decoding and the policies run deep. A kept worker's stack is
// already grown; what remains is the hand-over itself (waking a thread). A worker ends
// after workerIdle without work, and one whose handler never returns is lost alone, as
// a goroutine per review would be.
type workers struct {
	jobs chan func()
}

func newWorkers() *workers { return &workers{jobs: make(chan func())} }

// run hands job to an idle worker, or starts one when none is idle: it never waits.
func (p *workers) run(job func()) {
	select {
	case p.jobs <- job:
	default:
		go p.work(job)
	}
}

// work runs job, then the jobs handed to it, until it has been idle for workerIdle.
func (p *workers) work(job func()) {
	idle := time.NewTimer(workerIdle)
	defer idle.Stop()
	for {
		job()
		idle.Reset(workerIdle)
		select {
		case job = <-p.jobs:
		case <-idle.C:
			return
		}
	}
}
