//go:build race

package reliability

// raceEnabled builds the rolloutd binary under test with the race detector
// when the tests themselves run with it.
const raceEnabled = true
