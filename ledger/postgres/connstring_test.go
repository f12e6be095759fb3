package postgres_test

import (
	"context"
	"errors"
	"fmt"
	"net/url"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/docketrun/docket/ledger"
	"github.com/docketrun/docket/ledger/postgres"
)

func TestIsURL(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		s    string
		want bool
	}{
		{"postgres://u:p@h/db", true},
		{"postgresql://h/db", true},
		{"host=db.internal port=5432 dbname=docket user=docket sslmode=disable", true},
		{"dbname=docket", true},
		{"host = db  dbname = docket", true},
		{"host=db password='a b \\' c' dbname=d", true},
		{"service=ledger", true},
		{"host=db search_path=docket", true},
		{"./docket-data", false},
		{"docket-data", false},
		{"/var/lib/docket", false},
		{"./host=x", false},               // a directory written as a path
		{"sslmode=disable", false},        // names no database
		{"host=db password='open", false}, // unterminated quote
		{"host db", false},
		{"Host=db", false},
		{"", false},
	} {
		if got := postgres.IsURL(tc.s); got != tc.want {
			t.Errorf("IsURL(%q) = %v, want %v", tc.s, got, tc.want)
		}
	}
}

func TestRedact(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct{ in, want string }{
		{"postgres://u:secret@h:5432/db?sslmode=disable", "postgres://u:xxxxx@h:5432/db?sslmode=disable"},
		{"postgres://u@h/db?password=secret&sslmode=disable", "postgres://u@h/db?password=xxxxx&sslmode=disable"},
		{"host=h user=u password=secret dbname=d", "host=h user=u password=xxxxx dbname=d"},
		{"host=h password='se cret\\'s' dbname=d", "host=h password=xxxxx dbname=d"},
		{"host = h  dbname = 'my db'", "host=h dbname='my db'"},
	} {
		got := postgres.Redact(tc.in)
		if got != tc.want {
			t.Errorf("Redact(%q) = %q, want %q", tc.in, got, tc.want)
		}
		if strings.Contains(got, "secret") || strings.Contains(got, "cret") {
			t.Errorf("Redact(%q) kept the password: %q", tc.in, got)
		}
	}
}

// keywordForm writes a cluster URL in libpq's keyword/value form, the
// password quoted as libpq reads it.
func keywordForm(t *testing.T, raw string) (string, string) {
	t.Helper()
	u, err := url.Parse(raw)
	if err != nil {
		t.Fatal(err)
	}
	pw, _ := u.User.Password()
	return fmt.Sprintf("host=%s port = %s dbname=%s user=%s password='%s' sslmode=disable",
		u.Hostname(), u.Port(), strings.TrimPrefix(u.Path, "/"), u.User.Username(), pw), pw
}

// A keyword/value connection string opens the same ledger as the URL; a
// wrong password in it fails without printing either password.
func TestOpenKeywordForm(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	dsn, pw := keywordForm(t, database(t))
	schema := schemaFor(t.Name())
	a := open(t, postgres.Config{Schema: schema})
	b := open(t, postgres.Config{URL: dsn, Schema: schema})
	onePlanRun(t, a, "r")
	if run, err := b.GetRun(ctx, "r"); err != nil || run.ID != "r" {
		t.Fatalf("the run recorded through the URL, read through the keyword form: %+v, %v", run, err)
	}
	bad := strings.Replace(dsn, pw, "wrong-"+pw[:6], 1)
	_, err := postgres.Open(ctx, postgres.Config{URL: bad, Schema: schema})
	if err == nil || !strings.Contains(err.Error(), "authentication failed") {
		t.Fatalf("wrong password: %v, want an authentication error", err)
	}
	if strings.Contains(err.Error(), pw[:6]) {
		t.Fatalf("the error shows the password: %v", err)
	}
	if _, err := postgres.Open(ctx, postgres.Config{URL: "host=127.0.0.1 password='unterminated"}); !errors.Is(err, ledger.ErrInvalid) || strings.Contains(err.Error(), "unterminated") {
		t.Fatalf("a broken keyword/value string: %v, want ErrInvalid without the password", err)
	}
}

