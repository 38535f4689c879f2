package webhook

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"mime"
	"net/http"
	"runtime/debug"
	"strconv"
	"strings"
	"time"

	"github.com/morph-dev/morph/internal/engine"
)

// reply is a handler's answer: a JSON body with status 200, or an error status with a
// plain-text message.
type reply struct {
	status  int
	body    any
	message string
	outcome string
}

func ok(body any, outcome string) reply {
	return reply{status: http.StatusOK, body: body, outcome: outcome}
}

func badRequest(format string, args ...any) reply {
	return reply{status: http.StatusBadRequest, message: fmt.Sprintf(format, args...), outcome: outcomeBadRequest}
}

// call describes one review request, for its log line.
type call struct {
	// group is the webhook group of the path (/mutate/<group>), "" for every policy.
	group                                 string
	uid, kind, operation, namespace, name string
	// err is a failure to log at error level even though the request was answered.
	err error
}

func (c *call) attrs() []any {
	return []any{"uid", c.uid, "kind", c.kind, "operation", c.operation, "namespace", c.namespace, "name", c.name}
}

// reviewHandler decodes and answers one review body under ctx, which carries the
// request's deadline.
type reviewHandler func(ctx context.Context, body []byte, c *call) reply

// review wraps a review endpoint: method, content type, size limit, deadline, panic
// recovery, metrics and the request's log line.
func (s *Server) review(endpoint string, h reviewHandler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		start := time.Now()
		c := &call{}
		var rep reply
		if group, ok := pathGroup(r.URL.Path, endpoint); ok {
			c.group = group
			rep = s.answerReview(w, r, h, c)
		} else {
			rep = reply{status: http.StatusNotFound, message: fmt.Sprintf("%s is not a %s endpoint: use /%s or /%s/<group>", r.URL.Path, endpoint, endpoint, endpoint), outcome: outcomeBadRequest}
		}
		s.write(w, rep)
		elapsed := time.Since(start)
		s.metrics.requests.WithLabelValues(endpoint, rep.outcome).Inc()
		s.metrics.latency.WithLabelValues(endpoint, rep.outcome).Observe(elapsed.Seconds())
		msg, level, errText := "request", slog.LevelDebug, any(nil)
		switch {
		case rep.status >= 500 || c.err != nil:
			msg, level, errText = "request failed", slog.LevelError, rep.message
			if c.err != nil {
				errText = c.err
			}
		case rep.status >= 400:
			msg, level, errText = "request rejected", slog.LevelWarn, rep.message
		}
		if !s.log.Enabled(r.Context(), level) {
			return // the attributes below cost a dozen allocations a request
		}
		attrs := append([]any{"endpoint", endpoint, "status", rep.status, "outcome", rep.outcome, "duration", elapsed}, c.attrs()...)
		if errText != nil {
			attrs = append(attrs, "error", errText)
		}
		s.log.Log(r.Context(), level, msg, attrs...)
	})
}

// pathGroup reads the webhook group of a review path: "" for /<endpoint>, the group
// for /<endpoint>/<group>; false for anything else.
func pathGroup(path, endpoint string) (string, bool) {
	rest, ok := strings.CutPrefix(path, "/"+endpoint)
	if !ok {
		return "", false
	}
	if rest == "" {
		return "", true
	}
	group, ok := strings.CutPrefix(rest, "/")
	if !ok || group == "" || strings.Contains(group, "/") {
		return "", false
	}
	return group, true
}

// maxPooledBody is the largest buffer kept for reuse: a rare huge review should not
// pin its memory.
const maxPooledBody = 1 << 20

// maxPresize bounds the buffer reserved from a request's Content-Length before its
// bytes arrive; a larger body grows the buffer as it is read.
const maxPresize = 64 << 10

