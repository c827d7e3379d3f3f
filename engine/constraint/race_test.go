//go:build race

package constraint_test

// raceEnabled: the race detector slows generation tenfold; TestSamplesValidate then draws a few
// samples only.
const raceEnabled = true
