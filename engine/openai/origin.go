package openai

import (
	"fmt"
	"mime"
	"net"
	"net/http"
	"net/url"
	"strings"
)

// Host and Origin checks. A server without an API key on a developer's machine is reachable from any
// web page its user opens: the page can send it requests (cross-site request forgery: a form or a
// fetch with a simple content type needs no CORS preflight), and through DNS rebinding (the page's own
// host name made to resolve to 127.0.0.1) it can read the answers as well. As ollama does, such a
// server serves only requests addressed to a host it knows (the Host header) and coming from no web
// page or from a web page of an origin it allows (the Origin header, which browsers send with every
// cross-origin request and every POST). With an API key neither applies: a page cannot know the key.

// originPolicy decides which Host and Origin header values a Server accepts.
type originPolicy struct {
	hosts    []string // lower-case names; "*.example.com" for the subdomains; "*" for any
	origins  []string // lower-case serialized origins; "*" for any
	anyHost  bool
	anyOrig  bool
	enforced bool // no API key: refuse what is not allowed
}

func newOriginPolicy(cfg *Config) originPolicy {
	p := originPolicy{enforced: cfg.APIKey == ""}
	for _, h := range cfg.AllowedHosts {
		h = strings.ToLower(strings.TrimSuffix(strings.TrimSpace(h), "."))
		if h == "*" {
			p.anyHost = true
		}
		if h != "" {
			p.hosts = append(p.hosts, h)
		}
	}
	for _, o := range cfg.AllowedOrigins {
		o = strings.ToLower(strings.TrimSuffix(strings.TrimSpace(o), "/"))
		if o == "*" {
			p.anyOrig = true
		}
		if o != "" {
			p.origins = append(p.origins, o)
		}
	}
	return p
}

// isLoopbackName reports whether host (lower-case, no port) is a name of this machine's loopback
// interface: localhost and its subdomains (RFC 6761 reserves them for it).
func isLoopbackName(host string) bool {
	return host == "localhost" || strings.HasSuffix(host, ".localhost")
}

// hostAllowed reports whether a request addressed to host (the Host header, port and brackets removed,
// lower-case) is accepted: an IP address (a page cannot rebind a literal address to this server: its
// origin would be that address itself), a loopback name, or an allowed host.
func (p *originPolicy) hostAllowed(host string) bool {
	if p.anyHost || net.ParseIP(host) != nil || isLoopbackName(host) {
		return true
	}
	for _, h := range p.hosts {
		if h == host {
			return true
		}
		if sub, ok := strings.CutPrefix(h, "*."); ok && strings.HasSuffix(host, "."+sub) {
			return true
		}
	}
	return false
}

// originAllowed reports whether requests from a page of origin (the Origin header's value) are
// accepted, for a request addressed to reqHost (the Host header, port included): an http or https
// origin on a loopback name or address (any port), the server's own origin (a page it was served
// with, behind a proxy), or an allowed origin. "null" (sandboxed frames, local files) is not.
func (p *originPolicy) originAllowed(origin, reqHost string) bool {
	if p.anyOrig {
		return true
	}
	o := strings.ToLower(origin)
	for _, allowed := range p.origins {
		if allowed == o {
			return true
		}
	}
	u, err := url.Parse(o)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" || u.Path != "" || u.User != nil {
		return false
	}
	if strings.EqualFold(u.Host, reqHost) {
		return true
	}
	host := u.Hostname()
	if ip := net.ParseIP(host); ip != nil {
		return ip.IsLoopback()
	}
	return isLoopbackName(host)
}

// requestHost returns the host name of r's Host header, lower-case, without port or brackets.
func requestHost(r *http.Request) string {
	host := r.Host
	if h, _, err := net.SplitHostPort(host); err == nil {
		host = h
	}
	return strings.ToLower(strings.TrimSuffix(strings.Trim(host, "[]"), "."))
}

