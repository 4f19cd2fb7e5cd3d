//go:build !race

package fleet

// raceEnabled says the tests run under the race detector.
const raceEnabled = false
