package model

import (
	"errors"
	"fmt"
)

// Begin runs step s like Start but leaves its pick to the returned Pick's Commit: on a PickBackend the
// step's ops are queued and Begin returns at once, so that the caller can compute what the pick needs
// (each row's mask, which depends on the tokens the step before picked) while the device runs the
// step, then Commit queues the pick. On other backends the logits come to the host now and Commit
// picks there. Until Commit no other step may begin (Forward, Start and Begin fail with
// ErrInvalidStep); a Pick never committed is committed by Wait with every row's argmax. A step with
// no logits rows is run whole (Start), and its Commit does nothing.
func (m *Model) Begin(s *Step) (*Pick, error) {
	if s != nil && len(s.LogitRows) == 0 {
		p, err := m.Start(s, nil)
		if err != nil {
			return nil, err
		}
		p.commit = func([]SampleParams) (func() ([]int32, error), error) { return nil, nil }
		return p, nil
	}
	picker, ok := m.backend.(PickBackend)
	if !ok {
		fed, err := m.feed(s)
		if err != nil {
			return nil, err
		}
		rows, err := m.Forward(fed)
		if err != nil {
			return nil, err
		}
		m.pending = true
		return &Pick{rows: len(rows), commit: func(params []SampleParams) (func() ([]int32, error), error) {
			m.pending = false
			params, err := m.checkCommit(params, len(rows))
			ids := m.pickRows(rows, params)
			return func() ([]int32, error) { return ids, nil }, err
		}}, nil
	}
	logits, err := m.forward(s)
	if err != nil {
		m.numPicks = 0
		return nil, fmt.Errorf("model: forward: %w", classifyStepError(err))
	}
	n := len(s.LogitRows)
	if err := picker.QueueAsync(n, logits); err != nil {
		m.numPicks = 0
		return nil, fmt.Errorf("model: forward: %w", classifyStepError(err))
	}
	m.pending, m.numPicks = true, 0
	return &Pick{rows: n, commit: func(params []SampleParams) (func() ([]int32, error), error) {
		m.pending = false
		params, perr := m.checkCommit(params, n)
		ids := make([]int32, n)
		wait, err := picker.PickAsync(ids, logits, params)
		if err != nil {
			return nil, fmt.Errorf("model: forward: %w", classifyStepError(err))
		}
		m.numPicks = n
		return func() ([]int32, error) {
			if err := wait(); err != nil {
				return nil, fmt.Errorf("model: forward: %w", classifyStepError(err))
			}
			return ids, nil
		}, perr
	}}, nil
}

// checkCommit checks a Commit's parameters for a step of rows logits rows. Parameters that do not fit
// are replaced by greedy ones, so that the step still ends, and the error says why.
func (m *Model) checkCommit(params []SampleParams, rows int) ([]SampleParams, error) {
	var err error
	if params != nil && len(params) != rows {
		err = fmt.Errorf("%d sampling parameters for %d logits rows: %w", len(params), rows, ErrInvalidStep)
	} else {
		err = checkMasks(params, m.cfg.VocabSize)
	}
	if err != nil {
		return make([]SampleParams, rows), fmt.Errorf("model: commit: %w", err)
	}
	if params == nil {
		params = make([]SampleParams, rows)
	}
	return params, nil
}

// Commit queues the pick of a step Begin queued, under params (one per logits row, as Start's; nil
// is every row's argmax): each row's Mask restricts it. It returns at once on a PickBackend; Wait
// gives the ids. Commit may be called once. Parameters that do not fit the step fail the Commit, and
// its Wait, after ending the step with every row's argmax.
func (p *Pick) Commit(params []SampleParams) error {
	if p.commit == nil {
		return errors.New("model: commit: the pick is already committed (or the step was started whole)")
	}
	commit := p.commit
	p.commit = nil
	wait, err := commit(params)
	switch {
	case wait == nil:
		if err != nil {
			p.err = err
		}
	case err != nil:
		_, _ = wait()
		p.err = err
	default:
		p.wait = wait
	}
	return err
}

// PickHooks wrap the calls of a Pick (WrapPick), for a wrapper of a model that times what the engine
// runs (benchmarks). Commit, when set, is called with the wrapped pick's own commit under the caller's
// parameters and returns what it returns; Wait likewise with its wait. The engine never sets them.
type PickHooks struct {
	Commit func(commit func() error) error
	Wait   func(wait func() ([]int32, error)) ([]int32, error)
}

// WrapPick returns a Pick that behaves as p (Commit, once, for a step Begin queued; Wait, whose ids and
// error are p's) with its calls passed through h. p's own calls are not to be made after this.
func WrapPick(p *Pick, h PickHooks) *Pick {
	wait := p.Wait
	if h.Wait != nil {
		wait = func() ([]int32, error) { return h.Wait(p.Wait) }
	}
	q := &Pick{rows: p.rows}
	if p.commit == nil {
		q.wait = wait
		return q
	}
	q.commit = func(params []SampleParams) (func() ([]int32, error), error) {
		commit := func() error { return p.Commit(params) }
		if h.Commit == nil {
			return wait, commit()
		}
		return wait, h.Commit(commit)
	}
	return q
}
