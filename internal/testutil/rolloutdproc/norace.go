//go:build !race

package rolloutdproc

const raceEnabled = false
