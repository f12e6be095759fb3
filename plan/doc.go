// Package plan holds docket's plan data and the pure functions over it:
// strict decoding, structural checks (ids, dependencies, cycles, references),
// references to earlier outputs, RFC 8785 canonical JSON, idempotency keys
// and plan hashes.
//
// It is the leaf of the module: it imports only the standard library and
// github.com/gowebpki/jcs. It does no I/O, never reads the clock and never
// logs; every function is a pure function of its arguments.
//
// # Plan documents
//
// A plan document is a JSON object:
//
//	{"goal": "...", "actions": [{"id": "a1", "tool": "crm.create", "args": {...},
//	  "depends_on": ["a0"], "why": "..."}], "id"?, "run_id"?, "meta"?,
//	  "created_at"?, "transcript"?}
//
// [Decode] is strict. It refuses, with a [Problem] naming the action and the
// field: unknown fields (at plan and action level), values of the wrong type
// (null included), trailing data, duplicate object keys anywhere, invalid
// UTF-8, lone UTF-16 surrogates in \u escapes, NaN and Infinity, documents
// larger than [MaxDocumentSize] (refused before anything is parsed), and
// nesting deeper than [MaxDepth]. [Plan.Check] then collects every structural
// problem at once; [Errors] lists them in document order.
//
// Action ids use the alphabet [A-Za-z0-9_-], 1 to [MaxIDLength] bytes, so
// that they can never contain '.', whitespace or "${" and references stay
// unambiguous. Tool names are non-empty valid UTF-8, at most 256 bytes. Args are required and must be a JSON
// object. depends_on names other actions of the same plan, each at most once.
//
// # References
//
// A string value inside args that is exactly "${ACTION.output}" or
// "${ACTION.output.PATH}" is a reference: [Resolve] replaces it by the JSON
// value it points to in ACTION's recorded output, type preserved (a number
// stays a number, an object an object). PATH is a dot-separated list of
// segments; against an object a segment is a key, against an array it is an
// index written in decimal without leading zeros ("items.0.id"). A segment
// cannot contain '.', '{' or '}', so object keys containing those characters
// are not addressable by a reference: reference the enclosing object instead.
// A string that contains "${" but is not exactly one reference is refused:
// docket never interpolates text, and the model must not believe it did.
// Object keys containing "${" are refused too. A reference must name an
// action that is a (transitive) dependency of the action holding it.
//
// # Canonical JSON, numbers, keys and hashes
//
// [Canonical] is RFC 8785 (JCS) via github.com/gowebpki/jcs: object keys
// sorted, no insignificant whitespace, numbers in ECMAScript form (1, 1.0 and
// 1e0 all become 1). This package never decodes a number through float64:
// numbers are checked as text, and only the canonicalizer turns them into
// doubles to print them, after that check. JCS represents numbers as IEEE 754
// doubles, so any number whose magnitude exceeds 2^53 (9007199254740992) is
// refused, integral or not (beyond 2^53 a double cannot keep every integer,
// let alone a fraction): send big ids as strings. Numbers within that range
// that have more digits than a double holds are rounded to the nearest double
// as RFC 8785 prescribes (0.10000000000000000001 becomes 0.1, 1e-400 becomes 0).
//
// [Key] derives an action's idempotency key exactly as plan/README.md, Key derivation, defines it:
//
//	"dk1_" + lowercase_hex(sha256(JCS([run_id, action_id, tool, resolved_args])))
//
// The "dk1_" prefix is a version: a change to the derivation must use a new
// prefix ("dk2_"), never silently change what dk1_ keys mean. [Hash] is a
// stable digest of what a plan asks for (goal and actions), independent of
// formatting, provenance and explanations.
//
// # Limits
//
// [MaxDocumentSize], [MaxDepth], [MaxActions] and [MaxIDLength] bound every
// input so that hostile or broken input yields a clear error instead of
// exhausting memory or the stack. MaxDepth counts nested arrays and objects
// from the root of the document being parsed: for a plan document that is the
// plan object, for [Canonical], [Key] and [Resolve] it is the value passed in.
package plan

// Limits on the input this package accepts.
const (
	// MaxDocumentSize is the largest plan document, args value or output
	// accepted, in bytes (16 MiB). Larger input is refused before parsing.
	MaxDocumentSize = 16 << 20
	// MaxDepth is the deepest nesting of arrays and objects accepted.
	MaxDepth = 64
	// MaxActions is the largest number of actions in one plan.
	MaxActions = 10000
	// MaxIDLength is the longest action id, in bytes.
	MaxIDLength = 128
)

// maxSafeInteger is 2^53, the largest magnitude a JSON number may have here.
const maxSafeInteger = 1 << 53
