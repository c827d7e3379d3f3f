package bench

import (
	"sync"
	"time"

	"github.com/gollm/gollm/engine"
	"github.com/gollm/gollm/model"
	"github.com/gollm/gollm/weights"
)

// HostTimer is the hook for a model (or a wrapper around a device backend) that can tell how much of
// its last Forward the host spent issuing work (metadata uploads, kernel launches or graph replays),
// as opposed to waiting for the device. When the benchmarked model implements it, the latency report
// shows it per step; the CPU backend does not (all its time is host time).
type HostTimer interface {
	// LastForwardHostTime is the host time of the most recent Forward.
	LastForwardHostTime() time.Duration
}

// stepRecord is one Forward call as the engine issued it.
type stepRecord struct {
	start, end time.Time     // Start (or Forward) called; picks (or logits) read
	inModel    time.Duration // of that, the time the engine's goroutine spent in the model's calls
	tokens     int           // rows of the step
	seqs       int           // sequences in the step
	decodeOnly bool          // one token per sequence
	contextSum int           // Σ context lengths after the step
	host       time.Duration // HostTimer's answer, or -1
}

// timedModel wraps the engine's model to record every step's start, end and shape. It can also hold
// the next Forward at a gate, so that a benchmark can queue a whole batch before the engine schedules
// any of it.
type timedModel struct {
	inner engine.Model

	mu      sync.Mutex
	steps   []stepRecord
	gate    chan struct{} // when set, the next Forward signals entered and waits for gate to close
	entered chan struct{}
}

func newTimedModel(m engine.Model) *timedModel { return &timedModel{inner: m} }

func (t *timedModel) Config() *weights.Config { return t.inner.Config() }
func (t *timedModel) BlockSize() int          { return t.inner.BlockSize() }
func (t *timedModel) NumBlocks() int          { return t.inner.NumBlocks() }

// Forward waits at the gate if one is set, then runs and records the step.
func (t *timedModel) Forward(s *model.Step) ([][]float32, error) {
	var out [][]float32
	err := t.record(s, func() (err error) {
		out, err = t.inner.Forward(s)
		return err
	})
	return out, err
}

// engineModel is what the engine runs: t, or, when the wrapped model picks on its side
// (engine.PickModel), t with Start passed through, so that the benchmark times what the engine really
// runs, pipelining included; a model without it gets the engine's host sampling, unpipelined.
func (t *timedModel) engineModel() engine.Model {
	if pm, ok := t.inner.(engine.PickModel); ok {
		return timedPicker{t, pm}
	}
	return t
}

// timedPicker is a timedModel over an engine.PickModel.
type timedPicker struct {
	*timedModel
	pm engine.PickModel
}

// Start passes the inner model's Start through; the step's record closes when its picks are read.
func (t timedPicker) Start(s *model.Step, params []model.SampleParams) (*model.Pick, error) {
	rec := t.open(s)
	p, err := t.pm.Start(s, params)
	issued := time.Now()
	if err != nil {
		t.close(rec, issued, 0)
		return nil, err
	}
	return model.NewPick(func() ([]int32, error) {
		waitStart := time.Now()
		ids, err := p.Wait()
		end := time.Now()
		t.close(rec, end, issued.Sub(waitStart)) // in the model: Start's call and the wait, not between
		return ids, err
	}), nil
}

// record waits at the gate if one is set, then runs forward and records the step.
func (t *timedModel) record(s *model.Step, forward func() error) error {
	rec := t.open(s)
	err := forward()
	t.close(rec, time.Now(), 0)
	return err
}

// open waits at the gate if one is set and starts the step's record.
func (t *timedModel) open(s *model.Step) *stepRecord {
	t.mu.Lock()
	gate, entered := t.gate, t.entered
	t.gate, t.entered = nil, nil
	t.mu.Unlock()
	if gate != nil {
		close(entered)
		<-gate
	}
	rec := stepRecord{tokens: len(s.Tokens), seqs: len(s.ContextLens), decodeOnly: len(s.Tokens) == len(s.ContextLens), host: -1}
	for _, c := range s.ContextLens {
		rec.contextSum += int(c)
	}
	rec.start = time.Now()
	return &rec
}

// close ends rec at end and stores it. Its time in the model is end − start less gap (the time between
// a pipelined step's Start call and the wait for its picks, when the engine ran on).
func (t *timedModel) close(rec *stepRecord, end time.Time, gap time.Duration) {
	rec.end = end
	rec.inModel = end.Sub(rec.start) + gap
	if ht, ok := t.inner.(HostTimer); ok {
		rec.host = ht.LastForwardHostTime()
	}
	t.mu.Lock()
	t.steps = append(t.steps, *rec)
	t.mu.Unlock()
}

// holdNext makes the next Forward wait until release is called. entered is closed when it waits.
func (t *timedModel) holdNext() (entered <-chan struct{}, release func()) {
	gate, ent := make(chan struct{}), make(chan struct{})
	t.mu.Lock()
	t.gate, t.entered = gate, ent
	t.mu.Unlock()
	var once sync.Once
	return ent, func() { once.Do(func() { close(gate) }) }
}

// takeSteps returns the steps recorded since the last call and forgets them.
func (t *timedModel) takeSteps() []stepRecord {
	t.mu.Lock()
	defer t.mu.Unlock()
	s := t.steps
	t.steps = nil
	return s
}