// readBody reads a request body of at most limit bytes into a buffer of s.bodies; give
// it back with releaseBody. Nothing decoded from a body keeps a reference to it
// (jsonvalue copies strings, RawExtension copies its bytes), so a buffer is reused as
// soon as its request is answered.
func (s *Server) readBody(w http.ResponseWriter, r *http.Request, limit int64) (*bytes.Buffer, error) {
	buf, _ := s.bodies.Get().(*bytes.Buffer)
	if buf == nil {
		buf = new(bytes.Buffer)
	}
	buf.Reset()
	if r.ContentLength > 0 {
		// Presized from the declared length, up to what typical reviews need: a client
		// that declares --max-body and sends nothing must not make the server hold it.
		buf.Grow(int(min(r.ContentLength, maxPresize)) + bytes.MinRead)
	}
	if _, err := buf.ReadFrom(http.MaxBytesReader(w, r.Body, limit)); err != nil {
		s.releaseBody(buf)
		return nil, err
	}
	return buf, nil
}

// releaseBody gives a buffer of readBody back, unless it grew too large to keep.
func (s *Server) releaseBody(buf *bytes.Buffer) {
	if buf.Cap() <= maxPooledBody {
		s.bodies.Put(buf)
	}
}

func (s *Server) answerReview(w http.ResponseWriter, r *http.Request, h reviewHandler, c *call) (rep reply) {
	// The deadline starts when the request arrives: reading the body counts.
	arrived := time.Now()
	if r.Method != http.MethodPost {
		w.Header().Set("Allow", http.MethodPost)
		return reply{status: http.StatusMethodNotAllowed, message: fmt.Sprintf("method %s is not allowed: send reviews with POST", r.Method), outcome: outcomeBadRequest}
	}
	if mt, _, err := mime.ParseMediaType(r.Header.Get("Content-Type")); err != nil || mt != "application/json" {
		return reply{status: http.StatusUnsupportedMediaType, message: fmt.Sprintf("content type %q is not supported: send application/json", r.Header.Get("Content-Type")), outcome: outcomeBadRequest}
	}
	timeout, source := s.opts.RequestTimeout, "--request-timeout "
	if t := r.URL.Query().Get("timeout"); t != "" {
		d, err := time.ParseDuration(t)
		if err != nil || d <= 0 {
			return badRequest("query parameter timeout=%q is not a positive duration such as 10s", t)
		}
		timeout, source = d, "the API server's ?timeout="
	}
	if r.ContentLength > s.opts.MaxBody {
		return tooLarge(s.opts.MaxBody)
	}
	// Stop work early enough for the answer to reach the API server before it gives
	// up. The cause names the timeout, so that a policy stopped by it says which.
	cause := &engine.DeadlineError{Reason: source + timeout.String() + ", less a tenth for the answer to travel"}
	ctx, cancel := engine.WithRequestDeadline(r.Context(), arrived.Add(timeout-timeout/10), cause.Reason)
	defer cancel()
	deadline, _ := ctx.Deadline()
	// A body that arrives too slowly is cut off at the deadline too.
	_ = http.NewResponseController(w).SetReadDeadline(deadline) // not every ResponseWriter can; the context still bounds the work
	buf, err := s.readBody(w, r, s.opts.MaxBody)
	if err != nil {
		if _, ok := errors.AsType[*http.MaxBytesError](err); ok {
			return tooLarge(s.opts.MaxBody)
		}
		if ctx.Err() != nil {
			return pastDeadline(cause)
		}
		return badRequest("reading the request body: %v", err)
	}
	// Every stage of the handler (decoding, the policies, the diff, encoding the
	// patch) runs under ctx, and a handler that sees it end answers as the failure
	// policies say. One that does not answer within half of the remaining tenth (at
	// least 50ms, never past the timeout itself; a stage that does not look at ctx,
	// such as encoding a huge patch) is not waited for: the answer is an error, and the abandoned work gives the body back when it
	// ends. The handler records into its own call, taken over only when it finished.
	own := &call{group: c.group}
	done := make(chan reply, 1)
	s.workers.run(func() {
		defer s.releaseBody(buf)
		done <- s.runHandler(ctx, h, buf.Bytes(), own)
	})
	last := deadline.Add(max(timeout/20, 50*time.Millisecond))
	if end := arrived.Add(timeout); last.After(end) {
		last = end
	}
	hard := time.NewTimer(time.Until(last))
	defer hard.Stop()
	select {
	case rep := <-done:
		*c = *own
		return rep
	case <-hard.C:
		return pastDeadline(cause)
	}
}

