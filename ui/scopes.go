package ui

import (
	"crypto/sha256"
	"crypto/subtle"
	"encoding/hex"
	"errors"
	"fmt"
	"net/http"
	"slices"
	"strings"

	"github.com/docketrun/docket/executor/mcpserve"
)

// Scope is what a token may do. Every API route and every WebSocket op needs
// one (routeScopes, opScopes); admin holds them all.
type Scope string

// The scopes, from reading to everything.
const (
	// ScopeRead reads runs, plans, events, tools and metrics, and opens
	// WebSockets.
	ScopeRead Scope = "read"
	// ScopeSubmit creates runs (from a plan, a goal or a conversation).
	// Creating one with approve "all" approves its whole plan, which needs
	// ScopeReview as well.
	ScopeSubmit Scope = "submit"
	// ScopeReview approves, rejects, edits and resolves actions.
	ScopeReview Scope = "review"
	// ScopeControl pauses, resumes, cancels, replays and forks runs.
	ScopeControl Scope = "control"
	// ScopeAdmin is every scope (backups and tokens included).
	ScopeAdmin Scope = "admin"
)

// Scopes lists every scope, in the order answers and messages name them.
var Scopes = []Scope{ScopeRead, ScopeSubmit, ScopeReview, ScopeControl, ScopeAdmin}

// scopeSignedIn is the scope of routes that any valid token may use (its own
// session): being signed in is enough.
const scopeSignedIn Scope = ""

// routeScopes is the one table of what each authenticated route needs, keyed
// "METHOD PATH" as in the route table. A route that is neither public nor
// listed here needs admin (TestEveryRouteHasAScope fails for it).
var routeScopes = map[string]Scope{
	"GET /metrics":       ScopeRead,
	"DELETE /v1/session": scopeSignedIn,
	"GET /v1/session":    scopeSignedIn,
	"GET /v1/tools":      ScopeRead,

	"POST /v1/runs":            ScopeSubmit,
	"GET /v1/runs":             ScopeRead,
	"GET /v1/runs/{id}":        ScopeRead,
	"GET /v1/runs/{id}/plan":   ScopeRead,
	"GET /v1/runs/{id}/events": ScopeRead,
	"GET /v1/runs/{id}/audit":  ScopeRead,
	"GET /v1/runs/{id}/ws":     ScopeRead,
	"GET /v1/ws":               ScopeRead,
	"GET /v1/inbox":            ScopeRead,
	"GET /v1/search/runs":      ScopeRead,
	"GET /v1/runs/{id}/diff":   ScopeRead,
	"GET /v1/budgets":          ScopeRead,
	// A diff of a proposed revision records nothing.
	"POST /v1/runs/{id}/diff": ScopeRead,

	"POST /v1/runs/{id}/approve":                  ScopeReview,
	"POST /v1/runs/{id}/reject":                   ScopeReview,
	"POST /v1/runs/{id}/actions/{action}/approve": ScopeReview,
	"POST /v1/runs/{id}/actions/{action}/reject":  ScopeReview,
	"POST /v1/runs/{id}/actions/{action}/edit":    ScopeReview,
	"POST /v1/runs/{id}/actions/{action}/resolve": ScopeReview,

	"POST /v1/runs/{id}/pause":  ScopeControl,
	"POST /v1/runs/{id}/resume": ScopeControl,
	"POST /v1/runs/{id}/cancel": ScopeControl,
	// Running a waiting action now changes when it happens, not what.
	"POST /v1/runs/{id}/actions/{action}/run_now": ScopeControl,
	"POST /v1/runs/{id}/replay":                   ScopeControl,
	"POST /v1/runs/{id}/fork":                     ScopeControl,

	// A schedule creates runs: writing one needs what creating a run
	// needs (with approve "all", review as well).
	"GET /v1/schedules":              ScopeRead,
	"GET /v1/schedules/{id}":         ScopeRead,
	"POST /v1/schedules":             ScopeSubmit,
	"DELETE /v1/schedules/{id}":      ScopeSubmit,
	"POST /v1/schedules/{id}/pause":  ScopeSubmit,
	"POST /v1/schedules/{id}/resume": ScopeSubmit,
}

// opScopes is what each review or control op needs, over HTTP (where the
// route's scope says the same) and on a WebSocket.
var opScopes = map[string]Scope{
	"approve": ScopeReview,
	"reject":  ScopeReview,
	"edit":    ScopeReview,
	"resolve": ScopeReview,
	"run_now": ScopeControl,
	"pause":   ScopeControl,
	"resume":  ScopeControl,
	"cancel":  ScopeControl,
}

