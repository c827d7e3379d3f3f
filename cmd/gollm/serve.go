package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"slices"
	"strconv"
	"strings"
	"time"
	"unicode"

	"github.com/spf13/pflag"

	"github.com/gollm/gollm/engine"
	"github.com/gollm/gollm/engine/llm"
	"github.com/gollm/gollm/engine/openai"
	"github.com/gollm/gollm/model"
	"github.com/gollm/gollm/weights/chattemplate"
	"github.com/gollm/gollm/weights/defaultmodel"
)

func init() {
	register("serve", "serve an OpenAI-compatible HTTP API", runServe)
}

// serveOptions are the parsed flags of gollm serve.
type serveOptions struct {
	gen             generateOptions // model and engine flags, shared with gollm generate
	host            string
	port            int
	apiKey          string
	modelName       string
	maxQueue        int
	maxBodyBytes    int64
	maxHeaderBytes  int
	maxN            int
	maxStop         int
	maxTokensLimit  int
	readTimeout     time.Duration
	writeTimeout    time.Duration
	idleTimeout     time.Duration
	shutdownTimeout time.Duration
	allowedHosts    []string
	allowedOrigins  []string
	splitSpecial    bool
	chatTemplate    string // --chat-template: a file
	toolCallParser  string
}

func runServe(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	fs := pflag.NewFlagSet("serve", pflag.ContinueOnError)
	fs.SetOutput(stderr)
	var o serveOptions
	fs.StringVar(&o.gen.modelDir, "model", "", "model folder (config.json, *.safetensors, tokenizer.json), or a Hugging Face name ORG/NAME[@REVISION] in its cache (see gollm pull); default: the built-in "+defaultmodel.Name()+" model")
	fs.StringVar(&o.host, "host", "127.0.0.1", "address to listen on (0.0.0.0 for every interface)")
	fs.IntVar(&o.port, "port", 8000, "TCP port to listen on (0 picks a free one)")
	fs.StringVar(&o.apiKey, "api-key", "", "require this key as 'Authorization: Bearer KEY' (default: $GOLLM_API_KEY; none if unset)")
	fs.StringVar(&o.modelName, "served-model-name", "", "model id in the API (/v1/models, the model field of answers); default: ORG/NAME for a model given by its Hugging Face name, the model folder's name, or "+defaultmodel.Name()+" for the built-in model")
	fs.IntVar(&o.maxQueue, "max-queue", openai.DefaultMaxQueue, "sequences that may wait beyond the running ones before requests get 429 (at least 1; -1: no limit)")
	fs.Int64Var(&o.maxBodyBytes, "max-body-bytes", openai.DefaultMaxBodyBytes, "largest request body accepted (413 beyond)")
	fs.IntVar(&o.maxHeaderBytes, "max-header-bytes", openai.DefaultMaxHeaderBytes, "largest request header block accepted (431 beyond)")
	fs.IntVar(&o.maxN, "max-n", openai.DefaultMaxN, "largest n (choices per request) accepted")
	fs.IntVar(&o.maxStop, "max-stop", openai.DefaultMaxStopStrings, "most stop strings (and stop token ids) per request")
	fs.IntVar(&o.maxTokensLimit, "max-tokens-limit", 0, "largest max_tokens accepted, also the default cap for chat (0: the context length)")
	fs.DurationVar(&o.readTimeout, "read-timeout", openai.DefaultReadTimeout, "time to read a request")
	fs.DurationVar(&o.writeTimeout, "write-timeout", openai.DefaultWriteTimeout, "time to write a response once it starts (each streamed event for streams); a client that stops reading longer is cut off and its request aborted")
	fs.DurationVar(&o.idleTimeout, "idle-timeout", openai.DefaultIdleTimeout, "time a keep-alive connection may stay idle")
	fs.DurationVar(&o.shutdownTimeout, "shutdown-timeout", openai.DefaultShutdownTimeout, "on SIGINT/SIGTERM, time in-flight requests get to finish before they are aborted")
	fs.BoolVar(&o.splitSpecial, "split-special-tokens", false, "encode special tokens written in prompts and chat contents as plain text, not as control tokens (a request's split_special_tokens overrides it)")
	fs.StringSliceVar(&o.allowedHosts, "allowed-hosts", nil, "without an API key, also serve requests for these host names (comma-separated or repeated; *.example.com for subdomains, * for any); localhost, IP addresses, --host and this machine's name always are")
	fs.StringSliceVar(&o.allowedOrigins, "allowed-origins", nil, "without an API key, also serve web pages of these origins (e.g. https://app.example.com; * for any), and answer their CORS requests; pages on localhost always are")
	fs.StringVar(&o.chatTemplate, "chat-template", "", "chat template (Jinja) file to use instead of the model's tokenizer_config.json's")
	fs.StringVar(&o.toolCallParser, "tool-call-parser", "", "form of the model's tool calls: "+strings.Join(openai.ToolParsers, ", ")+" (default: the form the chat template teaches, if any)")
	addEngineFlags(fs, &o.gen)
	fs.BoolVar(&o.gen.verbose, "verbose", false, "log the engine's progress and every request to stderr")
	fs.Usage = func() {
		fmt.Fprintln(stderr, "usage: gollm serve [--model DIR] [--host 127.0.0.1] [--port 8000] [flags]")
		fmt.Fprintln(stderr)
		fs.PrintDefaults()
	}
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, pflag.ErrHelp) {
			return 0
		}
		fmt.Fprintf(stderr, "gollm serve: %v (see gollm serve --help)\n", err)
		return 2
	}
	if fs.NArg() > 0 {
		fmt.Fprintf(stderr, "gollm serve: unexpected argument %q\n", fs.Arg(0))
		return 2
	}
	if o.port < 0 || o.port > 65535 {
		fmt.Fprintf(stderr, "gollm serve: --port %d out of range\n", o.port)
		return 2
	}
	if err := checkEngineFlags(&o.gen, stderr); err != nil {
		fmt.Fprintf(stderr, "gollm serve: %v\n", err)
		if errors.Is(err, model.ErrNoCUDA) {
			return 1
		}
		return 2
	}
	if o.maxQueue == 0 || o.maxQueue < -1 { // openai.Config reads 0 as its default, not as no queue
		fmt.Fprintf(stderr, "gollm serve: --max-queue %d: want at least 1, or -1 for no limit\n", o.maxQueue)
		return 2
	}
	// openai.Config reads a limit or timeout of 0 or less as its default: refuse those, not ignore them.
	for _, f := range []struct {
		name       string
		value, min int64
	}{{"max-n", int64(o.maxN), 1}, {"max-stop", int64(o.maxStop), 1}, {"max-body-bytes", o.maxBodyBytes, 1},
		{"max-header-bytes", int64(o.maxHeaderBytes), 1}, {"max-tokens-limit", int64(o.maxTokensLimit), 0}} {
		if f.value < f.min {
			fmt.Fprintf(stderr, "gollm serve: --%s %d must be at least %d\n", f.name, f.value, f.min)
			return 2
		}
	}
	for _, f := range []struct {
		name  string
		value time.Duration
		zero  bool // 0 allowed
	}{{"read-timeout", o.readTimeout, false}, {"write-timeout", o.writeTimeout, false}, {"idle-timeout", o.idleTimeout, false},
		{"shutdown-timeout", o.shutdownTimeout, true}} {
		if f.value < 0 || f.value == 0 && !f.zero {
			want := "positive"
			if f.zero {
				want = "0 or more"
			}
			fmt.Fprintf(stderr, "gollm serve: --%s %v must be %s\n", f.name, f.value, want)
			return 2
		}
	}
	keySource := "--api-key"
	if !fs.Changed("api-key") {
		o.apiKey, keySource = os.Getenv("GOLLM_API_KEY"), "$GOLLM_API_KEY"
	}
	if strings.ContainsFunc(o.apiKey, unicode.IsSpace) { // openai.New refuses it, once the model is loaded
		fmt.Fprintf(stderr, "gollm serve: %s holds white space, which no Authorization header can carry\n", keySource)
		return 2
	}
	if o.toolCallParser != "" && !slices.Contains(openai.ToolParsers, o.toolCallParser) {
		fmt.Fprintf(stderr, "gollm serve: --tool-call-parser %q: want one of %s\n", o.toolCallParser, strings.Join(openai.ToolParsers, ", "))
		return 2
	}
	var tpl *chattemplate.Template
	if o.chatTemplate != "" {
		src, err := os.ReadFile(o.chatTemplate)
		if err == nil {
			tpl, err = chattemplate.Parse(string(src))
		}
		if err != nil {
			fmt.Fprintf(stderr, "gollm serve: --chat-template: %v\n", err)
			return 2
		}
	}
	if err := serve(ctx, &o, tpl, stderr); err != nil {
		fmt.Fprintf(stderr, "gollm serve: %v%s\n", err, loadHint(err, o.gen.kvBlocks))
		return 1
	}
	return 0
}

