package openai

import (
	"bytes"
	"context"
	"crypto/sha256"
	"crypto/subtle"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"
	"unicode"

	"github.com/gollm/gollm/engine"
	"github.com/gollm/gollm/engine/constraint"
	"github.com/gollm/gollm/weights/chattemplate"
)

// Defaults for the zero values of Config's limits.
const (
	DefaultMaxBodyBytes     = 4 << 20
	DefaultMaxHeaderBytes   = 64 << 10
	DefaultMaxSequences     = 256
	DefaultMaxLogprobs      = 20
	DefaultMaxN             = 16
	DefaultMaxStopStrings   = 16
	DefaultMaxStopLength    = 256
	DefaultMaxQueue         = 256
	DefaultCompletionTokens = 16 // OpenAI's default max_tokens for /v1/completions
	DefaultReadTimeout      = 60 * time.Second
	DefaultWriteTimeout     = 60 * time.Second
	DefaultIdleTimeout      = 120 * time.Second
	DefaultShutdownTimeout  = 30 * time.Second
	// DefaultConstraintCache is the number of compiled constraints a server keeps.
	DefaultConstraintCache = 64
)

// Config configures a Server. Zero limits take the defaults above.
type Config struct {
	// ModelName is the id /v1/models lists and requests must name (an empty model field is
	// accepted too).
	ModelName string
	// APIKey, when set, is required as "Authorization: Bearer KEY" on every route but /health.
	APIKey string
	// ChatTemplate renders chats; nil makes /v1/chat/completions answer 400.
	ChatTemplate *chattemplate.Template
	// Special tokens passed to the chat template.
	BOSToken, EOSToken, PadToken, UnkToken string
	// AddSpecialTokens encodes completion prompts with the tokenizer's special tokens (BOS).
	AddSpecialTokens bool
	// SplitSpecialTokens is the default of requests' split_special_tokens: special tokens' text in
	// prompt strings and chat contents is encoded as plain text rather than as control tokens (see
	// special.go). It needs a tokenizer with EncodePlain (*tokenizer.Tokenizer).
	SplitSpecialTokens bool
	// Sampling holds the model's defaults (generation_config.json), overridden by request fields.
	Sampling engine.SamplingParams
	// MaxRunning is how many sequences the engine runs at once (its MaxNumSeqs); with MaxQueue it
	// bounds the sequences admitted: beyond MaxRunning+MaxQueue requests get 429.
	MaxRunning int
	// MaxQueue is how many sequences may wait beyond those running; negative means no limit.
	MaxQueue int
	// MaxBodyBytes caps a request body (413 beyond).
	MaxBodyBytes int64
	// MaxHeaderBytes caps a request's header block (431 beyond).
	MaxHeaderBytes int
	// MaxSequences caps the engine sequences one request may start (prompts × n; 400 beyond).
	MaxSequences int
	// MaxN caps n; MaxStopStrings caps stop strings and stop token ids; MaxStopLength caps a stop
	// string's bytes.
	MaxN, MaxStopStrings, MaxStopLength int
	// VocabSize bounds the token ids /detokenize accepts when positive.
	VocabSize int
	// MaxTokensLimit caps max_tokens when positive.
	MaxTokensLimit int
	// ReadTimeout, WriteTimeout and IdleTimeout bound reading a request (its header block gets at
	// most 10 seconds of it), writing a response (from its first byte: generation time does not
	// count; a streaming response extends the deadline before every event, so a client that stops
	// reading is cut off, and its request aborted, after WriteTimeout) and idle keep-alive
	// connections.
	ReadTimeout, WriteTimeout, IdleTimeout time.Duration
	// AllowedHosts widens, for a server without an API key, the Host header values it serves: beside
	// IP addresses, localhost and its subdomains, these host names (no port; "*.example.com" for the
	// subdomains of example.com, "*" for every host). Other hosts get 403: a web page cannot reach the
	// server by rebinding its own host name to this machine's address (see origin.go).
	AllowedHosts []string
	// AllowedOrigins widens the browser origins ("https://app.example.com") a server without an API key
	// serves, beside pages on localhost (any port) and its own origin; "*" allows every origin. Requests
	// from other web pages get 403. The allowed ones, with or without an API key, get CORS headers and
	// their preflights answered.
	AllowedOrigins []string
	// Vocabulary is the model's vocabulary as constrained decoding reads it (constraint.NewVocabulary
	// over the tokenizer, sized to the model's vocab_size, warmed). Structured output and tool_choice
	// "required" or named need it; without it they are refused by name.
	Vocabulary *constraint.Vocabulary
	// Constraints caches the compiled constraints of requests; nil makes a cache of
	// DefaultConstraintCache entries for the server.
	Constraints *constraint.Cache
	// ToolCallParser is the form of the model's tool calls (ToolParsers: "hermes", "llama3_json",
	// "mistral"); empty detects it from ChatTemplate (DetectToolParser). Without one, requests with
	// tools are refused.
	ToolCallParser string
	// Logger receives the server's logs; nil means slog.Default().
	Logger *slog.Logger
	// Ready, when set, is called once from Serve and ServeLoading as soon as the loaded server answers
	// requests (with ServeLoading, after load returned it: a request before that gets 503).
	Ready func()
}

