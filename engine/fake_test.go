package engine

import (
	"fmt"
	"testing"
	"time"

	"github.com/gollm/gollm/model"
	"github.com/gollm/gollm/weights"
)

// countingModel is a fake Model whose next token is fully determined by the current one: script[t]
// when the script has t, else t+1 (mod the vocabulary). Its logits are 10 for that token and 0 for
// every other, so greedy decoding follows the script exactly. It checks the step's shape like the
// real model does.
type countingModel struct {
	cfg       weights.Config
	blockSize int
	numBlocks int
	script    map[int32]int32
	delay     time.Duration // slept in each Forward, to keep requests in flight
	// When entered is set (see gate), Forward announces itself on it and then waits for a value on
	// gate, so a test can act between steps at a known point; once released is closed, it no longer
	// waits.
	entered, gate, released chan struct{}
}

// gateSteps makes m wait for the test before every step. Call it after newEngine: the gate opens
// for good before the engine is closed at the end of the test, even when the test failed halfway.
func (m *countingModel) gateSteps(t testing.TB) {
	m.entered, m.gate, m.released = make(chan struct{}), make(chan struct{}), make(chan struct{})
	t.Cleanup(func() { close(m.released) })
}

func newCountingModel(vocab, maxPos, blockSize, numBlocks int) *countingModel {
	return &countingModel{
		cfg:       weights.Config{VocabSize: vocab, MaxPositionEmbeddings: maxPos, EOSTokenIDs: nil},
		blockSize: blockSize,
		numBlocks: numBlocks,
		script:    map[int32]int32{},
	}
}

func (m *countingModel) Config() *weights.Config { return &m.cfg }
func (m *countingModel) BlockSize() int          { return m.blockSize }
func (m *countingModel) NumBlocks() int          { return m.numBlocks }

func (m *countingModel) next(t int32) int32 {
	if n, ok := m.script[t]; ok {
		return n
	}
	return (t + 1) % int32(m.cfg.VocabSize)
}

func (m *countingModel) Forward(s *model.Step) ([][]float32, error) {
	if m.delay > 0 {
		time.Sleep(m.delay)
	}
	if m.entered != nil {
		select {
		case m.entered <- struct{}{}:
			select {
			case <-m.gate:
			case <-m.released:
			}
		case <-m.released:
		}
	}
	n := len(s.Tokens)
	if len(s.Positions) != n || len(s.SlotMapping) != n || len(s.QueryStart) != len(s.ContextLens)+1 ||
		len(s.BlockTables) != len(s.ContextLens) || int(s.QueryStart[len(s.QueryStart)-1]) != n {
		return nil, fmt.Errorf("counting model: inconsistent step %+v", s)
	}
	for i := range s.ContextLens {
		q := s.QueryStart[i+1] - s.QueryStart[i]
		for j := range q {
			row := s.QueryStart[i] + j
			if want := s.ContextLens[i] - q + j; s.Positions[row] != want {
				return nil, fmt.Errorf("counting model: row %d at position %d, want %d", row, s.Positions[row], want)
			}
		}
	}
	out := make([][]float32, len(s.LogitRows))
	for i, row := range s.LogitRows {
		out[i] = make([]float32, m.cfg.VocabSize)
		out[i][m.next(s.Tokens[row])] = 10
	}
	return out, nil
}
