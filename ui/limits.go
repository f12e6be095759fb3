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

// byteBudget keeps each token within the bytes of submitted bodies it may
// send (a token bucket of bytes per token name).
type byteBudget struct {
	rate  float64 // bytes per second; <= 0: no budget
	burst float64
	now   func() time.Time

	mu      sync.Mutex
	buckets map[string]*bucket
}

func newByteBudget(rate float64, burst int64, now func() time.Time) *byteBudget {
	return &byteBudget{rate: rate, burst: float64(burst), now: now, buckets: map[string]*bucket{}}
}

// take takes n bytes from name's allowance. When it holds fewer it takes
// nothing and answers false and how long until it holds n.
func (b *byteBudget) take(name string, n int64) (time.Duration, bool) {
	if b.rate <= 0 || n <= 0 {
		return 0, true
	}
	now := b.now()
	b.mu.Lock()
	defer b.mu.Unlock()
	bk, ok := b.buckets[name]
	if !ok {
		bk = &bucket{tokens: b.burst, at: now}
		b.buckets[name] = bk
	}
	if el := now.Sub(bk.at).Seconds(); el > 0 {
		bk.tokens = math.Min(b.burst, bk.tokens+el*b.rate)
		bk.at = now
	}
	if bk.tokens >= float64(n) {
		bk.tokens -= float64(n)
		return 0, true
	}
	return time.Duration((float64(n) - bk.tokens) / b.rate * float64(time.Second)), false
}

// submitBudget charges a submitted body to the caller's byte budget: by
// its Content-Length before it is read (refused: 429, nothing read), else
// by what was read (body, after it). False: refused, answered.
func (s *Server) submitBudget(w http.ResponseWriter, r *http.Request, body []byte) bool {
	p, ok := caller(r)
	if !ok {
		return true
	}
	n := int64(len(body))
	if body == nil {
		n = r.ContentLength
	}
	wait, ok := s.submits.take(p.name, n)
	if !ok {
		s.tooMany(w, wait, fmt.Sprintf("token %s is over its budget of submitted bytes (%s per second, %s at once): this body is %d bytes",
			p.name, byteSize(s.cfg.SubmitBytesPerSecond), byteSize(float64(s.cfg.SubmitBytesBurst)), n))
	}
	return ok
}

// byteSize writes a byte count as people read it.
func byteSize(n float64) string {
	switch {
	case n >= 1<<20:
		return strconv.FormatFloat(n/(1<<20), 'f', -1, 64) + " MiB"
	case n >= 1<<10:
		return strconv.FormatFloat(n/(1<<10), 'f', -1, 64) + " KiB"
	}
	return strconv.FormatFloat(n, 'f', -1, 64) + " B"
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