// withDefaults returns cfg with its zero limits set to the defaults.
func (cfg Config) withDefaults() Config {
	def := func(v *int, d int) {
		if *v <= 0 {
			*v = d
		}
	}
	def(&cfg.MaxN, DefaultMaxN)
	def(&cfg.MaxStopStrings, DefaultMaxStopStrings)
	def(&cfg.MaxStopLength, DefaultMaxStopLength)
	def(&cfg.MaxRunning, engine.DefaultMaxNumSeqs)
	def(&cfg.MaxHeaderBytes, DefaultMaxHeaderBytes)
	def(&cfg.MaxSequences, DefaultMaxSequences)
	if cfg.MaxQueue == 0 {
		cfg.MaxQueue = DefaultMaxQueue
	}
	if cfg.MaxBodyBytes <= 0 {
		cfg.MaxBodyBytes = DefaultMaxBodyBytes
	}
	for _, p := range []struct {
		v *time.Duration
		d time.Duration
	}{{&cfg.ReadTimeout, DefaultReadTimeout}, {&cfg.WriteTimeout, DefaultWriteTimeout}, {&cfg.IdleTimeout, DefaultIdleTimeout}} {
		if *p.v <= 0 {
			*p.v = p.d
		}
	}
	return cfg
}

// Server serves the API over an Engine. Create it with New.
type Server struct {
	cfg     Config
	eng     Engine
	tok     Tokenizer
	log     *slog.Logger
	metrics *metrics
	mux     *http.ServeMux
	handler http.Handler // mux behind guard
	created int64
	keyHash [32]byte

	// eventHook, when set (tests), sees every engine event a handler reads, in the handler's goroutine.
	eventHook func(event)

	// admitted counts the engine sequences added and not yet finished (for 429).
	admitted atomic.Int64
	// handling counts the requests being handled.
	handling atomic.Int64
	// draining is set once shutdown begins: new generation requests get 503.
	draining atomic.Bool
	// engineDown is set once the engine refuses requests as closed.
	engineDown atomic.Bool

	// fresh tracks the connections that have not begun a request, to close them at shutdown.
	fresh freshConns

	// origins is the Host and Origin policy (checkOrigin).
	origins originPolicy

	// constraints caches compiled constraints (Config.Constraints); toolParser is the tool-call form
	// (Config.ToolCallParser, or the one the chat template teaches), "" when none.
	constraints *constraint.Cache
	toolParser  string
	// mistralTag and mistralArgs are the ids of Mistral's [TOOL_CALLS] and [ARGS] as special tokens,
	// -1 for none (mistralTokens, at New; -1 unless toolParser is Mistral's).
	mistralTag, mistralArgs int32

	// abortCtx ends when in-flight requests must be aborted (the shutdown deadline passed).
	abortCtx  context.Context
	abortAll  context.CancelFunc
	abortOnce sync.Once
}

