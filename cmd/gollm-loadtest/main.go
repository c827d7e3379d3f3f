// Command gollm-loadtest runs a bounded load test against the built-in model on the CPU backend: Clients
// concurrent streaming clients for Rounds rounds, then the same with every other client hanging up
// mid-stream; after each run it checks through /metrics that the KV cache is empty again, so that a
// request leaking its blocks under load or on a disconnect fails it. It serves in-process on 127.0.0.1
// unless --url names a running server (loopback only).
//
//	go run ./cmd/gollm-loadtest --clients 64 --rounds 3 --max-tokens 32
package main

import (
	"context"
	"flag"
	"fmt"
	"net/url"
	"os"
	"time"

	"github.com/gollm/gollm/engine/openai/loadtest"
)

func main() {
	clients := flag.Int("clients", 64, "concurrent streaming clients")
	rounds := flag.Int("rounds", 3, "requests per client, one after the other")
	maxTokens := flag.Int("max-tokens", 32, "tokens per request")
	kvBlocks := flag.Int("kv-blocks", 1024, "KV cache pages of the in-process server")
	maxSeqs := flag.Int("max-num-seqs", 64, "engine's running sequences")
	target := flag.String("url", "", "a running server (http://127.0.0.1:PORT) instead of an in-process one")
	timeout := flag.Duration("timeout", 10*time.Minute, "bound on the whole test")
	flag.Parse()
	if err := run(*clients, *rounds, *maxTokens, *kvBlocks, *maxSeqs, *target, *timeout); err != nil {
		fmt.Fprintln(os.Stderr, "gollm-loadtest:", err)
		os.Exit(1)
	}
}

func run(clients, rounds, maxTokens, kvBlocks, maxSeqs int, target string, timeout time.Duration) error {
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	base := target
	if base == "" {
		var stop func() error
		var err error
		base, stop, err = loadtest.StartDefault(loadtest.ServerOptions{KVBlocks: kvBlocks, MaxNumSeqs: maxSeqs, MaxQueue: -1})
		if err != nil {
			return err
		}
		defer stop()
	} else if u, err := url.Parse(base); err != nil || (u.Hostname() != "127.0.0.1" && u.Hostname() != "localhost" && u.Hostname() != "::1") {
		return fmt.Errorf("--url %q: loopback servers only", base)
	}
	failed := false
	for _, half := range []bool{false, true} {
		res := loadtest.Run(ctx, loadtest.Options{BaseURL: base, Clients: clients, Rounds: rounds, MaxTokens: maxTokens, DisconnectHalf: half})
		kv, err := loadtest.WaitIdle(ctx, base)
		name := "all clients stay"
		if half {
			name = "half the clients hang up mid-stream"
		}
		fmt.Printf("%s: %v\n  afterwards: KV usage %.3f, %d blocks used, %d running, %d waiting\n", name, res, kv.Usage, kv.BlocksUsed, kv.Running, kv.Waiting)
		for _, e := range res.Errors {
			fmt.Println("  error:", e)
		}
		want := clients * rounds
		if half {
			want = (clients - clients/2) * rounds
		}
		if err != nil || res.Failed > 0 || res.Completed != want || kv.BlocksUsed != 0 || kv.Usage != 0 {
			failed = true
			fmt.Printf("  FAILED: want %d completed, no failures, KV usage 0 (%v)\n", want, err)
		}
	}
	if failed {
		return fmt.Errorf("load test failed")
	}
	fmt.Println("ok")
	return nil
}
