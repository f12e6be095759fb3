package executor

import (
	"context"
	"fmt"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/docketrun/docket/ledger"
	"github.com/docketrun/docket/tools"
	"github.com/docketrun/docket/tools/httptool"
)

// outageAPI is a payments API on loopback that is down until the engine's
// clock reaches upAt: its port is bound but not listening, so the kernel
// refuses every connection (nothing is sent). Then it listens and answers
// with answer (given how long after setup, by the engine's clock), counting
// calls and effects per key.
type outageAPI struct {
	t      *testing.T
	url    string
	fd     int
	upAt   time.Time
	answer func(since time.Duration, w http.ResponseWriter) bool // true: the effect happened
	start  time.Time

	once    sync.Once
	mu      sync.Mutex
	clock   ledger.Clock
	calls   int
	effects map[string]int
}

func newOutageAPI(t *testing.T, answer func(since time.Duration, w http.ResponseWriter) bool) *outageAPI {
	t.Helper()
	fd, err := syscall.Socket(syscall.AF_INET, syscall.SOCK_STREAM|syscall.SOCK_CLOEXEC, 0)
	if err != nil {
		t.Fatal(err)
	}
	if err := syscall.Bind(fd, &syscall.SockaddrInet4{Addr: [4]byte{127, 0, 0, 1}}); err != nil {
		syscall.Close(fd)
		t.Fatal(err)
	}
	sa, err := syscall.Getsockname(fd)
	if err != nil {
		syscall.Close(fd)
		t.Fatal(err)
	}
	a := &outageAPI{t: t, fd: fd, url: fmt.Sprintf("http://127.0.0.1:%d", sa.(*syscall.SockaddrInet4).Port),
		answer: answer, effects: map[string]int{}}
	t.Cleanup(func() { a.once.Do(func() { syscall.Close(fd) }) })
	return a
}

// down keeps the API refusing connections for d of the engine's clock
// from setup on: the option wraps the harness's Sleep, which advances it.
func (a *outageAPI) down(d time.Duration) setupOpt {
	return func(c *Config) {
		a.clock = c.Clock
		a.start = c.Clock.Now()
		a.upAt = a.start.Add(d)
		a.poll()
		sleep := c.Sleep
		c.Sleep = func(ctx context.Context, d time.Duration) error {
			err := sleep(ctx, d)
			a.poll()
			return err
		}
	}
}

// poll starts listening once the outage is over.
func (a *outageAPI) poll() {
	if a.clock.Now().Before(a.upAt) {
		return
	}
	a.once.Do(func() {
		if err := syscall.Listen(a.fd, 64); err != nil {
			a.t.Errorf("listen: %v", err)
			syscall.Close(a.fd)
			return
		}
		f := os.NewFile(uintptr(a.fd), "api")
		ln, err := net.FileListener(f)
		f.Close()
		if err != nil {
			a.t.Errorf("listener: %v", err)
			return
		}
		srv := httptest.NewUnstartedServer(http.HandlerFunc(a.serve))
		srv.Listener.Close()
		srv.Listener = ln
		srv.Start()
		a.t.Cleanup(srv.Close)
	})
}

func (a *outageAPI) serve(w http.ResponseWriter, r *http.Request) {
	a.mu.Lock()
	defer a.mu.Unlock()
	a.calls++
	if a.answer(a.clock.Now().Sub(a.start), w) {
		a.effects[r.Header.Get("Idempotency-Key")]++
	}
}

func (a *outageAPI) counts() (calls, effects int) {
	a.mu.Lock()
	defer a.mu.Unlock()
	for _, n := range a.effects {
		effects += n
	}
	return a.calls, effects
}

// charged answers 200 with a charge: the effect happened.
func charged(_ time.Duration, w http.ResponseWriter) bool {
	w.Header().Set("Content-Type", "application/json")
	w.Write([]byte(`{"id":"ch_1"}`))
	return true
}

// tools builds the API's one tool "charge" from a tools file entry with
// the given effect and extra fields (a "retry" block).
func (a *outageAPI) tools(effect, extra string) []tools.Tool {
	a.t.Helper()
	key := ""
	if effect == "keyed" {
		key = `"key_header": "Idempotency-Key",`
	}
	file := `{"version": 1, "tools": [{"name": "charge", "effect": "` + effect + `", ` + key + `
		"input_schema": {"type": "object"}, "timeout": "5s",
		"request": {"method": "POST", "url": "` + a.url + `/charges"}` + extra + `}]}`
	f, err := httptool.Parse([]byte(file), func(string) string { return "" })
	if err != nil {
		a.t.Fatal(err)
	}
	a.t.Cleanup(f.CloseIdleConnections)
	return f.Tools
}

