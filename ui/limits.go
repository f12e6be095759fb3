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
	reqs       *buckets
	maxSockets int // 0: no cap

	mu      sync.Mutex
	sockets map[string]int
}

// bucket is a token bucket: tokens held at time at.
type bucket struct {
	tokens float64
	at     time.Time
}

// refill adds what rate (per second) gave since b.at, up to burst.
func (b *bucket) refill(now time.Time, rate, burst float64) {
	if el := now.Sub(b.at).Seconds(); el > 0 && rate > 0 {
		b.tokens = math.Min(burst, b.tokens+el*rate)
		b.at = now
	}
}

// buckets is a token bucket per name, each starting full.
type buckets struct {
	rate  float64 // per second; <= 0: no limit
	burst float64
	now   func() time.Time

	mu sync.Mutex
	m  map[string]*bucket

	shared *sharedBuckets // set: the ledger keeps the buckets for every node (sharedlimits.go)
}

func newBuckets(rate, burst float64, now func() time.Time) *buckets {
	return &buckets{rate: rate, burst: burst, now: now, m: map[string]*bucket{}}
}

// take takes n from name's bucket. When it holds fewer it takes nothing
// and answers false and how long until it holds n.
func (bs *buckets) take(name string, n float64) (time.Duration, bool) {
	if bs.rate <= 0 || n <= 0 {
		return 0, true
	}
	if bs.shared != nil {
		wait, ok, err := bs.shared.take(name, n, bs.rate, bs.burst)
		if err == nil {
			return wait, ok
		}
		bs.shared.failed(err)
	}
	now := bs.now()
	bs.mu.Lock()
	defer bs.mu.Unlock()
	b, ok := bs.m[name]
	if !ok {
		b = &bucket{tokens: bs.burst, at: now}
		bs.m[name] = b
	}
	b.refill(now, bs.rate, bs.burst)
	if b.tokens >= n {
		b.tokens -= n
		return 0, true
	}
	return time.Duration((n - b.tokens) / bs.rate * float64(time.Second)), false
}

func newLimiter(rate float64, burst, maxSockets int, now func() time.Time) *limiter {
	return &limiter{reqs: newBuckets(rate, float64(burst), now), maxSockets: maxSockets, sockets: map[string]int{}}
}

// allow takes one request from name's bucket. When the bucket is empty it
// answers false and how long until a request is allowed again.
func (l *limiter) allow(name string) (time.Duration, bool) { return l.reqs.take(name, 1) }

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
	wait, ok := s.submits.take(p.name, float64(n))
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
