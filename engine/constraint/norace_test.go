//go:build !race

package constraint

const raceEnabled = false