// New returns a server over eng, encoding and decoding with tok.
func New(eng Engine, tok Tokenizer, cfg Config) (*Server, error) {
	if eng == nil || tok == nil {
		return nil, errors.New("server: nil engine or tokenizer")
	}
	if cfg.ModelName == "" {
		return nil, errors.New("server: empty model name")
	}
	if strings.ContainsFunc(cfg.APIKey, unicode.IsSpace) {
		return nil, errors.New("server: the API key holds white space, which no Authorization header can carry")
	}
	cfg = cfg.withDefaults()
	log := cfg.Logger
	if log == nil {
		log = slog.Default()
	}
	s := &Server{cfg: cfg, eng: eng, tok: tok, log: log, created: time.Now().Unix(), keyHash: sha256.Sum256([]byte(cfg.APIKey))}
	s.constraints = cfg.Constraints
	if s.constraints == nil {
		s.constraints = constraint.NewCache(DefaultConstraintCache)
	}
	s.toolParser = cfg.ToolCallParser
	if s.toolParser == "" && cfg.ChatTemplate != nil {
		s.toolParser = DetectToolParser(cfg.ChatTemplate.Source())
	}
	if s.toolParser != "" && !slices.Contains(ToolParsers, s.toolParser) {
		return nil, fmt.Errorf("server: tool-call parser %q: want one of %s", s.toolParser, strings.Join(ToolParsers, ", "))
	}
	s.mistralTag, s.mistralArgs = -1, -1
	if s.toolParser == ToolParserMistral {
		s.mistralTag, s.mistralArgs = mistralTokens(tok)
	}
	s.origins = newOriginPolicy(&cfg)
	s.abortCtx, s.abortAll = context.WithCancel(context.Background())
	s.metrics = newMetrics(cfg.ModelName, eng, func() float64 { return float64(s.admitted.Load()) }, func() float64 { return float64(s.handling.Load()) })
	s.routes()
	return s, nil
}

func (s *Server) routes() {
	s.mux = http.NewServeMux()
	s.mux.HandleFunc("GET /health", s.handleHealth)
	s.mux.Handle("GET /metrics", s.authed(s.metrics.handler()))
	s.mux.Handle("GET /v1/models", s.authed(http.HandlerFunc(s.handleModels)))
	s.mux.Handle("GET /v1/models/{model...}", s.authed(http.HandlerFunc(s.handleModel)))
	s.mux.Handle("POST /v1/completions", s.authed(http.HandlerFunc(s.handleCompletions)))
	s.mux.Handle("POST /v1/chat/completions", s.authed(http.HandlerFunc(s.handleChat)))
	s.mux.Handle("POST /tokenize", s.authed(http.HandlerFunc(s.handleTokenize)))
	s.mux.Handle("POST /detokenize", s.authed(http.HandlerFunc(s.handleDetokenize)))
	s.mux.Handle("/", s.authed(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if method := routeMethod(r.URL.Path); method != "" { // a route, asked with another method
			w.Header().Set("Allow", method)
			writeError(w, methodNotAllowed(r.Method, r.URL.Path))
			return
		}
		writeError(w, notFound(r.Method+" "+r.URL.Path))
	})))
	s.handler = s.guard(s.checkOrigin(s.mux))
}

// routeMethod is the method the route at path answers (routes serves it), or "" where no route is.
func routeMethod(path string) string {
	switch {
	case path == "/health" || path == "/metrics" || path == "/v1/models" || strings.HasPrefix(path, "/v1/models/"):
		return http.MethodGet
	case path == "/v1/completions" || path == "/v1/chat/completions" || path == "/tokenize" || path == "/detokenize":
		return http.MethodPost
	}
	return ""
}

