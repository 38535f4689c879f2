// Package leader elects one morph replica, on a coordination.k8s.io Lease, to run the
// cluster writers: webhook registration, the certificate Secret, CRD caBundles, policy
// status and background work. Every replica serves admission and conversion; only the
// leader writes.
//
// Writers are Runnables added to an Elector. While this replica leads, each runs in
// its own goroutine with a context that ends the moment the lease is lost (client-go
// gives up renewing) or the process shuts down; a Runnable that returns an error while
// still leading is run again after a pause. After losing the lease the replica stands
// for election again, and this one may lead later.
//
// The lease is released (its holder cleared, so that a successor need not wait for it
// to expire) only after every writer of the term returned: client-go's ReleaseOnCancel
// releases before OnStoppedLeading runs, while writes may still be in flight, so the
// Elector does not use it and releases the lease itself, on shutdown and after a lost
// renewal.
//
// When a leader dies without releasing, a candidate acquires the lease once it has
// seen the same record unchanged for the lease duration (client-go measures from its
// own observation, polled every retry period with jitter): see docs/cluster.md for the
// bounds.
package leader

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/rand"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/leaderelection"
	"k8s.io/client-go/tools/leaderelection/resourcelock"
)

// Defaults of Config, as the cluster-mode flags have them.
const (
	DefaultLeaseName     = "morph"
	DefaultLeaseDuration = 15 * time.Second
	DefaultRenewDeadline = 10 * time.Second
	DefaultRetryPeriod   = 2 * time.Second
)

// restartPause is how long a leader waits before running a failed Runnable again.
const restartPause = 2 * time.Second

// Runnable is work that only the leader does. Run returns when ctx ends (nil or
// ctx.Err()), or with an error, after which it is run again while this replica leads.
type Runnable interface {
	Run(ctx context.Context) error
}

// RunnableFunc adapts a function to Runnable.
type RunnableFunc func(ctx context.Context) error

// Run calls f.
func (f RunnableFunc) Run(ctx context.Context) error { return f(ctx) }

// Config configures an Elector.
type Config struct {
	// Client reaches the API server; nil turns election off: this replica always leads
	// (--leader-elect=false).
	Client kubernetes.Interface
	// Namespace and Name of the Lease (Name defaults to "morph").
	Namespace, Name string
	// Identity of this replica in the Lease (default: host name and a random suffix).
	Identity string
	// LeaseDuration, RenewDeadline, RetryPeriod as in client-go's leaderelection
	// (defaults 15s, 10s, 2s).
	LeaseDuration, RenewDeadline, RetryPeriod time.Duration
	// Logger receives the elector's logs (discarded when nil).
	Logger *slog.Logger
}

// Elector runs its Runnables while this replica holds the Lease. Build it with New,
// Add the Runnables, then Run it.
type Elector struct {
	cfg     Config
	log     *slog.Logger
	leading atomic.Bool
	metrics *metrics
	// pause is how long a failed Runnable waits before it runs again (restartPause).
	pause time.Duration

	mu        sync.Mutex // guards the fields below
	runnables []named
	// running is the context of the current term, nil while not leading; start
	// launches into it the Runnables added during a term.
	running context.Context
	cancel  context.CancelFunc
	wg      *sync.WaitGroup
}

type named struct {
	name string
	run  Runnable
}

