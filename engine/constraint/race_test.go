//go:build race

package constraint

// raceEnabled: the race detector slows generation tenfold; TestSamplesValidate then draws a few
// samples only, and TestMaskRealVocab checks fewer masks.
const raceEnabled = true
