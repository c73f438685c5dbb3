//go:build race

package session_test

// raceEnabled: the race detector is on (sync.Pool then drops entries at
// random, so allocation counts mean nothing).
const raceEnabled = true