// Handler returns the server's HTTP handler, to mount on the caller's own mux and http.Server. Serve
// adds what only a server can: connection limits (header size, read and idle timeouts) and a graceful
// shutdown that drains in-flight requests; a caller serving Handler sets its own, and shuts its
// http.Server down before stopping the engine.
func (s *Server) Handler() http.Handler { return s.handler }

// authed requires the API key, if one is configured, as "Authorization: Bearer KEY" (bearerToken).
// Keys are compared exactly, through their SHA-256 digests in constant time, so neither their content
// nor their length leaks through timing.
func (s *Server) authed(h http.Handler) http.Handler {
	if s.cfg.APIKey == "" {
		return h
	}
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		values := r.Header.Values("Authorization")
		var key string
		ok := len(values) == 1
		if ok {
			key, ok = bearerToken(values[0])
		}
		got := sha256.Sum256([]byte(key))
		if subtle.ConstantTimeCompare(got[:], s.keyHash[:]) != 1 || !ok {
			writeError(w, unauthorized())
			return
		}
		h.ServeHTTP(w, r)
	})
}

// bearerToken returns the token of an Authorization header value of the Bearer scheme (RFC 7235's
// credentials, RFC 6750's scheme): the scheme's name in any case, one space, then the token, which
// holds no white space. Anything else (another scheme, no token, a token padded or split by spaces)
// is refused rather than trimmed into shape: a key is what the client sent, exactly. (net/http has
// already dropped white space around the whole value.)
func bearerToken(value string) (string, bool) {
	scheme, token, found := strings.Cut(value, " ")
	if !found || !strings.EqualFold(scheme, "Bearer") || token == "" || strings.ContainsAny(token, " \t") {
		return "", false
	}
	return token, true
}

// handleHealth answers 200 while the server serves, 503 once it is shutting down or its engine is
// closed or has failed for good (engine.ErrFailed: a lost GPU).
func (s *Server) handleHealth(w http.ResponseWriter, r *http.Request) {
	if s.draining.Load() || s.engineDown.Load() || s.engineFailed() != nil {
		w.WriteHeader(http.StatusServiceUnavailable)
		return
	}
	w.WriteHeader(http.StatusOK)
}

// engineFailed is the engine's error once it has failed for good, else nil.
func (s *Server) engineFailed() error {
	if f, ok := s.eng.(failingEngine); ok {
		return f.Err()
	}
	return nil
}

// modelObject is an entry of /v1/models.
type modelObject struct {
	ID          string `json:"id"`
	Object      string `json:"object"`
	Created     int64  `json:"created"`
	OwnedBy     string `json:"owned_by"`
	MaxModelLen int    `json:"max_model_len"`
}

func (s *Server) model() modelObject {
	return modelObject{ID: s.cfg.ModelName, Object: "model", Created: s.created, OwnedBy: "gollm", MaxModelLen: s.eng.MaxModelLen()}
}

func (s *Server) handleModels(w http.ResponseWriter, r *http.Request) {
	writeJSON(w, http.StatusOK, struct {
		Object string        `json:"object"`
		Data   []modelObject `json:"data"`
	}{"list", []modelObject{s.model()}})
}

func (s *Server) handleModel(w http.ResponseWriter, r *http.Request) {
	if name := r.PathValue("model"); name != s.cfg.ModelName {
		writeError(w, modelNotFound(name))
		return
	}
	writeJSON(w, http.StatusOK, s.model())
}

// checkModel accepts the served model's name, or an empty one.
func (s *Server) checkModel(name string) *apiError {
	if name != "" && name != s.cfg.ModelName {
		return modelNotFound(name)
	}
	return nil
}

// namedModel is a request body that names the model it is for.
type namedModel interface{ modelName() string }

func (f *samplingFields) modelName() string    { return f.Model }
func (r *tokenizeRequest) modelName() string   { return r.Model }
func (r *detokenizeRequest) modelName() string { return r.Model }