// serve listens, loads the model while answering 503, and serves until ctx ends, then drains and
// stops. tpl, when not nil, replaces the model's chat template.
func serve(ctx context.Context, o *serveOptions, tpl *chattemplate.Template, stderr io.Writer) error {
	level := slog.LevelInfo
	if o.gen.verbose {
		level = slog.LevelDebug
	}
	log := slog.New(slog.NewTextHandler(stderr, &slog.HandlerOptions{Level: level}))

	// Listen first: a busy port fails fast, and /health answers (503) while the model loads.
	ln, err := net.Listen("tcp", net.JoinHostPort(o.host, strconv.Itoa(o.port)))
	if err != nil {
		return err
	}
	defer ln.Close()
	cfg := openai.Config{
		ModelName:      o.modelName,
		APIKey:         o.apiKey,
		MaxRunning:     o.gen.maxNumSeqs,
		MaxQueue:       o.maxQueue,
		MaxBodyBytes:   o.maxBodyBytes,
		MaxHeaderBytes: o.maxHeaderBytes,
		MaxN:           o.maxN,
		MaxStopStrings: o.maxStop,
		MaxTokensLimit: o.maxTokensLimit,
		ReadTimeout:    o.readTimeout,
		WriteTimeout:   o.writeTimeout,
		IdleTimeout:    o.idleTimeout,
		Logger:         log,

		SplitSpecialTokens: o.splitSpecial,
		AllowedHosts:       defaultAllowedHosts(o.host, o.allowedHosts),
		AllowedOrigins:     o.allowedOrigins,
		ChatTemplate:       tpl,
		ToolCallParser:     o.toolCallParser,
		// Printed only once the loaded server answers: a client that waits for this line and then
		// probes /health gets 200, not the loading 503.
		Ready: func() { fmt.Fprintf(stderr, "gollm serve: ready on http://%s\n", ln.Addr()) },
	}
	fmt.Fprintf(stderr, "gollm serve: listening on http://%s (loading the model)\n", ln.Addr())
	var m *llm.Model
	defer func() {
		if m != nil {
			m.Close()
		}
	}()
	// An engine that has failed for good (a lost GPU) can serve nothing: stop serving, as on SIGTERM,
	// and exit with an error, so that a supervisor restarts the process with a new device context.
	serveCtx, stopServing := context.WithCancel(ctx)
	defer stopServing()
	err = openai.ServeLoading(serveCtx, ln, o.shutdownTimeout, cfg, func(ctx context.Context) (*openai.Server, error) {
		var err error
		if m, err = loadModel(ctx, o.gen.modelDir, o.gen.llmConfig(log, stderr)); err != nil {
			return nil, err
		}
		go func(eng *engine.Engine) {
			select {
			case <-eng.Failed():
				log.Error("the engine has failed: shutting down", "err", eng.Err())
				stopServing()
			case <-serveCtx.Done():
			}
		}(m.Engine())
		if _, err := m.ChatTemplate(); err != nil && tpl == nil {
			log.Warn("/v1/chat/completions will answer 400", "reason", err)
		}
		srv, err := m.NewServer(cfg)
		if err != nil {
			return nil, err
		}
		log.Info("serving", "url", "http://"+ln.Addr().String(), "model", m.Name(), "max_model_len", m.MaxModelLen(),
			"api_key", o.apiKey != "")
		return srv, nil
	})
	if err != nil {
		return err
	}
	if m != nil {
		if err := m.Engine().Err(); err != nil {
			return err
		}
	}
	log.Info("stopped")
	return nil
}

// defaultAllowedHosts is the server's allowed hosts: those of --allowed-hosts, the --host address when it
// is a name, and this machine's host name (IP addresses and localhost need no entry).
func defaultAllowedHosts(bind string, extra []string) []string {
	hosts := slices.Clone(extra)
	if bind != "" && net.ParseIP(bind) == nil {
		hosts = append(hosts, bind)
	}
	if name, err := os.Hostname(); err == nil && name != "" {
		hosts = append(hosts, name)
	}
	return hosts
}
