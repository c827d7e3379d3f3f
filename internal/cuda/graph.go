//go:build cuda

package cuda

/*
#include "gollm_cuda.h"
*/
import "C"

import "fmt"

// BeginCapture starts recording the work queued on s into a graph instead of running it (only this
// thread's work is captured; the owner goroutine queues it). The legacy default stream cannot be
// captured.
func (s *Stream) BeginCapture() error {
	if s == nil {
		return fmt.Errorf("cuda: begin capture: the legacy default stream cannot be captured")
	}
	if err := s.dev.Do(func() error { return check(C.gollm_begin_capture(cStream(s.s))) }); err != nil {
		return fmt.Errorf("cuda: begin capture: %w", err)
	}
	return nil
}

// Graph is recorded device work, not yet runnable.
type Graph struct {
	dev *Device
	g   C.CUgraph
}

// EndCapture stops recording and returns the graph of the work queued since BeginCapture.
func (s *Stream) EndCapture() (*Graph, error) {
	g := &Graph{dev: s.dev}
	if err := s.dev.Do(func() error { return check(C.gollm_end_capture(cStream(s.s), &g.g)) }); err != nil {
		return nil, fmt.Errorf("cuda: end capture: %w", err)
	}
	return g, nil
}

// Nodes returns the number of nodes (kernels, copies, ...) in the graph.
func (g *Graph) Nodes() (int, error) {
	var n C.size_t
	if err := g.dev.Do(func() error { return check(C.gollm_graph_nodes(g.g, &n)) }); err != nil {
		return 0, fmt.Errorf("cuda: graph nodes: %w", err)
	}
	return int(n), nil
}

// Instantiate makes a runnable graph. The Graph may be destroyed afterwards.
func (g *Graph) Instantiate() (*GraphExec, error) {
	e := &GraphExec{dev: g.dev}
	if err := g.dev.Do(func() error { return check(C.gollm_instantiate(&e.e, g.g)) }); err != nil {
		return nil, fmt.Errorf("cuda: instantiate graph: %w", err)
	}
	return e, nil
}

// Destroy releases the graph.
func (g *Graph) Destroy() error {
	if err := g.dev.Do(func() error { return check(C.gollm_graph_destroy(g.g)) }); err != nil {
		return fmt.Errorf("cuda: destroy graph: %w", err)
	}
	return nil
}

// GraphExec is an instantiated graph: all its work queued with one launch.
type GraphExec struct {
	dev *Device
	e   C.CUgraphExec
}

// Launch queues the whole graph on s (nil: the legacy default stream).
func (e *GraphExec) Launch(s *Stream) error {
	if err := e.dev.Do(func() error { return check(C.gollm_graph_launch(e.e, cStream(s.handle()))) }); err != nil {
		return fmt.Errorf("cuda: launch graph: %w", err)
	}
	return nil
}

// Destroy releases the instantiated graph.
func (e *GraphExec) Destroy() error {
	if err := e.dev.Do(func() error { return check(C.gollm_graph_exec_destroy(e.e)) }); err != nil {
		return fmt.Errorf("cuda: destroy graph exec: %w", err)
	}
	return nil
}