// readRequest reads the request body within the size limit, decodes it into req and checks the
// model it names. On a failure it has answered the client and returns false.
func (s *Server) readRequest(w http.ResponseWriter, r *http.Request, req namedModel) bool {
	body, aerr := s.readBody(w, r)
	if aerr == nil {
		aerr = decodeBody(body, req)
	}
	if aerr == nil {
		aerr = s.checkModel(req.modelName())
	}
	if aerr != nil {
		s.fail(w, aerr)
		return false
	}
	return true
}

// readBody reads a JSON request body within the size limit.
func (s *Server) readBody(w http.ResponseWriter, r *http.Request) ([]byte, *apiError) {
	if aerr := checkJSONType(r); aerr != nil {
		return nil, aerr
	}
	if r.ContentLength > s.cfg.MaxBodyBytes {
		return nil, tooLarge(s.cfg.MaxBodyBytes)
	}
	// With a Content-Length the body is read into one buffer of its size (io.ReadAll would double its
	// way up, allocating about twice the body).
	buf := bytes.NewBuffer(make([]byte, 0, max(r.ContentLength, 0)+bytes.MinRead))
	_, err := buf.ReadFrom(http.MaxBytesReader(w, r.Body, s.cfg.MaxBodyBytes))
	body := buf.Bytes()
	if err != nil {
		var mbe *http.MaxBytesError
		if errors.As(err, &mbe) {
			return nil, tooLarge(s.cfg.MaxBodyBytes)
		}
		var ne net.Error
		if errors.As(err, &ne) && ne.Timeout() {
			return nil, &apiError{status: http.StatusRequestTimeout, Message: "The request body was not received in time.",
				Type: "invalid_request_error"}
		}
		return nil, badRequest("", "cannot read the request body: %v", err)
	}
	return body, nil
}

// admit reserves room for n sequences, or answers why not.
func (s *Server) admit(n int) *apiError {
	if s.draining.Load() {
		return shuttingDown()
	}
	if s.cfg.MaxQueue < 0 {
		s.admitted.Add(int64(n))
		return nil
	}
	limit := int64(s.cfg.MaxRunning + s.cfg.MaxQueue)
	if int64(n) > limit {
		return badRequest("n", "This request needs %d sequences; this server admits at most %d at once.", n, limit)
	}
	for {
		cur := s.admitted.Load()
		if cur+int64(n) > limit {
			s.metrics.rejected.Inc()
			return queueFull()
		}
		if s.admitted.CompareAndSwap(cur, cur+int64(n)) {
			return nil
		}
	}
}

// release returns n sequences' room.
func (s *Server) release(n int) { s.admitted.Add(-int64(n)) }

// requestContext is the context of one request's engine work: it ends when the client goes away or
// when the server aborts in-flight work at the end of a shutdown.
func (s *Server) requestContext(r *http.Request) (context.Context, context.CancelFunc) {
	ctx, cancel := context.WithCancel(r.Context())
	stop := context.AfterFunc(s.abortCtx, cancel)
	return ctx, func() { stop(); cancel() }
}

// Serve serves HTTP on ln until ctx ends, then shuts down gracefully: it stops accepting
// connections, answers new requests on open connections with 503, lets in-flight requests finish
// for up to drain, then aborts the rest (they end with finish_reason "abort") and returns. It returns
// nil after a clean shutdown.
func (s *Server) Serve(ctx context.Context, ln net.Listener, drain time.Duration) error {
	return serve(ctx, ln, drain, s.cfg, &s.fresh, s, nil)
}

// ServeLoading serves HTTP on ln at once while load makes the server (loads the model): until load
// returns, /health and every other route answer 503 (code "model_loading", with Retry-After), so that
// a port is bound and probes and clients can wait for readiness. Then the server load returned serves
// on ln as Serve does, until ctx ends. If ctx ends while load runs, load's context ends too, and
// ServeLoading waits for load to return, closes ln and returns nil. If load fails, ServeLoading closes
// ln and returns load's error. cfg gives the connection limits until then (ReadTimeout, IdleTimeout,
// MaxHeaderBytes, Logger); the loaded server's own Config should hold the same.
func ServeLoading(ctx context.Context, ln net.Listener, drain time.Duration, cfg Config, load func(ctx context.Context) (*Server, error)) error {
	cfg = cfg.withDefaults()
	var fresh freshConns
	return serve(ctx, ln, drain, cfg, &fresh, nil, load)
}