// TestRetriesRideOutAnOutage: an API that refuses connections for a while
// (by the engine's clock) and then answers. The default policy rides out
// 40s of it (before, five attempts in under two seconds failed the run); a
// tool's "retry" block in the tools file stretches or shortens the budget;
// when the budget runs out the action fails saying how many attempts over
// how long, and what the budget was; nothing takes effect twice.
func TestRetriesRideOutAnOutage(t *testing.T) {
	t.Parallel()
	const forever = 24 * time.Hour
	for _, c := range []struct {
		name   string
		outage time.Duration
		retry  string // the tool's retry block, "" for none
		// completed, or the failed action's error (substrings); the attempts
		attempts func(n int) bool
		failed   []string
		maxWait  time.Duration
	}{
		{name: "default policy, 40s down", outage: 40 * time.Second,
			attempts: func(n int) bool { return n > 5 }, maxWait: DefaultRetryMax},
		{name: "tool budget 2m, 90s down", outage: 90 * time.Second, retry: `{"attempts": 60, "max_backoff": "5s", "budget": "2m"}`,
			attempts: func(n int) bool { return n >= 90/5 }, maxWait: 5 * time.Second},
		{name: "tool budget 20s runs out", outage: forever, retry: `{"attempts": 60, "max_backoff": "5s", "budget": "20s"}`,
			attempts: func(n int) bool { return n > 4 && n < 60 }, maxWait: 5 * time.Second,
			failed: []string{"attempts (not_sent) over 20s, the end of its retry budget (60 attempts within 20s)", "connection refused"}},
		{name: "tool attempts run out", outage: forever, retry: `{"attempts": 3}`,
			attempts: func(n int) bool { return n == 3 }, maxWait: DefaultRetryMax,
			failed: []string{"gave up after 3 attempts (not_sent) over ", "the end of its retry budget (3 attempts within 1m0s)", "connection refused"}},
		{name: "default policy runs out", outage: forever,
			attempts: func(n int) bool { return n >= 12 && n <= 18 }, maxWait: DefaultRetryMax,
			failed: []string{"attempts (not_sent) over 1m0s, the end of its retry budget (20 attempts within 1m0s)"}},
	} {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			api := newOutageAPI(t, charged)
			extra := ""
			if c.retry != "" {
				extra = `, "retry": ` + c.retry
			}
			b := setup(t, api.tools("keyed", extra), api.down(c.outage))
			start := b.clock.Now()
			doc := b.run("r1", mkPlan(t, pa("a", "charge", `{}`)), PolicyAll)
			calls, effects := api.counts()
			if c.failed == nil {
				wantStatus(t, doc, ledger.RunCompleted)
				a := wantAction(t, doc, "a", ledger.StatusSucceeded)
				if !c.attempts(a.Attempts) || calls != 1 || effects != 1 {
					t.Errorf("%d attempts, %d calls answered, %d effects", a.Attempts, calls, effects)
				}
				if waited := b.clock.Now().Sub(start); waited < c.outage {
					t.Errorf("succeeded after %v of a %v outage", waited, c.outage)
				}
			} else {
				wantStatus(t, doc, ledger.RunFailed)
				a := wantAction(t, doc, "a", ledger.StatusFailed)
				for _, w := range c.failed {
					if !strings.Contains(a.Error, w) || !strings.Contains(doc.Run.Error, w) {
						t.Errorf("action error %q, run error %q: want %q", a.Error, doc.Run.Error, w)
					}
				}
				if !c.attempts(a.Attempts) || !strings.HasPrefix(a.Error, fmt.Sprintf("gave up after %d attempts", a.Attempts)) || calls != 0 {
					t.Errorf("%d attempts (%q), %d calls answered", a.Attempts, a.Error, calls)
				}
			}
			for i, d := range b.sleepLog() {
				if d > c.maxWait {
					t.Errorf("wait %d: %v, longer than the cap %v", i+1, d, c.maxWait)
				}
			}
		})
	}
}

// TestRetryBudgetKeepsTheSafetyRules: a generous retry block changes only
// the timing. An at-most-once call answered 503 without Retry-After (its
// outcome unknown) is still never retried; one answered 503 with
// Retry-After (not processed) is retried, no sooner than asked, even past
// the tool's max_backoff.
func TestRetryBudgetKeepsTheSafetyRules(t *testing.T) {
	t.Parallel()
	const generous = `, "retry": {"attempts": 50, "max_backoff": "2s", "budget": "10m"}`
	t.Run("unknown outcome, at most once", func(t *testing.T) {
		t.Parallel()
		api := newOutageAPI(t, func(_ time.Duration, w http.ResponseWriter) bool {
			w.WriteHeader(http.StatusServiceUnavailable)
			return false
		})
		b := setup(t, api.tools("at_most_once", generous), api.down(0))
		doc := b.run("r1", mkPlan(t, pa("a", "charge", `{}`)), PolicyAll)
		wantStatus(t, doc, ledger.RunPaused)
		a := wantAction(t, doc, "a", ledger.StatusNeedsReview)
		if calls, _ := api.counts(); a.Attempts != 1 || calls != 1 || !strings.Contains(a.Error, "at-most-once: not retried") {
			t.Errorf("%d attempts, %d calls: %q", a.Attempts, calls, a.Error)
		}
	})
	t.Run("Retry-After, at most once", func(t *testing.T) {
		t.Parallel()
		api := newOutageAPI(t, func(since time.Duration, w http.ResponseWriter) bool {
			if since < 30*time.Second {
				w.Header().Set("Retry-After", "7")
				w.WriteHeader(http.StatusServiceUnavailable)
				return false
			}
			return charged(since, w)
		})
		b := setup(t, api.tools("at_most_once", generous), api.down(0))
		doc := b.run("r1", mkPlan(t, pa("a", "charge", `{}`)), PolicyAll)
		wantStatus(t, doc, ledger.RunCompleted)
		a := wantAction(t, doc, "a", ledger.StatusSucceeded)
		calls, effects := api.counts()
		if effects != 1 || calls != a.Attempts || a.Attempts < 2 {
			t.Errorf("%d attempts, %d calls, %d effects", a.Attempts, calls, effects)
		}
		sleeps := b.sleepLog()
		if len(sleeps) == 0 {
			t.Fatal("no wait")
		}
		for i, d := range sleeps {
			if d < 7*time.Second {
				t.Errorf("wait %d: %v, sooner than Retry-After (7s)", i+1, d)
			}
		}
	})
}
