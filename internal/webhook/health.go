package webhook

import (
	"fmt"
	"net/http"
	"strings"
	"time"
)

// Readiness is the JSON body of /readyz (and /healthz).
type Readiness struct {
	Ready       bool          `json:"ready"`
	Policies    *PolicyCounts `json:"policies,omitempty"`
	LoadedAt    *time.Time    `json:"loadedAt,omitempty"`
	LastError   string        `json:"lastError,omitempty"`
	LastErrorAt *time.Time    `json:"lastErrorAt,omitempty"`
	// Notes are load-time warnings of the policies served.
	Notes []string `json:"notes,omitempty"`
}

// Readiness reports the server's state: whether policies are loaded, how many, and the
// last error: a failed read of the source (kept until a read succeeds), otherwise the
// last load's (kept until a later load succeeds).
func (s *Server) Readiness() Readiness {
	var r Readiness
	if rt := s.rt.Load(); rt != nil {
		counts, loaded := rt.counts, rt.loaded
		r.Ready, r.Policies, r.LoadedAt, r.Notes = true, &counts, &loaded, rt.notes
	}
	s.mu.Lock()
	if failure := s.reportedError(); failure.text != "" {
		r.LastError, r.LastErrorAt = failure.text, &failure.at
	}
	s.mu.Unlock()
	return r
}

func (s *Server) healthz(w http.ResponseWriter, _ *http.Request) {
	s.writeJSON(w, http.StatusOK, map[string]string{"status": "ok"})
}

func (s *Server) readyz(w http.ResponseWriter, _ *http.Request) {
	r := s.Readiness()
	status := http.StatusOK
	if !r.Ready {
		status = http.StatusServiceUnavailable
	}
	s.writeJSON(w, status, r)
}

// stats serves GET /<route>/<entry>: the statistics policies keep under a route of
// their own (engine.Stats; Katalog's /katalog/<entry>, spec 003). It knows no route: a
// path whose first segment no loaded policy's statistics use is 404.
func (s *Server) stats(w http.ResponseWriter, r *http.Request) {
	defer func() {
		if p := recover(); p != nil {
			s.log.Error("request failed", "path", r.URL.Path, "error", fmt.Sprintf("panic: %v", p))
			http.Error(w, "internal error (logged)", http.StatusInternalServerError)
		}
	}()
	route, entry, ok := strings.Cut(strings.TrimPrefix(r.URL.Path, "/"), "/")
	rt := s.rt.Load()
	if !ok || route == "" || entry == "" || strings.Contains(entry, "/") || rt == nil || rt.stats[route] == nil {
		http.NotFound(w, r)
		return
	}
	if r.Method != http.MethodGet && r.Method != http.MethodHead {
		w.Header().Set("Allow", "GET, HEAD")
		http.Error(w, fmt.Sprintf("method %s is not allowed: use GET", r.Method), http.StatusMethodNotAllowed)
		return
	}
	stats, found, err := rt.entryStats(route, entry)
	switch {
	case !found:
		http.Error(w, fmt.Sprintf("no policy exposes statistics under %s/%s", route, entry), http.StatusNotFound)
	case err != nil:
		s.log.Error("encoding statistics", "route", route, "entry", entry, "error", err)
		http.Error(w, err.Error(), http.StatusInternalServerError)
	default:
		s.writeJSON(w, http.StatusOK, stats)
	}
}
