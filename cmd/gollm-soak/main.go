// Command gollm-soak runs gollm's bounded soak test (package soak): for --duration (ten minutes at
// most) concurrent clients send a random mix of completions, chats, streams, hang-ups,
// tokenizations and bad requests over loopback; afterwards the server must hold no KV blocks, have
// its goroutine count back at the baseline, and its resident memory within 10% of its level after
// the warm-up. It serves the built-in model in-process on 127.0.0.1 unless --url names a running
// server (loopback only), and exits 1 when the server fails.
//
//	go run ./cmd/gollm-soak --duration 10m --json soak.json
//	gollm serve --port 8000 & go run ./cmd/gollm-soak --url http://127.0.0.1:8000
package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"time"

	"github.com/gollm/gollm/cmd/internal/soak"
	"github.com/gollm/gollm/engine/openai/loadtest"
	"github.com/gollm/gollm/weights/defaultmodel"
)

func main() {
	var o soak.Options
	flag.DurationVar(&o.Duration, "duration", soak.MaxDuration, "load time (at most 10m)")
	flag.IntVar(&o.Clients, "clients", 8, "concurrent clients")
	flag.IntVar(&o.MaxTokens, "max-tokens", 64, "largest max_tokens of a request")
	flag.Uint64Var(&o.Seed, "seed", 1, "seed of the request mix")
	flag.StringVar(&o.BaseURL, "url", "", "a running server (http://127.0.0.1:PORT) instead of an in-process one")
	flag.StringVar(&o.APIKey, "api-key", os.Getenv("GOLLM_API_KEY"), "API key of the server at --url")
	kvBlocks := flag.Int("kv-blocks", 64, "KV cache pages of the in-process server (small, so that preemption happens)")
	maxSeqs := flag.Int("max-num-seqs", 16, "running sequences of the in-process server")
	jsonOut := flag.String("json", "", "also write the report as JSON to this file")
	flag.Parse()
	if err := run(o, *kvBlocks, *maxSeqs, *jsonOut); err != nil {
		fmt.Fprintln(os.Stderr, "gollm-soak:", err)
		os.Exit(1)
	}
}

func run(o soak.Options, kvBlocks, maxSeqs int, jsonOut string) error {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	defer stop()
	if o.BaseURL == "" {
		base, stopServer, err := loadtest.StartDefault(loadtest.ServerOptions{KVBlocks: kvBlocks, MaxNumSeqs: maxSeqs})
		if err != nil {
			return err
		}
		defer stopServer()
		o.BaseURL = base
		o.Model = defaultmodel.Name()
	}
	o.Log = func(s string) { fmt.Fprintf(os.Stderr, "%s %s\n", time.Now().UTC().Format("15:04:05"), s) }
	rep, err := soak.Run(ctx, o)
	if err != nil {
		return err
	}
	fmt.Print(rep)
	if jsonOut != "" {
		data, err := json.MarshalIndent(rep, "", "  ")
		if err != nil {
			return err
		}
		if err := os.WriteFile(jsonOut, append(data, '\n'), 0o644); err != nil {
			return err
		}
	}
	if err := rep.Err(); err != nil {
		return err
	}
	return nil
}