// runHandler calls h with a panic turned into a 500.
func (s *Server) runHandler(ctx context.Context, h reviewHandler, body []byte, c *call) (rep reply) {
	defer func() {
		if p := recover(); p != nil {
			c.err = fmt.Errorf("panic: %v\n%s", p, debug.Stack())
			rep = reply{status: http.StatusInternalServerError, message: "internal error while serving the review (logged with its uid)", outcome: outcomePanic}
		}
	}()
	return h(ctx, body, c)
}

// pastDeadline is the answer to a request whose deadline passed: an error (the API
// server applies the webhook's failure policy), never a late review.
func pastDeadline(cause error) reply {
	return reply{status: http.StatusGatewayTimeout, message: cause.Error(), outcome: outcomeTimeout}
}

func tooLarge(limit int64) reply {
	return reply{status: http.StatusRequestEntityTooLarge, message: fmt.Sprintf("request body is larger than %d bytes (--max-body)", limit), outcome: outcomeBadRequest}
}

// write sends a reply. A body that cannot be encoded is a 500.
func (s *Server) write(w http.ResponseWriter, rep reply) {
	if rep.status == http.StatusOK {
		data, err := json.Marshal(rep.body)
		if err == nil {
			w.Header().Set("Content-Type", "application/json")
			// A known length spares a patch's answer (often over net/http's 2 KiB
			// buffer) the chunked encoding.
			w.Header().Set("Content-Length", strconv.Itoa(len(data)))
			w.WriteHeader(http.StatusOK)
			s.send(w, data)
			return
		}
		s.log.Error("encoding a response", "error", err)
		rep = reply{status: http.StatusInternalServerError, message: "encoding the response: " + err.Error()}
	}
	w.Header().Set("Content-Type", "text/plain; charset=utf-8")
	w.Header().Set("X-Content-Type-Options", "nosniff")
	w.WriteHeader(rep.status)
	s.send(w, []byte(rep.message+"\n"))
}

// send writes a response body; a failure means the client went away, which is only
// worth a debug line.
func (s *Server) send(w http.ResponseWriter, data []byte) {
	if _, err := w.Write(data); err != nil {
		s.log.Debug("writing a response", "error", err)
	}
}

// get wraps a read-only endpoint: GET or HEAD only, panics recovered.
func (s *Server) get(h http.HandlerFunc) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method != http.MethodGet && r.Method != http.MethodHead {
			w.Header().Set("Allow", "GET, HEAD")
			http.Error(w, fmt.Sprintf("method %s is not allowed: use GET", r.Method), http.StatusMethodNotAllowed)
			return
		}
		defer func() {
			if p := recover(); p != nil {
				s.log.Error("request failed", "path", r.URL.Path, "error", fmt.Sprintf("panic: %v\n%s", p, debug.Stack()))
				http.Error(w, "internal error (logged)", http.StatusInternalServerError)
			}
		}()
		h(w, r)
	})
}

// writeJSON answers a value as indented JSON.
func (s *Server) writeJSON(w http.ResponseWriter, status int, v any) {
	data, err := json.MarshalIndent(v, "", "  ")
	if err != nil {
		s.log.Error("encoding a response", "error", err)
		http.Error(w, "encoding the response: "+err.Error(), http.StatusInternalServerError)
		return
	}
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	s.send(w, append(data, '\n'))
}
