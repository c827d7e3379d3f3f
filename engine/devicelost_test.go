package engine

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/gollm/gollm/model"
)

// TestDeviceLost: a step fails with an error wrapping model.ErrDeviceLost (a sticky CUDA error: the
// GPU's context can run nothing any more). The engine fails the step's request, the one waiting for a
// slot, and every later one at once with ErrFailed; Err and Failed say so (the server's /health turns
// 503 and gollm serve exits); the model is not called again; Close returns promptly, the pool empty.
// An ordinary step error (TestPipelinedStepFails) fails only its step's requests.
func TestDeviceLost(t *testing.T) {
	const vocab = 128
	m := newPickingModel(vocab, 4, 64)
	e := newEngine(t, m, Config{MaxNumSeqs: 1})
	lost := fmt.Errorf("cuda backend: step: %w: illegal address", model.ErrDeviceLost)
	// The loss comes on the fourth wait, once B is queued: however far the loop ran A meanwhile, B is
	// then a request in flight, not one added after the failure. Add never waits for the loop (its
	// channel is buffered), so the hook may hold the loop until then.
	waits, queued := 0, make(chan struct{})
	m.setOnWait(func(pickWait) error {
		if waits++; waits == 4 {
			select {
			case <-queued:
			case <-time.After(time.Minute):
			}
			return lost
		}
		return nil
	})
	running, err := e.Add(context.Background(), Request{ID: "A", PromptIDs: chain(1, 3, vocab), MaxTokens: 50, IgnoreEOS: true})
	if err != nil {
		t.Fatal(err)
	}
	waiting, err := e.Add(context.Background(), Request{ID: "B", PromptIDs: chain(60, 2, vocab), MaxTokens: 5, IgnoreEOS: true})
	close(queued)
	if err != nil {
		t.Fatal(err)
	}
	a, b := collect(t, running), collect(t, waiting)
	if a.reason != FinishError || !errors.Is(a.err, model.ErrDeviceLost) {
		t.Errorf("running request: %s, %v; want an error wrapping ErrDeviceLost", a.reason, a.err)
	}
	if b.reason != FinishError || !errors.Is(b.err, ErrFailed) || !errors.Is(b.err, model.ErrDeviceLost) {
		t.Errorf("waiting request: %s, %v; want an error wrapping ErrFailed and ErrDeviceLost", b.reason, b.err)
	}
	select {
	case <-e.Failed():
	case <-time.After(time.Minute):
		t.Fatal("Failed() not closed")
	}
	if err := e.Err(); !errors.Is(err, ErrFailed) || !errors.Is(err, model.ErrDeviceLost) {
		t.Errorf("Err() = %v", err)
	}
	m.mu.Lock()
	steps := len(m.steps)
	m.mu.Unlock()
	if _, err := e.Add(context.Background(), Request{PromptIDs: chain(5, 2, vocab), MaxTokens: 3}); !errors.Is(err, ErrFailed) {
		t.Errorf("Add after the failure: %v, want ErrFailed", err)
	}
	m.mu.Lock()
	if len(m.steps) != steps {
		t.Errorf("the model ran %d more steps after the device was lost", len(m.steps)-steps)
	}
	m.mu.Unlock()
	start := time.Now()
	closeAndCheckPool(t, e)
	if d := time.Since(start); d > 5*time.Second {
		t.Errorf("Close took %v", d)
	}
}
