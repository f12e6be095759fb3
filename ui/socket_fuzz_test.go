package ui

import (
	"testing"
	"time"
)

// FuzzSocketOpScopes: any socket message that decodes is checked against
// the sender's scopes before anything reads the run: a token without the
// op's scope is always refused with forbidden naming that scope, one with it
// never is.
func FuzzSocketOpScopes(f *testing.F) {
	for _, s := range []string{
		`{"op":"approve","all":true}`, `{"op":"resolve","action":"a","retry":true}`, `{"op":"pause"}`,
		`{"op":"edit","action":"a","args":{}}`, `{"op":"cancel","run":"r"}`, `{"op":"reject","action":"x","reason":"no"}`,
	} {
		for sc := range 6 {
			f.Add([]byte(s), uint8(sc))
		}
	}
	s := &Server{metrics: newMetrics(nil, nil, nil), limits: newLimiter(0, 0, 0, time.Now)}
	f.Fuzz(func(t *testing.T, data []byte, pick uint8) {
		op, err := decodeReview(data, reviewFrom{})
		if err != nil {
			return
		}
		p := principal{name: "fz"}
		if i := int(pick) % (len(Scopes) + 1); i < len(Scopes) {
			p.scopes = []Scope{Scopes[i]}
		}
		need, ok := opScopes[op.Op]
		if !ok {
			t.Fatalf("%s: decoded op %q has no scope", data, op.Op)
		}
		e := s.opAllowed(p, op.Op)
		switch holds := p.has(need); {
		case holds && e != nil:
			t.Fatalf("%s: %v holds %s but was refused: %+v", data, p.scopes, need, e)
		case !holds && (e == nil || e.Code != "forbidden" || e.Details.(forbiddenDetails).MissingScope != need):
			t.Fatalf("%s: %v lacks %s but got %+v", data, p.scopes, need, e)
		}
	})
}
