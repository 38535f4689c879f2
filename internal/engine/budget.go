package engine

import (
	"context"
	"errors"
	"fmt"
	"time"
)

// TimeoutError is the error of a policy call that outlived the policy's own Timeout.
type TimeoutError struct {
	ID      ID
	Timeout time.Duration
	// Field names the policy field that set the timeout, when there is one.
	Field string
}

func (e *TimeoutError) Error() string {
	if e.Field != "" {
		return fmt.Sprintf("did not finish within %s (%s)", e.Timeout, e.Field)
	}
	return fmt.Sprintf("did not finish within the policy's timeout of %s", e.Timeout)
}

// Is makes errors.Is(err, context.DeadlineExceeded) true.
func (e *TimeoutError) Is(target error) bool { return target == context.DeadlineExceeded }

// DeadlineError is the error of work stopped by the request's own deadline. Surfaces
// set it as the cause of the request's context (WithRequestDeadline), so that every
// message says which deadline ended the work.
type DeadlineError struct {
	// Reason says where the deadline comes from: "the API server's ?timeout=10s",
	// "--request-timeout 10s".
	Reason string
}

func (e *DeadlineError) Error() string {
	return "the request's deadline passed (" + e.Reason + ")"
}

// Is makes errors.Is(err, context.DeadlineExceeded) true, as it is for the context's
// own error.
func (e *DeadlineError) Is(target error) bool { return target == context.DeadlineExceeded }

// WithRequestDeadline bounds a request's work, with a DeadlineError as the cause that
// messages report.
func WithRequestDeadline(ctx context.Context, deadline time.Time, reason string) (context.Context, context.CancelFunc) {
	return context.WithDeadlineCause(ctx, deadline, &DeadlineError{Reason: reason})
}

// Stopped returns why ctx ended, for messages: the DeadlineError or TimeoutError that
// caused it, or the context's own error. It returns nil while ctx is live.
func Stopped(ctx context.Context) error {
	if ctx.Err() == nil {
		return nil
	}
	if cause := context.Cause(ctx); cause != nil {
		return cause
	}
	return ctx.Err()
}

// callContext is the context of one call of a policy: ctx, bounded by the policy's
// Timeout when that ends before ctx's own deadline. It starts one timer, and only when
// the policy's timeout is the nearer deadline.
func callContext(ctx context.Context, d *Descriptor) (context.Context, context.CancelFunc) {
	if d.Timeout <= 0 {
		return ctx, func() {}
	}
	if dl, ok := ctx.Deadline(); ok && time.Until(dl) <= d.Timeout {
		return ctx, func() {}
	}
	return context.WithTimeoutCause(ctx, d.Timeout, &TimeoutError{ID: d.ID, Timeout: d.Timeout, Field: d.TimeoutField})
}

// late returns the error of a call whose context ended: whatever the call returned, it
// came after its deadline, and a result that late is never used.
func late(ctx context.Context) error {
	err := Stopped(ctx)
	if err == nil {
		return nil
	}
	var te *TimeoutError
	if errors.As(err, &te) {
		return err
	}
	return fmt.Errorf("stopped: %w", err)
}
