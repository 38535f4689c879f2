package leader

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	k8sruntime "k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/kubernetes/fake"
	k8stesting "k8s.io/client-go/testing"
)

// wait bounds every wait of these tests; none asserts a duration.
const wait = 20 * time.Second

func fastConfig(client *fake.Clientset, identity string) Config {
	return Config{Client: client, Namespace: "morph-system", Identity: identity,
		LeaseDuration: 1500 * time.Millisecond, RenewDeadline: time.Second, RetryPeriod: 100 * time.Millisecond}
}

// writer is a Runnable that reports when it starts and when its context ends.
type writer struct {
	started, stopped chan string
	name             string
}

func newWriter(name string) *writer {
	return &writer{started: make(chan string, 10), stopped: make(chan string, 10), name: name}
}

func (w *writer) Run(ctx context.Context) error {
	w.started <- w.name
	<-ctx.Done()
	w.stopped <- w.name
	return nil
}

func receive(t *testing.T, ch <-chan string, what string) string {
	t.Helper()
	select {
	case v := <-ch:
		return v
	case <-time.After(wait):
		t.Fatalf("%s did not happen within %v", what, wait)
		return ""
	}
}

func startElector(t *testing.T, e *Elector) (stop func()) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- e.Run(ctx) }()
	stopped := false
	stop = func() {
		if stopped {
			return
		}
		stopped = true
		cancel()
		select {
		case err := <-done:
			if err != nil {
				t.Errorf("Run: %v", err)
			}
		case <-time.After(wait):
			t.Errorf("Run did not return within %v of its context's end", wait)
		}
	}
	t.Cleanup(stop)
	return stop
}