// serve runs the http.Server behind Serve (s, there from the first request) and ServeLoading (load,
// which makes the server while requests get 503).
func serve(ctx context.Context, ln net.Listener, drain time.Duration, cfg Config, fresh *freshConns, s *Server,
	load func(ctx context.Context) (*Server, error)) error {
	log := cfg.Logger
	if log == nil {
		log = slog.Default()
	}
	var current atomic.Pointer[Server]
	current.Store(s) // before the first request, when there is one
	hs := &http.Server{
		Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			if s := current.Load(); s != nil {
				s.handler.ServeHTTP(w, r)
				return
			}
			writeError(w, modelLoading())
		}),
		ReadHeaderTimeout: min(cfg.ReadTimeout, 10*time.Second),
		ReadTimeout:       cfg.ReadTimeout,
		IdleTimeout:       cfg.IdleTimeout,
		MaxHeaderBytes:    cfg.MaxHeaderBytes,
		ConnState:         fresh.track,
		ErrorLog:          slog.NewLogLogger(log.Handler(), slog.LevelWarn),
	}
	errCh := make(chan error, 1)
	go func() { errCh <- hs.Serve(ln) }()
	if s == nil {
		var err error
		if s, err = loadWhileServing(ctx, hs, errCh, load); s == nil {
			return err
		}
		current.Store(s)
	}
	if cfg.Ready != nil {
		cfg.Ready()
	}
	select {
	case err := <-errCh:
		return fmt.Errorf("server: %w", err)
	case <-ctx.Done():
	}
	s.log.Info("shutting down: draining in-flight requests", "deadline", drain)
	s.draining.Store(true)
	if n := fresh.closeAll(); n > 0 {
		s.log.Debug("closed connections that had not begun a request", "connections", n)
	}
	drainCtx, cancel := context.WithTimeout(context.Background(), drain)
	defer cancel()
	err := hs.Shutdown(drainCtx)
	if err != nil {
		s.log.Warn("drain deadline passed: aborting in-flight requests")
		s.abortOnce.Do(s.abortAll)
		// The aborted handlers finish promptly; give them a moment, then close what is left.
		closeCtx, cancelClose := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancelClose()
		if err := hs.Shutdown(closeCtx); err != nil {
			hs.Close()
		}
	}
	<-errCh // http.ErrServerClosed
	return nil
}

// loadWhileServing runs load while hs serves (errCh gets hs.Serve's end). It returns the server load
// made; or nil after closing hs, with load's error, or with nil when ctx ended first (an interrupt
// while loading is a clean stop). It waits for load to return in every case: the caller releases
// what load made.
func loadWhileServing(ctx context.Context, hs *http.Server, errCh <-chan error, load func(ctx context.Context) (*Server, error)) (*Server, error) {
	type loaded struct {
		s   *Server
		err error
	}
	loadCtx, cancelLoad := context.WithCancel(ctx)
	defer cancelLoad()
	loadCh := make(chan loaded, 1)
	go func() {
		s, err := load(loadCtx)
		loadCh <- loaded{s, err}
	}()
	select {
	case err := <-errCh:
		cancelLoad()
		<-loadCh
		return nil, fmt.Errorf("server: %w", err)
	case l := <-loadCh:
		if l.err == nil && l.s != nil {
			return l.s, nil
		}
		hs.Close()
		<-errCh
		if ctx.Err() != nil {
			return nil, nil
		}
		if l.err == nil {
			l.err = errors.New("server: load returned no server")
		}
		return nil, l.err
	}
}

// Draining reports whether shutdown has begun.
func (s *Server) Draining() bool { return s.draining.Load() }
