// Package testwait is for tests that wait for a condition with no channel
// to wait on (a socket appearing, a counter reaching zero, another process
// letting go of something): poll it until it holds or a deadline passes.
package testwait

import (
	"testing"
	"time"
)

// For polls cond every 5 ms until it holds; after d the test fails, naming
// what it waited for.
func For(t testing.TB, d time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(d)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out after %v waiting for: %s", d, what)
		}
		time.Sleep(5 * time.Millisecond)
	}
}
