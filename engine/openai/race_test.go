//go:build race

package openai_test

// raceEnabled: the race detector slows the built-in model tenfold; TestStructuredOutputs then sends a
// few of its wire forms, and TestToolCalls its named calls only (the rest run without -race).
const raceEnabled = true
