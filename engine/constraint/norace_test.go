//go:build !race

package constraint_test

const raceEnabled = false
