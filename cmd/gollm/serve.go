package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"time"

	"github.com/spf13/pflag"

	"github.com/gollm/gollm/engine"
	"github.com/gollm/gollm/engine/openai"
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
}

func runServe(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	fs := pflag.NewFlagSet("serve", pflag.ContinueOnError)
	fs.SetOutput(stderr)
	var o serveOptions
	fs.StringVar(&o.gen.modelDir, "model", "", "model folder (config.json, *.safetensors, tokenizer.json); default: the built-in "+defaultmodel.Name()+" model")
	fs.StringVar(&o.host, "host", "127.0.0.1", "address to listen on (0.0.0.0 for every interface)")
	fs.IntVar(&o.port, "port", 8000, "TCP port to listen on (0 picks a free one)")
	fs.StringVar(&o.apiKey, "api-key", "", "require this key as 'Authorization: Bearer KEY' (default: $GOLLM_API_KEY; none if unset)")
	fs.StringVar(&o.modelName, "served-model-name", "", "model id in the API (default: the model folder's name)")
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
	if err := checkEngineFlags(&o.gen); err != nil {
		fmt.Fprintf(stderr, "gollm serve: %v\n", err)
		return 2
	}
	if o.maxQueue == 0 || o.maxQueue < -1 { // openai.Config reads 0 as its default, not as no queue
		fmt.Fprintf(stderr, "gollm serve: --max-queue %d: want at least 1, or -1 for no limit\n", o.maxQueue)
		return 2
	}
	if !fs.Changed("api-key") {
		o.apiKey = os.Getenv("GOLLM_API_KEY")
	}
	if o.gen.modelDir == "" {
		dir, err := defaultModelDir()
		if err != nil {
			fmt.Fprintf(stderr, "gollm serve: no --model given and the built-in model is unavailable: %v\n", err)
			return 1
		}
		o.gen.modelDir = dir
		if o.modelName == "" {
			o.modelName = defaultmodel.Name()
		}
	}
	if o.modelName == "" {
		o.modelName = filepath.Base(filepath.Clean(o.gen.modelDir))
	}
	if err := serve(ctx, &o, stderr); err != nil {
		fmt.Fprintf(stderr, "gollm serve: %v\n", err)
		if errors.Is(err, errInterrupted) {
			return 130
		}
		return 1
	}
	return 0
}

// serve loads the model, listens and serves until ctx ends, then drains and stops.
func serve(ctx context.Context, o *serveOptions, stderr io.Writer) error {
	level := slog.LevelInfo
	if o.gen.verbose {
		level = slog.LevelDebug
	}
	log := slog.New(slog.NewTextHandler(stderr, &slog.HandlerOptions{Level: level}))

	// Listen first: a busy port fails fast, before the model loads.
	ln, err := net.Listen("tcp", net.JoinHostPort(o.host, strconv.Itoa(o.port)))
	if err != nil {
		return err
	}
	defer ln.Close()

	g, err := loadUntil(ctx, &o.gen, stderr)
	if err != nil {
		return err
	}
	defer g.close()

	tc := g.folder.TokenizerConfig
	tpl, err := chattemplate.Parse(tc.ChatTemplate)
	switch {
	case errors.Is(err, chattemplate.ErrNoTemplate):
		log.Warn("the model has no chat template: /v1/chat/completions will answer 400")
		tpl = nil
	case err != nil:
		log.Warn("cannot parse the model's chat template: /v1/chat/completions will answer 400", "error", err)
		tpl = nil
	}
	cfg := openai.Config{
		ModelName:          o.modelName,
		APIKey:             o.apiKey,
		ChatTemplate:       tpl,
		BOSToken:           tc.BOSToken,
		EOSToken:           tc.EOSToken,
		PadToken:           tc.PadToken,
		AddSpecialTokens:   true,
		SplitSpecialTokens: o.splitSpecial,
		Sampling:           engine.DefaultSampling(g.folder.Generation),
		MaxRunning:         o.gen.maxNumSeqs,
		MaxQueue:           o.maxQueue,
		MaxBodyBytes:       o.maxBodyBytes,
		MaxHeaderBytes:     o.maxHeaderBytes,
		MaxN:               o.maxN,
		MaxStopStrings:     o.maxStop,
		MaxTokensLimit:     o.maxTokensLimit,
		VocabSize:          g.folder.Config.VocabSize,
		ReadTimeout:        o.readTimeout,
		WriteTimeout:       o.writeTimeout,
		IdleTimeout:        o.idleTimeout,
		AllowedHosts:       defaultAllowedHosts(o.host, o.allowedHosts),
		AllowedOrigins:     o.allowedOrigins,
		Logger:             log,
	}
	srv, err := openai.New(openai.FromEngine(g.engine), g.tok, cfg)
	if err != nil {
		return err
	}
	log.Info("serving", "url", "http://"+ln.Addr().String(), "model", o.modelName, "max_model_len", g.engine.MaxModelLen(),
		"chat", tpl != nil, "api_key", o.apiKey != "")
	fmt.Fprintf(stderr, "gollm serve: listening on http://%s\n", ln.Addr())
	// An engine that has failed for good (a lost GPU) can serve nothing: stop serving, as on SIGTERM,
	// and exit with an error, so that a supervisor restarts the process with a new device context.
	serveCtx, stopServing := context.WithCancel(ctx)
	defer stopServing()
	go func() {
		select {
		case <-g.engine.Failed():
			log.Error("the engine has failed: shutting down", "err", g.engine.Err())
			stopServing()
		case <-serveCtx.Done():
		}
	}()
	if err := srv.Serve(serveCtx, ln, o.shutdownTimeout); err != nil {
		return err
	}
	if err := g.engine.Err(); err != nil {
		return err
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
