package webhook

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"mime"
	"net/http"
	"runtime/debug"
	"time"
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
		rep := s.answerReview(w, r, h, c)
		s.write(w, rep)
		elapsed := time.Since(start)
		s.metrics.requests.WithLabelValues(endpoint, rep.outcome).Inc()
		s.metrics.latency.WithLabelValues(endpoint, rep.outcome).Observe(elapsed.Seconds())
		attrs := append([]any{"endpoint", endpoint, "status", rep.status, "outcome", rep.outcome, "duration", elapsed}, c.attrs()...)
		switch {
		case rep.status >= 500 || c.err != nil:
			if c.err != nil {
				attrs = append(attrs, "error", c.err)
			} else {
				attrs = append(attrs, "error", rep.message)
			}
			s.log.Error("request failed", attrs...)
		case rep.status >= 400:
			s.log.Warn("request rejected", append(attrs, "error", rep.message)...)
		default:
			s.log.Debug("request", attrs...)
		}
	})
}

func (s *Server) answerReview(w http.ResponseWriter, r *http.Request, h reviewHandler, c *call) (rep reply) {
	defer func() {
		if p := recover(); p != nil {
			c.err = fmt.Errorf("panic: %v\n%s", p, debug.Stack())
			rep = reply{status: http.StatusInternalServerError, message: "internal error while serving the review (logged with its uid)", outcome: outcomePanic}
		}
	}()
	if r.Method != http.MethodPost {
		w.Header().Set("Allow", http.MethodPost)
		return reply{status: http.StatusMethodNotAllowed, message: fmt.Sprintf("method %s is not allowed: send reviews with POST", r.Method), outcome: outcomeBadRequest}
	}
	if mt, _, err := mime.ParseMediaType(r.Header.Get("Content-Type")); err != nil || mt != "application/json" {
		return reply{status: http.StatusUnsupportedMediaType, message: fmt.Sprintf("content type %q is not supported: send application/json", r.Header.Get("Content-Type")), outcome: outcomeBadRequest}
	}
	timeout := s.opts.RequestTimeout
	if t := r.URL.Query().Get("timeout"); t != "" {
		d, err := time.ParseDuration(t)
		if err != nil || d <= 0 {
			return badRequest("query parameter timeout=%q is not a positive duration such as 10s", t)
		}
		timeout = d
	}
	if r.ContentLength > s.opts.MaxBody {
		return tooLarge(s.opts.MaxBody)
	}
	body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, s.opts.MaxBody))
	if err != nil {
		if _, ok := errors.AsType[*http.MaxBytesError](err); ok {
			return tooLarge(s.opts.MaxBody)
		}
		return badRequest("reading the request body: %v", err)
	}
	// Stop work early enough for the answer to reach the API server before it gives up.
	ctx, cancel := context.WithTimeout(r.Context(), timeout-timeout/10)
	defer cancel()
	return h(ctx, body, c)
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
