package ui

import (
	"fmt"
	"math"
	"net/http"
	"strconv"
	"sync"
	"time"
)

// limiter keeps each token within its request rate (a token bucket per
// token name) and its cap of open WebSockets.
type limiter struct {
	rate       float64 // requests per second; 0: no limit
	burst      float64
	maxSockets int // 0: no cap
	now        func() time.Time

	mu      sync.Mutex
	buckets map[string]*bucket
	sockets map[string]int
}

type bucket struct {
	tokens float64
	at     time.Time
}

func newLimiter(rate float64, burst, maxSockets int, now func() time.Time) *limiter {
	return &limiter{rate: rate, burst: float64(burst), maxSockets: maxSockets, now: now, buckets: map[string]*bucket{}, sockets: map[string]int{}}
}

// allow takes one request from name's bucket. When the bucket is empty it
// answers false and how long until a request is allowed again.
func (l *limiter) allow(name string) (time.Duration, bool) {
	if l.rate <= 0 {
		return 0, true
	}
	now := l.now()
	l.mu.Lock()
	defer l.mu.Unlock()
	b, ok := l.buckets[name]
	if !ok {
		b = &bucket{tokens: l.burst, at: now}
		l.buckets[name] = b
	}
	if el := now.Sub(b.at).Seconds(); el > 0 {
		b.tokens = math.Min(l.burst, b.tokens+el*l.rate)
		b.at = now
	}
	if b.tokens >= 1 {
		b.tokens--
		return 0, true
	}
	return time.Duration((1 - b.tokens) / l.rate * float64(time.Second)), false
}

// openSocket counts a WebSocket of name; false when name holds its cap.
func (l *limiter) openSocket(name string) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.maxSockets > 0 && l.sockets[name] >= l.maxSockets {
		return false
	}
	l.sockets[name]++
	return true
}

// closeSocket forgets one WebSocket of name.
func (l *limiter) closeSocket(name string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.sockets[name]--; l.sockets[name] <= 0 {
		delete(l.sockets, name)
	}
}

// retryAfter is a Retry-After value: whole seconds, at least 1.
func retryAfter(wait time.Duration) int {
	return max(1, int(math.Ceil(wait.Seconds())))
}

// tooMany answers 429 rate_limited with Retry-After, and counts it.
func (s *Server) tooMany(w http.ResponseWriter, wait time.Duration, msg string) {
	s.metrics.rateLimited.Add(1)
	secs := retryAfter(wait)
	w.Header().Set("Retry-After", strconv.Itoa(secs))
	writeError(w, http.StatusTooManyRequests, "rate_limited", fmt.Sprintf("%s: retry after %ds", msg, secs), map[string]int{"retry_after": secs})
}