// mcpToolScopes is what each of docket's own MCP tools needs at /mcp
// (ServeMCP), under the name clients call it by. Every tool of the tools file
// needs submit: a call records a run. An own tool without an entry needs
// admin (TestEveryMCPToolHasAScope fails for it).
var mcpToolScopes = map[string]Scope{
	mcpserve.ToolProposePlan: ScopeSubmit,
	mcpserve.ToolRunStatus:   ScopeRead,
	mcpserve.ToolWaiting:     ScopeRead,
}

// mcpToolScope is the scope a call of the MCP tool name needs: its entry in
// mcpToolScopes; submit for the tools of the tools file; admin for any other
// name of docket's own (fail closed).
func mcpToolScope(name string) Scope {
	if sc, ok := mcpToolScopes[name]; ok {
		return sc
	}
	if mcpserve.IsOwnTool(name) {
		return ScopeAdmin
	}
	return ScopeSubmit
}

// routeScope is the scope a route needs: its entry in routeScopes, else
// admin (fail closed).
func routeScope(method, path string) Scope {
	if sc, ok := routeScopes[method+" "+path]; ok {
		return sc
	}
	return ScopeAdmin
}

// ParseScope reads a scope's name.
func ParseScope(s string) (Scope, error) {
	for _, sc := range Scopes {
		if string(sc) == s {
			return sc, nil
		}
	}
	names := make([]string, len(Scopes))
	for i, sc := range Scopes {
		names[i] = string(sc)
	}
	return "", fmt.Errorf("unknown scope %q (want %s)", s, strings.Join(names, ", "))
}

// Token is one API token and what it may do.
type Token struct {
	// Name is recorded with every decision the token makes ("token:NAME").
	// Required: letters, digits and _.- without spaces.
	Name string
	// Scopes the token holds. At least one.
	Scopes []Scope
	// Secret is the token itself, or SHA256 its SHA-256 (lowercase hex):
	// exactly one of them. The server keeps only the hash.
	Secret string
	SHA256 string
	// Groups the token belongs to (optional): a policy rule or budget with
	// approver_groups lets members approve. Recorded with each approval the
	// token gives, so the ledger alone decides whether it counts.
	Groups []string
}

// MinTokenLength is the shortest token accepted (a tokens file's env
// entries, Config.Tokens, Token.Secret): a 16-character token from a
// generator is beyond guessing at the sign-in rate the server allows.
const MinTokenLength = 16

func (t Token) validate() error {
	if t.Name == "" || strings.ContainsAny(t.Name, " \t\r\n") {
		return fmt.Errorf("token name %q: must be non-empty, without spaces", t.Name)
	}
	if len(t.Scopes) == 0 {
		return fmt.Errorf("token %q: needs at least one scope", t.Name)
	}
	for _, sc := range t.Scopes {
		if _, err := ParseScope(string(sc)); err != nil {
			return fmt.Errorf("token %q: %w", t.Name, err)
		}
	}
	if err := checkGroups(t.Groups); err != nil {
		return fmt.Errorf("token %q: %w", t.Name, err)
	}
	switch {
	case (t.Secret == "") == (t.SHA256 == ""):
		return fmt.Errorf("token %q: give exactly one of Secret and SHA256", t.Name)
	case t.Secret != "" && len(t.Secret) < MinTokenLength:
		return fmt.Errorf("token %q: must be at least %d characters (got %d)", t.Name, MinTokenLength, len(t.Secret))
	case t.SHA256 != "" && !isSHA256Hex(t.SHA256):
		return fmt.Errorf("token %q: SHA256 must be 64 lowercase hex digits", t.Name)
	}
	return nil
}

func isSHA256Hex(s string) bool {
	if len(s) != 64 {
		return false
	}
	for _, c := range s {
		if !('0' <= c && c <= '9' || 'a' <= c && c <= 'f') {
			return false
		}
	}
	return true
}

// principal is an authenticated caller: a token's name, scopes and groups.
type principal struct {
	name   string
	scopes []Scope  // sorted as Scopes
	groups []string // as the token lists them
}

// checkGroups checks a token's groups: each named as a token is (a letter,
// then up to 63 letters, digits, _ . -), none twice.
func checkGroups(groups []string) error {
	for i, g := range groups {
		if !tokenNameRE.MatchString(g) {
			return fmt.Errorf("group %q: a letter, then up to 63 letters, digits, _ . -", g)
		}
		if slices.Contains(groups[:i], g) {
			return fmt.Errorf("group %s is listed twice", g)
		}
	}
	return nil
}

// has says whether p holds sc (admin holds every scope; scopeSignedIn is
// held by everyone signed in).
func (p principal) has(sc Scope) bool {
	return sc == scopeSignedIn || slices.Contains(p.scopes, sc) || slices.Contains(p.scopes, ScopeAdmin)
}