// checkOrigin wraps every route with the Host and Origin checks (refused with 403 when the server has
// no API key) and CORS: a preflight (OPTIONS with Access-Control-Request-Method) from an allowed
// origin is answered 204 with what the request may do, from another with 403; other responses to an
// allowed origin carry Access-Control-Allow-Origin. GET /health skips the Host check: probes address
// a container by whatever name it has, and the answer tells a page nothing.
func (s *Server) checkOrigin(h http.Handler) http.Handler {
	p := &s.origins
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		health := r.URL.Path == "/health" && r.Method == http.MethodGet
		if p.enforced && !health {
			if host := requestHost(r); !p.hostAllowed(host) {
				writeError(w, forbidden(fmt.Sprintf("Requests for host %q are not served: without an API key this server answers "+
					"only requests for localhost, an IP address or one of its allowed hosts (gollm serve --allowed-hosts).", host)))
				return
			}
		}
		origin := r.Header.Get("Origin")
		allowed := origin != "" && p.originAllowed(origin, r.Host)
		if origin != "" {
			w.Header().Add("Vary", "Origin")
		}
		if r.Method == http.MethodOptions && origin != "" && r.Header.Get("Access-Control-Request-Method") != "" {
			if !allowed {
				writeError(w, originRefused(origin))
				return
			}
			hdr := w.Header()
			hdr.Set("Access-Control-Allow-Origin", origin)
			hdr.Set("Access-Control-Allow-Methods", "GET, POST, OPTIONS")
			hdr.Set("Access-Control-Allow-Headers", corsAllowHeaders(r.Header.Get("Access-Control-Request-Headers")))
			hdr.Set("Access-Control-Max-Age", "600")
			w.WriteHeader(http.StatusNoContent)
			return
		}
		if origin != "" && !allowed && p.enforced && !health {
			writeError(w, originRefused(origin))
			return
		}
		if allowed {
			w.Header().Set("Access-Control-Allow-Origin", origin)
			w.Header().Set("Access-Control-Expose-Headers", "Retry-After")
		}
		h.ServeHTTP(w, r)
	})
}

// corsAllowHeaders is the Access-Control-Allow-Headers of a preflight from an allowed origin: the
// headers the API reads, and those the page asked for (the official SDKs send headers of their own).
func corsAllowHeaders(requested string) string {
	allow := "Authorization, Content-Type"
	for _, h := range strings.Split(requested, ",") {
		h = strings.TrimSpace(h)
		if h == "" || strings.EqualFold(h, "Authorization") || strings.EqualFold(h, "Content-Type") || !validHeaderName(h) {
			continue
		}
		allow += ", " + h
	}
	return allow
}

// validHeaderName reports whether h is an HTTP token, so that echoing it cannot split the header.
func validHeaderName(h string) bool {
	for i := range len(h) {
		c := h[i]
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || strings.IndexByte("!#$%&'*+-.^_`|~", c) >= 0) {
			return false
		}
	}
	return h != ""
}

// checkJSONType refuses a request body that says it is not JSON (415): a browser sends a cross-origin
// POST without a preflight only as text/plain, a form or multipart, so accepting those would let any
// page post to the API. A body without Content-Type is read as JSON (as curl -d without -H sends
// form-urlencoded, which is refused with a message saying what to send).
func checkJSONType(r *http.Request) *apiError {
	ct := r.Header.Get("Content-Type")
	if ct == "" {
		return nil
	}
	mt, _, err := mime.ParseMediaType(ct)
	if err == nil && (mt == "application/json" || strings.HasPrefix(mt, "application/") && strings.HasSuffix(mt, "+json")) {
		return nil
	}
	return &apiError{status: http.StatusUnsupportedMediaType, Type: "invalid_request_error",
		Message: fmt.Sprintf("Content-Type %q is not supported: send the body as application/json.", ct)}
}

func forbidden(msg string) *apiError {
	return &apiError{status: http.StatusForbidden, Message: msg, Type: "invalid_request_error", Code: strPtr("forbidden")}
}

func originRefused(origin string) *apiError {
	return forbidden(fmt.Sprintf("Requests from web pages of origin %q are not served: without an API key this server answers "+
		"only pages on localhost and its allowed origins (gollm serve --allowed-origins).", origin))
}
