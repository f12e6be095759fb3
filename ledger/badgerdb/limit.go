package badgerdb

import (
	"encoding/json"

	"github.com/docketrun/docket/ledger"
)

// Tool limits (ledger/limit.go): one JSON record per tool, written by the
// committer in the same Badger transaction as the claim or outcome that
// changes it. The directory lock makes this process the only writer, so a
// slot owned by another incarnation belongs to a process that is gone.
const kindLimit = 'l' // l\0<tool> -> ledger.LimitRecord (JSON)

var _ ledger.LimitTx = (*batch)(nil)

func limitKey(tool string) []byte { return simpleKey(kindLimit, tool) }

func decodeLimit(b []byte) (ledger.LimitRecord, error) {
	return decodeJSON[ledger.LimitRecord]("tool limit", b)
}

// Limit returns a tool's limiter record as this batch sees it (ledger.LimitTx).
func (b *batch) Limit(tool string) (ledger.LimitRecord, bool, error) {
	return getRecord(b, limitKey(tool), decodeLimit)
}

// PutLimit writes a tool's limiter record (ledger.LimitTx).
func (b *batch) PutLimit(r ledger.LimitRecord) error {
	return putRecord(b, limitKey(r.Tool), r, encodeLimit)
}

func encodeLimit(r ledger.LimitRecord) ([]byte, error) { return json.Marshal(r) }
