package session

import (
	"sync"
	"time"
)

// rateLimiter is a token bucket for log lines a guest can trigger.
type rateLimiter struct {
	mu      sync.Mutex
	rate    float64 // tokens per second
	burst   float64
	tokens  float64
	last    time.Time
	dropped uint64
}

func newRateLimiter(perSecond, burst float64) *rateLimiter {
	return &rateLimiter{rate: perSecond, burst: burst, tokens: burst, last: time.Now()}
}

// allow takes a token; when it does, it also returns how many lines were
// dropped since the last allowed one.
func (r *rateLimiter) allow() (bool, uint64) {
	r.mu.Lock()
	defer r.mu.Unlock()
	now := time.Now()
	r.tokens = min(r.burst, r.tokens+now.Sub(r.last).Seconds()*r.rate)
	r.last = now
	if r.tokens < 1 {
		r.dropped++
		return false, 0
	}
	r.tokens--
	d := r.dropped
	r.dropped = 0
	return true, d
}
