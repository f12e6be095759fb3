// Package chaos is docket's crash harness: it measures "exactly once in
// effect" by running many random plans with `docket run` in child processes,
// killing them with SIGKILL at random moments, resuming them, resolving what
// waits for a person the way a person would, and auditing a simulated
// external world against the ledger.
//
// The world (World, served by ServeWorld in its own process) has one service
// per effect class, each counting its effects per logical request:
//
//   - catalogue (read_only): GET /items/{sku}.
//   - payments (keyed): POST /charges honours Idempotency-Key (stored keys; 409
//     while a request with the key is still being processed; 422 when a key is
//     reused with another body; 402 for amounts of 9000 or more). Without a
//     key every request is a new charge.
//   - crm (lookup): POST /contacts, searchable by its note field
//     (GET /contacts?note=K), which carries docket's key.
//   - leads (lookup, eventually consistent): like crm, but a new lead becomes
//     visible to searches only after a random lag up to a bound.
//   - settings (idempotent): PUT /accounts/{account}.
//   - email (at_most_once): POST /messages, no key, no search.
//
// Every write commits before it answers, and answers late; some requests fail
// (500 before or after committing, 429 with Retry-After, a dropped connection
// after committing) and some commit late, after the caller's timeout. Which
// fate a request meets is a function of the seed and of the request's place
// among the requests for the same logical effect, so a seed replays the same
// faults. Each run gets its own namespace in the world (URL prefix), which the
// harness audits (GET /{ns}/_audit, the same endpoint the simulated person
// asks) and then drops.
//
// Run drives the whole experiment from a Config: the same seeded workload
// twice, once with the protections (keys, lookups, at-most-once pauses) and
// once with them switched off (the same tools declared idempotent, without
// key_header or lookup), and returns a Report.
//
// Imports: the standard library and plan (to check generated plans).
package chaos