// New checks cfg and returns an Elector.
func New(cfg Config) (*Elector, error) {
	if cfg.Name == "" {
		cfg.Name = DefaultLeaseName
	}
	if cfg.LeaseDuration <= 0 {
		cfg.LeaseDuration = DefaultLeaseDuration
	}
	if cfg.RenewDeadline <= 0 {
		cfg.RenewDeadline = DefaultRenewDeadline
	}
	if cfg.RetryPeriod <= 0 {
		cfg.RetryPeriod = DefaultRetryPeriod
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	if cfg.Identity == "" {
		host, err := os.Hostname()
		if err != nil || host == "" {
			host = "morph"
		}
		cfg.Identity = host + "_" + rand.String(8)
	}
	if cfg.Client != nil {
		switch {
		case cfg.Namespace == "":
			return nil, errors.New("leader election needs the namespace of its Lease: give --namespace")
		case cfg.LeaseDuration <= cfg.RenewDeadline:
			return nil, fmt.Errorf("--leader-election-lease-duration (%s) must be longer than --leader-election-renew-deadline (%s)", cfg.LeaseDuration, cfg.RenewDeadline)
		case float64(cfg.RenewDeadline) <= leaderelection.JitterFactor*float64(cfg.RetryPeriod):
			return nil, fmt.Errorf("--leader-election-renew-deadline (%s) must be longer than %.1f x --leader-election-retry-period (%s)", cfg.RenewDeadline, leaderelection.JitterFactor, cfg.RetryPeriod)
		}
	}
	return &Elector{cfg: cfg, log: cfg.Logger.With("lease", cfg.Namespace+"/"+cfg.Name, "identity", cfg.Identity), metrics: newMetrics(), pause: restartPause}, nil
}

// Identity is this replica's name in the Lease.
func (e *Elector) Identity() string { return e.cfg.Identity }

// Leading reports whether this replica leads now: false from the moment the writers'
// context ends.
func (e *Elector) Leading() bool {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.running != nil && e.running.Err() == nil
}

// Collectors are the elector's metrics: morph_leader_is_leader and
// morph_leader_transitions_total.
func (e *Elector) Collectors() []prometheus.Collector {
	return []prometheus.Collector{e.metrics.isLeader, e.metrics.transitions}
}

// Add registers a Runnable that runs only while this replica leads. It may be called at
// any time: added while leading, it starts at once. name appears in the logs.
func (e *Elector) Add(name string, r Runnable) {
	e.mu.Lock()
	defer e.mu.Unlock()
	n := named{name: name, run: r}
	e.runnables = append(e.runnables, n)
	if e.running != nil {
		e.start(e.running, n)
	}
}

// Run stands for election until ctx ends, running the Runnables during each term. It
// returns once ctx ended, the lease was released and every Runnable returned.
func (e *Elector) Run(ctx context.Context) error {
	if e.cfg.Client == nil {
		e.log.Info("leader election off: this replica runs the cluster writers")
		e.lead(ctx)
		<-ctx.Done()
		e.stop()
		return nil
	}
	lock := &resourcelock.LeaseLock{
		LeaseMeta:  metav1.ObjectMeta{Namespace: e.cfg.Namespace, Name: e.cfg.Name},
		Client:     e.cfg.Client.CoordinationV1(),
		LockConfig: resourcelock.ResourceLockConfig{Identity: e.cfg.Identity},
	}
	for ctx.Err() == nil {
		le, err := leaderelection.NewLeaderElector(leaderelection.LeaderElectionConfig{
			Lock:          lock,
			LeaseDuration: e.cfg.LeaseDuration,
			RenewDeadline: e.cfg.RenewDeadline,
			RetryPeriod:   e.cfg.RetryPeriod,
			// Not ReleaseOnCancel: release, below, waits for the writers.
			ReleaseOnCancel: false,
			Name:            e.cfg.Name,
			Callbacks: leaderelection.LeaderCallbacks{
				OnStartedLeading: e.lead,
				OnStoppedLeading: e.stop,
				OnNewLeader: func(identity string) {
					if identity != e.cfg.Identity {
						e.log.Info("another replica leads", "leader", identity)
					}
				},
			},
		})
		if err != nil {
			return fmt.Errorf("leader election: %w", err)
		}
		e.log.Info("standing for election")
		le.Run(ctx) // returns when ctx ends or the lease is lost, after stop
		// The writers returned (stop waited for them): release the lease if it still
		// names this replica, also when the term ended before its writers started.
		e.release(lock)
	}
	return nil
}

// release clears the Lease's holder when it still names this replica, as client-go's
// ReleaseOnCancel does (a one-second lease, holder empty, so that any candidate may
// acquire at once), but only after the writers stopped (stop waited for them).
func (e *Elector) release(lock *resourcelock.LeaseLock) {
	ctx, cancel := context.WithTimeout(context.Background(), e.cfg.RenewDeadline)
	defer cancel()
	for range 3 { // a conflict with our own last renewal is retried
		old, _, err := lock.Get(ctx)
		if err != nil {
			e.log.Warn("could not release the lease; it expires by itself", "error", err)
			return
		}
		if old.HolderIdentity != e.cfg.Identity {
			return
		}
		now := metav1.NewTime(time.Now())
		err = lock.Update(ctx, resourcelock.LeaderElectionRecord{
			LeaderTransitions: old.LeaderTransitions, LeaseDurationSeconds: 1, RenewTime: now, AcquireTime: now,
		})
		if err == nil {
			e.log.Info("released the lease")
			return
		}
		if !apierrors.IsConflict(err) {
			e.log.Warn("could not release the lease; it expires by itself", "error", err)
			return
		}
	}
}

// lead starts a term: every Runnable runs under ctx, which ends with the term.
func (e *Elector) lead(ctx context.Context) {
	e.mu.Lock()
	defer e.mu.Unlock()
	if ctx.Err() != nil {
		return // the term ended before it started (client-go starts it on a goroutine)
	}
	e.leading.Store(true)
	e.metrics.became(true)
	e.log.Info("became the leader: starting the cluster writers", "writers", len(e.runnables))
	term, cancel := context.WithCancel(ctx)
	e.running, e.cancel, e.wg = term, cancel, &sync.WaitGroup{}
	for _, n := range e.runnables {
		e.start(term, n)
	}
}

// start runs n under ctx until ctx ends, again after each error. Called with mu held.
func (e *Elector) start(ctx context.Context, n named) {
	e.wg.Go(func() {
		for {
			err := n.run.Run(ctx)
			if ctx.Err() != nil {
				return
			}
			if err == nil {
				e.log.Info("cluster writer finished", "writer", n.name)
				return
			}
			e.log.Error("cluster writer failed; running it again", "writer", n.name, "error", err, "after", e.pause)
			select {
			case <-ctx.Done():
				return
			case <-time.After(e.pause):
			}
		}
	})
}

// stop ends the current term: it cancels the writers' context at once and waits for
// them to return.
func (e *Elector) stop() {
	e.mu.Lock()
	cancel, wg := e.cancel, e.wg
	wasLeading := e.leading.Swap(false)
	e.running, e.cancel, e.wg = nil, nil, nil
	e.mu.Unlock()
	if cancel == nil {
		return
	}
	cancel()
	if wasLeading {
		e.metrics.became(false)
		e.log.Info("stopped leading: cluster writers stopped")
	}
	wg.Wait()
}
