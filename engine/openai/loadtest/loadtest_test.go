package loadtest

import (
	"context"
	"testing"
	"time"
)

// TestLoadShort is the short version of gollm-loadtest: concurrent streaming clients over the
// built-in model, then the same with half of them hanging up mid-stream; every request that stays
// completes and the KV cache is empty afterwards.
func TestLoadShort(t *testing.T) {
	if testing.Short() {
		t.Skip("runs the built-in model")
	}
	base, stop, err := StartDefault(ServerOptions{KVBlocks: 256, MaxNumSeqs: 16, MaxQueue: -1})
	if err != nil {
		t.Fatal(err)
	}
	defer func() {
		if err := stop(); err != nil {
			t.Errorf("stop: %v", err)
		}
	}()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	const clients, rounds = 12, 2
	for _, half := range []bool{false, true} {
		res := Run(ctx, Options{BaseURL: base, Clients: clients, Rounds: rounds, MaxTokens: 8, DisconnectHalf: half})
		want, gone := clients*rounds, 0
		if half {
			want, gone = clients/2*rounds, clients/2*rounds
		}
		if res.Failed != 0 || res.Completed != want || res.Disconnected != gone || res.Tokens != want*8 {
			t.Errorf("disconnect half %v: %v (errors %v); want %d completed, %d disconnected", half, res, res.Errors, want, gone)
		}
		kv, err := WaitIdle(ctx, base)
		if err != nil || kv.BlocksUsed != 0 || kv.Usage != 0 {
			t.Errorf("disconnect half %v: KV after the run %+v, %v", half, kv, err)
		}
	}
}