// The URL's pool_max_conns sizes the pool when Config.MaxConns is left
// zero (before, the default of 16 replaced it silently: a node could open
// more connections than the operator allowed), and its application_name is
// kept (else "docket"). A pool_max_conns below 2 is refused, naming it.
func TestOpenURLPoolSettings(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	name := fmt.Sprintf("docket_pool_%d", time.Now().UnixNano())
	sep := "?"
	if strings.Contains(database(t), "?") {
		sep = "&"
	}
	dsn := database(t) + sep + "pool_max_conns=3&application_name=" + name
	schema := schemaFor(t.Name() + t.TempDir())
	s, err := postgres.Open(ctx, postgres.Config{URL: dsn, Schema: schema})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	if got := s.PoolMax(); got != 3 {
		t.Fatalf("pool size with pool_max_conns=3 in the URL: %d", got)
	}
	// Load: many reads and Applies at once, then count the server's
	// connections of this application.
	claim := groupRuns(t, s, "c0", "c1", "c2", "c3")
	var wg sync.WaitGroup
	for i := range 24 {
		wg.Go(func() {
			run := fmt.Sprintf("c%d", i%4)
			if i < 4 {
				op, _ := claim(run, "a")
				if _, err := s.Apply(ctx, op); err != nil {
					t.Error(err)
				}
				return
			}
			if _, err := s.Doc(ctx, run); err != nil {
				t.Error(err)
			}
		})
	}
	wg.Wait()
	conn := rawConn(t)
	defer conn.Close(ctx)
	var n int
	if err := conn.QueryRow(ctx, `SELECT count(*) FROM pg_stat_activity WHERE application_name = $1`, name).Scan(&n); err != nil {
		t.Fatal(err)
	}
	// The pool's connections, and the one that listens for other nodes'
	// events (outside the pool).
	if n < 1 || n > 3+1 {
		t.Fatalf("%d server connections named %s with pool_max_conns=3 (want 1 to 4)", n, name)
	}
	_, err = postgres.Open(ctx, postgres.Config{URL: database(t) + sep + "pool_max_conns=1", Schema: schema})
	if !errors.Is(err, ledger.ErrInvalid) || !strings.Contains(err.Error(), "pool_max_conns") {
		t.Fatalf("pool_max_conns=1: %v, want ErrInvalid naming pool_max_conns", err)
	}
	// Config.MaxConns, when set, wins.
	o, err := postgres.Open(ctx, postgres.Config{URL: dsn, Schema: schema, MaxConns: 5})
	if err != nil {
		t.Fatal(err)
	}
	defer o.Close()
	if got := o.PoolMax(); got != 5 {
		t.Fatalf("pool size with Config.MaxConns 5 and pool_max_conns=3: %d", got)
	}
	// The parameter itself counts, not the words: a name that contains
	// it leaves the default; the keyword/value form sets it too.
	named, err := postgres.Open(ctx, postgres.Config{URL: database(t) + sep + "application_name=pool_max_conns_watch", Schema: schema})
	if err != nil {
		t.Fatal(err)
	}
	defer named.Close()
	if got := named.PoolMax(); got != postgres.DefaultMaxConns {
		t.Fatalf("pool size with an application_name that contains pool_max_conns: %d, want the default %d", got, postgres.DefaultMaxConns)
	}
	kw, _ := keywordForm(t, database(t))
	k, err := postgres.Open(ctx, postgres.Config{URL: kw + " pool_max_conns=4", Schema: schema})
	if err != nil {
		t.Fatal(err)
	}
	defer k.Close()
	if got := k.PoolMax(); got != 4 {
		t.Fatalf("pool size with pool_max_conns=4 in the keyword/value form: %d", got)
	}
}
