package openai

import (
	"errors"
	"net"
	"net/http"
	"runtime/debug"
	"strings"
	"sync"
	"time"
)

// guard wraps every route: it bounds the time each response may take to write (the deadline
// starts when the response does, so time spent generating does not count; streams extend it
// before every event), and it turns a panic while handling one request into a 500 for that request
// only. A panic after a streamed response has begun ends the stream with an error event; after any
// other partial response, the connection is cut (net/http's ErrAbortHandler), since no status can
// be sent any more.
func (s *Server) guard(h http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		gw := &guardedWriter{ResponseWriter: w, timeout: s.cfg.WriteTimeout}
		s.handling.Add(1)
		defer s.handling.Add(-1)
		defer func() {
			v := recover()
			if v == nil {
				return
			}
			if v == http.ErrAbortHandler { //nolint:errorlint // net/http compares it the same way
				panic(v)
			}
			s.metrics.panics.Inc()
			s.log.Error("panic while handling a request", "method", r.Method, "path", r.URL.Path, "panic", v,
				"stack", string(debug.Stack()))
			switch {
			case !gw.started:
				writeError(gw, internalError("The server failed while handling this request."))
			case strings.HasPrefix(gw.Header().Get("Content-Type"), "text/event-stream"):
				e := &sse{w: gw, rc: http.NewResponseController(gw), timeout: s.cfg.WriteTimeout}
				e.sendError(internalError("The server failed while handling this request."))
				e.done()
			default:
				panic(http.ErrAbortHandler)
			}
		}()
		h.ServeHTTP(gw, r)
	})
}

// guardedWriter records whether the response has started and sets its write deadline then.
type guardedWriter struct {
	http.ResponseWriter
	timeout time.Duration
	started bool
}

func (g *guardedWriter) start() {
	if !g.started {
		g.started = true
		// Errors mean the connection cannot take deadlines (a test recorder); nothing to bound then.
		http.NewResponseController(g.ResponseWriter).SetWriteDeadline(time.Now().Add(g.timeout)) //nolint:errcheck
	}
}

func (g *guardedWriter) WriteHeader(status int) {
	g.start()
	g.ResponseWriter.WriteHeader(status)
}

func (g *guardedWriter) Write(p []byte) (int, error) {
	g.start()
	return g.ResponseWriter.Write(p)
}

// Unwrap lets http.ResponseController reach the connection (flushes, deadlines).
func (g *guardedWriter) Unwrap() http.ResponseWriter { return g.ResponseWriter }

// freshConns tracks connections on which no request has begun yet. http.Server.Shutdown counts such
// a connection as busy for up to five seconds after it was accepted (in case its first request is
// on the way), which kept an idle server from exiting for seconds after SIGTERM whenever a client
// had opened a connection it did not use (a pooled or speculative connection, or a port probe).
// At shutdown nothing is lost by closing them: a request that arrives on one now would only be
// refused with 503.
type freshConns struct {
	mu      sync.Mutex
	conns   map[net.Conn]struct{}
	closing bool
}

// track is the http.Server's ConnState hook.
func (f *freshConns) track(c net.Conn, state http.ConnState) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if state != http.StateNew {
		delete(f.conns, c)
		return
	}
	if f.closing {
		c.Close()
		return
	}
	if f.conns == nil {
		f.conns = map[net.Conn]struct{}{}
	}
	f.conns[c] = struct{}{}
}

// closeAll closes the connections that have not begun a request, and every one accepted from now
// on, and reports how many it closed.
func (f *freshConns) closeAll() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.closing = true
	n := 0
	for c := range f.conns {
		if err := c.Close(); err == nil || !errors.Is(err, net.ErrClosed) {
			n++
		}
		delete(f.conns, c)
	}
	return n
}