// scopeNames lists p's scopes for answers (admin expanded to all of them).
func (p principal) scopeNames() []string {
	out := []string{}
	for _, sc := range Scopes {
		if p.has(sc) {
			out = append(out, string(sc))
		}
	}
	return out
}

// tokenEntry is a token as the server keeps it: its hash, never the token.
type tokenEntry struct {
	principal
	hash [sha256.Size]byte
}

// buildTokens turns the configured tokens into entries: Config.Tokens are
// admin, Config.ScopedTokens hold what they say.
func buildTokens(cfg Config) ([]tokenEntry, error) {
	var out []tokenEntry
	seen := map[string]bool{}
	add := func(t Token) error {
		if err := t.validate(); err != nil {
			return err
		}
		if seen[t.Name] {
			return fmt.Errorf("two tokens are named %q", t.Name)
		}
		seen[t.Name] = true
		e := tokenEntry{principal: principal{name: t.Name, groups: slices.Clone(t.Groups)}}
		for _, sc := range Scopes {
			if slices.Contains(t.Scopes, sc) {
				e.scopes = append(e.scopes, sc)
			}
		}
		if t.Secret != "" {
			e.hash = sha256.Sum256([]byte(t.Secret))
		} else {
			b, _ := hex.DecodeString(t.SHA256)
			copy(e.hash[:], b)
		}
		out = append(out, e)
		return nil
	}
	var errs []error
	names := make([]string, 0, len(cfg.Tokens))
	for name := range cfg.Tokens {
		names = append(names, name)
	}
	slices.Sort(names)
	for _, name := range names {
		if err := add(Token{Name: name, Scopes: []Scope{ScopeAdmin}, Secret: cfg.Tokens[name]}); err != nil {
			errs = append(errs, err)
		}
	}
	for _, t := range cfg.ScopedTokens {
		if err := add(t); err != nil {
			errs = append(errs, err)
		}
	}
	if len(out) == 0 && len(errs) == 0 {
		errs = append(errs, errors.New("at least one token is required"))
	}
	return out, errors.Join(errs...)
}

// lookupToken finds the token tok among the entries, comparing hashes in
// constant time over every entry.
func lookupToken(entries []tokenEntry, tok string) (principal, bool) {
	h := sha256.Sum256([]byte(tok))
	var found principal
	ok := false
	for _, e := range entries {
		if subtle.ConstantTimeCompare(e.hash[:], h[:]) == 1 {
			found, ok = e.principal, true
		}
	}
	return found, ok
}

type principalKey struct{}

// caller returns the authenticated principal of r.
func caller(r *http.Request) (principal, bool) {
	p, ok := r.Context().Value(principalKey{}).(principal)
	return p, ok
}

// forbiddenDetails is the details object of a 403 forbidden answer.
type forbiddenDetails struct {
	MissingScope Scope    `json:"missing_scope"`
	Token        string   `json:"token"`
	Scopes       []string `json:"scopes"`
}

// forbidden is the answer to a caller that lacks sc for what.
func forbidden(p principal, sc Scope, what string) *apiError {
	return &apiError{
		Code:    "forbidden",
		Message: fmt.Sprintf("token %s may not %s: that needs the %s scope, and it holds %s", p.name, what, sc, strings.Join(p.scopeNames(), ", ")),
		Details: forbiddenDetails{MissingScope: sc, Token: p.name, Scopes: p.scopeNames()},
	}
}

// deny answers 403 forbidden naming the missing scope, and counts it.
func (s *Server) deny(w http.ResponseWriter, p principal, sc Scope, what string) {
	s.metrics.forbidden.add(string(sc))
	e := forbidden(p, sc, what)
	writeJSON(w, http.StatusForbidden, map[string]*apiError{"error": e})
}

// needs checks, inside a handler, a scope that depends on the request's
// content (approve "all" approves a whole plan: it needs review too). false
// means the 403 was sent.
func (s *Server) needs(w http.ResponseWriter, r *http.Request, sc Scope, what string) bool {
	p, ok := caller(r)
	if ok && p.has(sc) {
		return true
	}
	if !ok {
		p = principal{name: "unknown"} // fail closed: every route is behind auth
	}
	s.deny(w, p, sc, what)
	return false
}

// may says which things the page offers p may do: each review and control
// op, and creating, replaying and forking runs.
func (p principal) may() map[string]bool {
	out := map[string]bool{
		"create": p.has(ScopeSubmit),
		"replay": p.has(ScopeControl),
		"fork":   p.has(ScopeControl),
	}
	for op, sc := range opScopes {
		out[op] = p.has(sc)
	}
	return out
}
