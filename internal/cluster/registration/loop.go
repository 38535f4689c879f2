package registration

import (
	"context"
	"time"
)

// DefaultResync is how often the reconcilers recheck without an event: spec 003's
// safety ticker of 30 seconds.
const DefaultResync = 30 * time.Second

// retryPause is the wait before a failed reconciliation is tried again.
const retryPause = time.Second

// trigger is a wake-up signal that coalesces: several wakes before the reconciler
// runs make one run.
type trigger chan struct{}

func newTrigger() trigger { return make(trigger, 1) }

func (t trigger) wake() {
	select {
	case t <- struct{}{}:
	default:
	}
}

// forward wakes t on every receive from each of chs, until ctx ends.
func (t trigger) forward(ctx context.Context, chs ...<-chan struct{}) {
	for _, ch := range chs {
		if ch == nil {
			continue
		}
		go func() {
			for {
				select {
				case <-ctx.Done():
					return
				case <-ch:
					t.wake()
				}
			}
		}()
	}
}

// loop runs reconcile now, on every wake of t, every resync, and retryPause after each
// failure, until ctx ends. A failure is passed to failed and retried.
func loop(ctx context.Context, t trigger, resync time.Duration, reconcile func(context.Context) error, failed func(error)) {
	if resync <= 0 {
		resync = DefaultResync
	}
	ticker := time.NewTicker(resync)
	defer ticker.Stop()
	for {
		var retry <-chan time.Time
		if err := reconcile(ctx); err != nil && ctx.Err() == nil {
			failed(err)
			retry = time.After(retryPause)
		}
		select {
		case <-ctx.Done():
			return
		case <-t:
		case <-ticker.C:
		case <-retry:
		}
	}
}
