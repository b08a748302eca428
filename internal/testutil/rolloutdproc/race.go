//go:build race

package rolloutdproc

// raceEnabled: the binary under test is built with the race detector when
// the tests themselves run with it.
const raceEnabled = true
