package ui

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"slices"
	"sync"
	"time"

	"github.com/docketrun/docket/ledger"
)

// sessionStore keeps the page's sign-in sessions by cookie id: in this
// server's memory (memSessions), or, on a ledger shared by several
// processes, in the ledger (ledgerSessions), so that every node behind a
// load balancer accepts them and signing out on one ends them on all.
type sessionStore interface {
	// start records session id of p until expires; the oldest sessions of
	// p's token beyond the cap end.
	start(ctx context.Context, id string, p principal, now, expires time.Time) error
	// lookup returns the session of id if it is live at now.
	lookup(ctx context.Context, id string, now time.Time) (session, bool, error)
	// end ends session id (no error when there is none).
	end(ctx context.Context, id string) error
}

// newSessionStore keeps sessions in led when it keeps them
// (ledger.SessionKeeper), else in memory; perToken caps the live sessions
// made from one token on this server; named finds the principal of a
// token by name.
func newSessionStore(led ledger.Store, perToken int, named func(string) (principal, bool)) sessionStore {
	local := &memSessions{perToken: perToken, m: map[string]session{}}
	if sk, ok := led.(ledger.SessionKeeper); ok {
		capper, _ := led.(SharedLimits)
		return &ledgerSessions{local: local, keeper: sk, capper: capper, named: named}
	}
	return local
}

// memSessions keeps sessions in this server's memory.
type memSessions struct {
	perToken int
	mu       sync.Mutex
	m        map[string]session
}

func (ms *memSessions) start(_ context.Context, id string, p principal, now, expires time.Time) error {
	ms.add(id, p, now, expires)
	return nil
}

// add records session id and returns the ids of the sessions it ended:
// the oldest of the token's beyond the cap (a person who lost a cookie
// can always sign in again, and one token never holds more than the cap).
// Expired sessions are forgotten.
func (ms *memSessions) add(id string, p principal, now, expires time.Time) (evicted []string) {
	ms.mu.Lock()
	defer ms.mu.Unlock()
	var mine []string // the token's live sessions
	for k, v := range ms.m {
		if now.After(v.expires) {
			delete(ms.m, k)
		} else if v.who.name == p.name {
			mine = append(mine, k)
		}
	}
	if over := len(mine) + 1 - ms.perToken; over > 0 {
		slices.SortFunc(mine, func(a, b string) int { return ms.m[a].expires.Compare(ms.m[b].expires) })
		evicted = mine[:over]
		for _, k := range evicted {
			delete(ms.m, k)
		}
	}
	ms.m[id] = session{who: p, expires: expires}
	return evicted
}

func (ms *memSessions) lookup(_ context.Context, id string, now time.Time) (session, bool, error) {
	ms.mu.Lock()
	defer ms.mu.Unlock()
	sess, ok := ms.m[id]
	if ok && now.After(sess.expires) {
		delete(ms.m, id)
		ok = false
	}
	return sess, ok, nil
}

func (ms *memSessions) end(_ context.Context, id string) error {
	ms.mu.Lock()
	defer ms.mu.Unlock()
	delete(ms.m, id)
	return nil
}

// ledgerSessions keeps sessions in a shared ledger, the source of truth
// for lookups (a sign-out on another node counts here too). Only the
// cookie's SHA-256 is stored, with the name of the token it was made from
// (each node maps the name to its scopes from its own token
// configuration). A ledger that keeps the service's limits (SharedLimits)
// caps each token's sessions over every node; otherwise the sessions made
// on this server are kept in memory too, for the cap on this server.
type ledgerSessions struct {
	local  *memSessions
	keeper ledger.SessionKeeper
	capper SharedLimits // nil: the cap counts this server's sessions only
	named  func(tokenName string) (principal, bool)
}

func (ls *ledgerSessions) start(ctx context.Context, id string, p principal, now, expires time.Time) error {
	if ls.capper == nil {
		for _, k := range ls.local.add(id, p, now, expires) {
			if err := ls.keeper.DeleteSession(ctx, sessionHash(k)); err != nil {
				return fmt.Errorf("ending the token's oldest session: %w", err)
			}
		}
	}
	if err := ls.keeper.PutSession(ctx, sessionHash(id), p.name, expires); err != nil {
		return fmt.Errorf("recording the session: %w", err)
	}
	if ls.capper != nil {
		// The ledger ends the token's oldest sessions over every node,
		// this server's among them: nothing to count here.
		if err := ls.capper.CapSessions(ctx, p.name, ls.local.perToken); err != nil {
			return fmt.Errorf("ending the token's oldest sessions: %w", err)
		}
	}
	return nil
}

func (ls *ledgerSessions) lookup(ctx context.Context, id string, now time.Time) (session, bool, error) {
	name, expires, found, err := ls.keeper.Session(ctx, sessionHash(id))
	if err != nil || !found || now.After(expires) {
		return session{}, false, err
	}
	p, ok := ls.named(name)
	if !ok {
		return session{}, false, nil // made from a token this node does not know
	}
	return session{who: p, expires: expires}, true, nil
}

func (ls *ledgerSessions) end(ctx context.Context, id string) error {
	ls.local.end(ctx, id)
	return ls.keeper.DeleteSession(ctx, sessionHash(id))
}

func sessionHash(id string) string {
	h := sha256.Sum256([]byte(id))
	return hex.EncodeToString(h[:])
}

// principalNamed returns the principal of the token named name.
func (s *Server) principalNamed(name string) (principal, bool) {
	for _, e := range s.tokens {
		if e.principal.name == name {
			return e.principal, true
		}
	}
	return principal{}, false
}

// lookupSession returns the live session of a cookie.
func (s *Server) lookupSession(ctx context.Context, id string) (session, bool, error) {
	return s.sessions.lookup(ctx, id, s.cfg.Now())
}
