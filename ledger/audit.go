package ledger

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"strconv"
	"time"
)

// The audit chain: every event of a run recorded by a backend that
// implements HashedAppender carries a hash (Event.Hash) over the previous
// event's hash and its own fields (ChainHash), computed here, in the rules,
// so that every such backend chains alike; the run record keeps the last
// one (RunRecord.AuditHash), so a chain never needs to be re-read to grow.
// An edited, removed, inserted or reordered event breaks the chain from
// there on (VerifyChain). Runs recorded before the chain existed, or by a
// backend without HashedAppender, have no hashes (RunRecord.Audit false).

// HashedAppender is the optional Tx method behind the audit chain: append
// an event exactly as AppendEvent does (next seq, At = Now()), with Hash set
// to hash(ev) of the event as it will be stored, and return it.
type HashedAppender interface {
	AppendHashedEvent(runID string, typ EventType, actionID string, data json.RawMessage, hash func(Event) string) (Event, error)
}

// ChainHash is the hash event ev carries after prev (its run's previous
// event's hash; "" for the first): "sha256:" + hex of a length-prefixed
// encoding of prev, seq, run id, type, action id, time (RFC 3339, UTC,
// nanoseconds) and the data's bytes.
func ChainHash(prev string, ev Event) string {
	h := sha256.New()
	field := func(s string) {
		h.Write([]byte(strconv.Itoa(len(s))))
		h.Write([]byte{':'})
		h.Write([]byte(s))
	}
	field("docket-audit-1")
	field(prev)
	field(strconv.FormatUint(ev.Seq, 10))
	field(ev.RunID)
	field(string(ev.Type))
	field(ev.ActionID)
	field(ev.At.UTC().Format(time.RFC3339Nano))
	field(string(ev.Data))
	return "sha256:" + hex.EncodeToString(h.Sum(nil))
}

// ChainError says where a run's chain breaks.
type ChainError struct {
	RunID  string
	Seq    uint64 // the first event that does not verify
	Reason string
}

func (e *ChainError) Error() string {
	return fmt.Sprintf("ledger: run %s: audit chain broken at event %d: %s", e.RunID, e.Seq, e.Reason)
}

// VerifyChain checks a run's events (all of them, from seq 1, in order)
// against their hashes and, when last is not "", against the last hash the
// run record keeps. It returns nil, or a *ChainError at the first event that
// does not verify. Events without a hash verify only if none has one (a run
// from before the chain): then chained is false.
func VerifyChain(runID string, evs []Event, last string) (chained bool, err error) {
	prev := ""
	for i, ev := range evs {
		if ev.Seq != uint64(i)+1 {
			return true, &ChainError{RunID: runID, Seq: uint64(i) + 1, Reason: fmt.Sprintf("missing: the next event has seq %d", ev.Seq)}
		}
		if ev.Hash == "" {
			if i == 0 && last == "" {
				continue // not chained: every event must lack a hash
			}
			if prev != "" || last != "" {
				return true, &ChainError{RunID: runID, Seq: ev.Seq, Reason: "no hash"}
			}
			continue
		}
		if i > 0 && prev == "" {
			return true, &ChainError{RunID: runID, Seq: ev.Seq, Reason: "a hash after events without one"}
		}
		if want := ChainHash(prev, ev); ev.Hash != want {
			return true, &ChainError{RunID: runID, Seq: ev.Seq, Reason: "its hash does not match its contents and the previous hash (edited, inserted or reordered)"}
		}
		prev = ev.Hash
	}
	if last != "" && prev != last {
		n := uint64(len(evs))
		return true, &ChainError{RunID: runID, Seq: n + 1, Reason: "the run record's last hash is not the last event's (events removed from the end?)"}
	}
	return prev != "", nil
}
