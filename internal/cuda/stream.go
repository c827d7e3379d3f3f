//go:build cuda

package cuda

import (
	"fmt"

	"gorgonia.org/cu"
)

// Stream is a queue of device work. A nil *Stream stands for the legacy default stream, which cannot be
// captured into a graph.
type Stream struct {
	dev *Device
	s   cu.Stream
}

// NewStream creates a stream that does not synchronise with the legacy default stream.
func (d *Device) NewStream() (*Stream, error) {
	st := &Stream{dev: d}
	err := d.Do(func() (err error) {
		st.s, err = cu.MakeStream(cu.NonBlocking)
		return err
	})
	if err != nil {
		return nil, fmt.Errorf("cuda: create stream: %w", err)
	}
	return st, nil
}

func (s *Stream) handle() cu.Stream {
	if s == nil {
		return cu.NoStream
	}
	return s.s
}

// Synchronize blocks until the stream's queued work has finished.
func (s *Stream) Synchronize() error {
	if s == nil {
		return fmt.Errorf("cuda: synchronize the default stream: use Device.Synchronize")
	}
	if err := s.dev.Do(func() error { return s.s.Synchronize() }); err != nil {
		return fmt.Errorf("cuda: synchronize stream: %w", err)
	}
	return nil
}

// Wait makes the work queued on s (nil: the legacy default stream) after this call wait until e has
// happened (the work before e's latest Record, on whatever stream). The host does not block.
func (s *Stream) Wait(e *Event) error {
	if err := e.dev.Do(func() error { return s.handle().Wait(e.e, 0) }); err != nil {
		return fmt.Errorf("cuda: stream wait for event: %w", err)
	}
	return nil
}

// Destroy releases the stream once its queued work is done.
func (s *Stream) Destroy() error {
	if s == nil {
		return nil
	}
	if err := s.dev.Do(func() error { return s.s.Destroy() }); err != nil {
		return fmt.Errorf("cuda: destroy stream: %w", err)
	}
	return nil
}

// Event marks a point in a stream; two recorded events give the device time between them.
type Event struct {
	dev *Device
	e   cu.Event
}

// NewEvent creates an event that records timing.
func (d *Device) NewEvent() (*Event, error) { return d.newEvent(cu.DefaultEvent) }

// NewSyncEvent creates an event without timing: cheaper to record and to wait on, for ordering streams
// and for the host to wait for a point in a stream (Elapsed fails on it).
func (d *Device) NewSyncEvent() (*Event, error) { return d.newEvent(cu.DisableTiming) }

func (d *Device) newEvent(flags cu.EventFlags) (*Event, error) {
	ev := &Event{dev: d}
	err := d.Do(func() (err error) {
		ev.e, err = cu.MakeEvent(flags)
		return err
	})
	if err != nil {
		return nil, fmt.Errorf("cuda: create event: %w", err)
	}
	return ev, nil
}

// Record queues the event on stream s (nil: the legacy default stream).
func (e *Event) Record(s *Stream) error {
	if err := e.dev.Do(func() error { return e.e.Record(s.handle()) }); err != nil {
		return fmt.Errorf("cuda: record event: %w", err)
	}
	return nil
}

// Synchronize blocks until the event has happened.
func (e *Event) Synchronize() error {
	if err := e.dev.Do(func() error { return e.e.Synchronize() }); err != nil {
		return fmt.Errorf("cuda: synchronize event: %w", err)
	}
	return nil
}

// Elapsed returns the device time in milliseconds from e to end; both must have happened.
func (e *Event) Elapsed(end *Event) (float64, error) {
	var ms float64
	err := e.dev.Do(func() (err error) {
		ms, err = e.e.Elapsed(end.e)
		return err
	})
	if err != nil {
		return 0, fmt.Errorf("cuda: elapsed time: %w", err)
	}
	return ms, nil
}

// Destroy releases the event.
func (e *Event) Destroy() error {
	if err := e.dev.Do(func() error { return cu.DestroyEvent(&e.e) }); err != nil {
		return fmt.Errorf("cuda: destroy event: %w", err)
	}
	return nil
}