func TestShutdownReleasesTheLeaseAndTheOtherReplicaTakesOver(t *testing.T) {
	client := fake.NewClientset()
	a, err := New(fastConfig(client, "a"))
	if err != nil {
		t.Fatal(err)
	}
	wa := newWriter("a")
	a.Add("writer", wa)
	stopA := startElector(t, a)
	receive(t, wa.started, "a's writer starting")
	if !a.Leading() {
		t.Fatal("a runs its writer but does not say it leads")
	}

	b, err := New(fastConfig(client, "b"))
	if err != nil {
		t.Fatal(err)
	}
	wb := newWriter("b")
	b.Add("writer", wb)
	startElector(t, b)
	select {
	case <-wb.started:
		t.Fatal("b's writer started while a holds the lease")
	case <-time.After(500 * time.Millisecond): // several retry periods of b
	}

	stopA() // releases the lease (ReleaseOnCancel)
	receive(t, wa.stopped, "a's writer stopping on shutdown")
	lease, err := client.CoordinationV1().Leases("morph-system").Get(context.Background(), "morph", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if h := lease.Spec.HolderIdentity; h != nil && *h == "a" {
		t.Errorf("after a's shutdown the lease still names a as holder")
	}
	receive(t, wb.started, "b's writer starting after a released the lease")
	if a.Leading() || !b.Leading() {
		t.Errorf("a leading %t, b leading %t; want b only", a.Leading(), b.Leading())
	}
}

func TestLosingTheLeaseStopsTheWriters(t *testing.T) {
	client := fake.NewClientset()
	var failRenewals atomic.Bool
	client.PrependReactor("update", "leases", func(k8stesting.Action) (bool, k8sruntime.Object, error) {
		if failRenewals.Load() {
			return true, nil, errors.New("the API server is unreachable")
		}
		return false, nil, nil
	})
	e, err := New(fastConfig(client, "a"))
	if err != nil {
		t.Fatal(err)
	}
	w := newWriter("a")
	e.Add("writer", w)
	startElector(t, e)
	receive(t, w.started, "the writer starting")
	failRenewals.Store(true)
	receive(t, w.stopped, "the writer stopping when the lease cannot be renewed")
	if e.Leading() {
		t.Error("Leading() is true after the lease was lost")
	}
	failRenewals.Store(false)
	receive(t, w.started, "the writer starting again once the lease is won again")
}

func TestAddWhileLeadingStartsAtOnce(t *testing.T) {
	e, err := New(Config{}) // no client: always leads
	if err != nil {
		t.Fatal(err)
	}
	first := newWriter("first")
	e.Add("first", first)
	startElector(t, e)
	receive(t, first.started, "the first writer starting")
	late := newWriter("late")
	e.Add("late", late)
	receive(t, late.started, "a writer added during the term starting")
}

func TestFailedWriterRunsAgain(t *testing.T) {
	e, err := New(Config{})
	if err != nil {
		t.Fatal(err)
	}
	e.pause = time.Millisecond
	runs := make(chan string, 10)
	var n atomic.Int32
	e.Add("flaky", RunnableFunc(func(ctx context.Context) error {
		runs <- "run"
		if n.Add(1) < 3 {
			return errors.New("conflict")
		}
		<-ctx.Done()
		return nil
	}))
	startElector(t, e)
	for i := range 3 {
		receive(t, runs, "run "+string(rune('1'+i)))
	}
}

func TestMetricsFollowTheRole(t *testing.T) {
	e, err := New(Config{})
	if err != nil {
		t.Fatal(err)
	}
	w := newWriter("w")
	e.Add("w", w)
	stop := startElector(t, e)
	receive(t, w.started, "the writer starting")
	if got := gaugeValue(t, e); got != 1 {
		t.Errorf("morph_leader_is_leader = %v while leading; want 1", got)
	}
	stop()
	if got := gaugeValue(t, e); got != 0 {
		t.Errorf("morph_leader_is_leader = %v after stopping; want 0", got)
	}
}

func TestConfigChecks(t *testing.T) {
	client := fake.NewClientset()
	for _, tc := range []struct {
		name string
		cfg  Config
	}{
		{"no namespace", Config{Client: client}},
		{"lease not longer than renew", Config{Client: client, Namespace: "ns", LeaseDuration: 5 * time.Second, RenewDeadline: 5 * time.Second}},
		{"renew too short for retry", Config{Client: client, Namespace: "ns", RenewDeadline: 2 * time.Second, RetryPeriod: 2 * time.Second}},
	} {
		if _, err := New(tc.cfg); err == nil {
			t.Errorf("%s: New accepted %+v", tc.name, tc.cfg)
		}
	}
}

// slowWriter is a Runnable whose last write is still in flight for a while after its
// context ended: it returns only then.
type slowWriter struct {
	started  chan string
	returned atomic.Bool
	inFlight time.Duration
}

func (w *slowWriter) Run(ctx context.Context) error {
	w.started <- "started"
	<-ctx.Done()
	time.Sleep(w.inFlight) // a write under way when the term ended
	w.returned.Store(true)
	return nil
}

// releases watches the Lease updates that clear the holder (a release) and records
// whether one came while the writer had not returned.
func releases(client *fake.Clientset, w *slowWriter) (released <-chan struct{}, early *atomic.Bool) {
	ch := make(chan struct{}, 10)
	early = &atomic.Bool{}
	client.PrependReactor("update", "leases", func(a k8stesting.Action) (bool, k8sruntime.Object, error) {
		lease, ok := a.(k8stesting.UpdateAction).GetObject().(*coordinationv1.Lease)
		if ok && (lease.Spec.HolderIdentity == nil || *lease.Spec.HolderIdentity == "") {
			if !w.returned.Load() {
				early.Store(true)
			}
			ch <- struct{}{}
		}
		return false, nil, nil
	})
	return ch, early
}

func TestShutdownReleasesTheLeaseOnlyAfterTheWritersReturned(t *testing.T) {
	client := fake.NewClientset()
	w := &slowWriter{started: make(chan string, 10), inFlight: 300 * time.Millisecond}
	released, early := releases(client, w)
	e, err := New(fastConfig(client, "a"))
	if err != nil {
		t.Fatal(err)
	}
	e.Add("slow", w)
	stop := startElector(t, e)
	receive(t, w.started, "the writer starting")
	stop()
	select {
	case <-released:
	default:
		t.Fatal("shutdown did not release the lease")
	}
	if early.Load() {
		t.Error("the lease was released while a writer's write was still in flight")
	}
}

func TestALostLeaseStopsTheWritersBeforeAnyRelease(t *testing.T) {
	client := fake.NewClientset()
	w := &slowWriter{started: make(chan string, 10), inFlight: 300 * time.Millisecond}
	// Renewals fail; a release (holder cleared) goes through.
	var failRenewals atomic.Bool
	client.PrependReactor("update", "leases", func(a k8stesting.Action) (bool, k8sruntime.Object, error) {
		lease, ok := a.(k8stesting.UpdateAction).GetObject().(*coordinationv1.Lease)
		if failRenewals.Load() && ok && lease.Spec.HolderIdentity != nil && *lease.Spec.HolderIdentity == "a" {
			return true, nil, errors.New("the API server is unreachable")
		}
		return false, nil, nil
	})
	released, early := releases(client, w) // prepended: runs before the failing reactor
	e, err := New(fastConfig(client, "a"))
	if err != nil {
		t.Fatal(err)
	}
	e.Add("slow", w)
	startElector(t, e)
	receive(t, w.started, "the writer starting")
	failRenewals.Store(true)
	select {
	case <-released:
	case <-time.After(wait):
		t.Fatalf("the lost lease was not released within %v", wait)
	}
	if early.Load() {
		t.Error("the lease was released while the writer still ran")
	}
	if !w.returned.Load() {
		t.Error("the writer had not returned when the lease was released")
	}
}
