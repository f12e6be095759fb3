package ui

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"time"
)

// sharedSessions is a ledger shared by several processes (ledger/postgres):
// the page's sessions recorded there are valid on every node behind a load
// balancer, and signing out on one ends them on all. Only the cookie's
// SHA-256 is stored, with the name of the token it was made from (each
// node maps the name to its scopes from its own token configuration).
type sharedSessions interface {
	PutSession(ctx context.Context, hash, tokenName string, expires time.Time) error
	Session(ctx context.Context, hash string) (tokenName string, expires time.Time, ok bool, err error)
	DeleteSession(ctx context.Context, hash string) error
}

func sessionHash(id string) string {
	h := sha256.Sum256([]byte(id))
	return hex.EncodeToString(h[:])
}

// lookupSession returns the session of a cookie: from this server's memory,
// or, on a shared ledger, from the ledger (the source of truth there, so a
// sign-out on another node counts here too).
func (s *Server) lookupSession(ctx context.Context, id string) (session, bool, error) {
	now := s.cfg.Now()
	if ss, ok := s.led.(sharedSessions); ok {
		name, expires, found, err := ss.Session(ctx, sessionHash(id))
		if err != nil || !found || now.After(expires) {
			return session{}, false, err
		}
		for _, e := range s.tokens {
			if e.principal.name == name {
				return session{who: e.principal, expires: expires}, true, nil
			}
		}
		return session{}, false, nil // made from a token this node does not know
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	sess, ok := s.sessions[id]
	if ok && now.After(sess.expires) {
		delete(s.sessions, id)
		ok = false
	}
	return sess, ok, nil
}
