package postgres

import (
	"context"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/docketrun/docket/ledger"
)

// Connection poolers (PgBouncer and its kind) in transaction or statement
// mode hand a client's statements to whichever server connection is free,
// so what a server session keeps between transactions is not the client's:
// named prepared statements (pgx's default statement cache) collide or
// vanish, and LISTEN registers on a server connection that is then handed
// to someone else. Open looks for such a pooler (probePooler) unless the
// URL chooses pgx's exec mode itself (default_query_exec_mode), and behind
// one it uses pgx's cache_describe mode (the unnamed statement, each query
// in one round trip, no state kept on the server) and does not LISTEN
// (subscribers of other nodes' events are served by the poll).

// execModeParam is pgx's connection string parameter choosing how queries
// are sent; a URL that sets it is taken as it is.
const execModeParam = "default_query_exec_mode"

// probePooler reports whether cc reaches PostgreSQL through a pooler that
// shares server connections between its clients: two client connections,
// both open, that find themselves on the same server backend (an idle
// pooler hands the server connection one client just released to the next
// client that asks: PgBouncer's default), or one of them on another backend
// than before (a busy pooler hands a client whichever server connection is
// free). A direct session keeps its one backend and never shares it, so a
// true answer is never wrong; it is asked up to ten times. It sends only
// the simple protocol, which any pooler passes.
func probePooler(ctx context.Context, cc *pgx.ConnConfig) (bool, error) {
	cc = cc.Copy()
	cc.DefaultQueryExecMode = pgx.QueryExecModeSimpleProtocol
	a, err := pgx.ConnectConfig(ctx, cc)
	if err != nil {
		return false, err
	}
	defer a.Close(context.Background())
	b, err := pgx.ConnectConfig(ctx, cc)
	if err != nil {
		return false, err
	}
	defer b.Close(context.Background())
	var firstA, firstB int32
	for i := range 10 {
		var pa, pb int32
		if err := a.QueryRow(ctx, "SELECT pg_backend_pid()").Scan(&pa); err != nil {
			return false, err
		}
		if err := b.QueryRow(ctx, "SELECT pg_backend_pid()").Scan(&pb); err != nil {
			return false, err
		}
		if i == 0 {
			firstA, firstB = pa, pb
		}
		// Shared (an idle pooler hands both the same server connection), or
		// moved (a busy one hands a client whichever is free): a direct
		// session keeps its one backend.
		if pa == pb || pa != firstA || pb != firstB {
			return true, nil
		}
	}
	return false, nil
}

// setsExecMode reports whether the connection string chooses pgx's exec
// mode itself.
func setsExecMode(connString string) bool { return hasParam(connString, execModeParam) }

// Pooled reports whether Open found the database behind a pooler that
// shares server connections between clients (transaction pooling): the
// Store then sends queries in pgx's cache_describe mode (unless the URL set
// default_query_exec_mode) and serves other nodes' events to subscribers by
// polling every Config.Poll, as LISTEN does not work through such a pooler.
func (s *Store) Pooled() bool { return s.pooled }

// LeaseDuration is this node's lease: Config.Lease, or more behind a
// pooler (Config.PoolerLoginRetry).
func (s *Store) LeaseDuration() time.Duration { return s.cfg.Lease }

// listenElsewhere prepares Config.ListenURL, when set, for listenLoop: it
// must parse and must not itself go through a pooler in transaction mode.
// Errors: ErrInvalid, connection errors (explained, without a password).
func (s *Store) listenElsewhere(ctx context.Context) error {
	if s.cfg.ListenURL == "" {
		return nil
	}
	lc, err := pgx.ParseConfig(s.cfg.ListenURL)
	if err != nil {
		return fmt.Errorf("%w: ListenURL: %s", ledger.ErrInvalid, redactString(err.Error(), passwordOf(s.cfg.ListenURL)))
	}
	s.listenSecret = lc.Password
	where := fmt.Sprintf("PostgreSQL at %s:%d (ListenURL), database %q as user %q", lc.Host, lc.Port, lc.Database, lc.User)
	pooled, err := probePooler(ctx, lc)
	if err != nil {
		return s.explain("connecting to "+where, err)
	}
	if pooled {
		return fmt.Errorf("%w: ListenURL %s goes through a pooler in transaction mode too: LISTEN needs a connection of its own (the server, or a pooler in session mode)", ledger.ErrInvalid, Redact(s.cfg.ListenURL))
	}
	s.listenCfg = lc
	return nil
}
