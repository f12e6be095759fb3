package postgres

import (
	"encoding/json"
	"errors"
	"fmt"

	"github.com/jackc/pgx/v5"

	"github.com/docketrun/docket/ledger"
)

// Tool limits (ledger/limit.go) live in the table tool_limits, one row per
// tool holding its ledger.LimitRecord as JSON, read FOR UPDATE in the
// Apply's transaction: claims and outcomes of one tool take turns on every
// node. An Apply's first pipeline also locks the rows of the tools of the
// keys it names (limitsOfKeys), so an outcome gives its slot back without
// another round trip; a claim of a new key reads its tool's row when it
// carries limits. A slot's owner is judged gone by its node lease
// (tx.OwnerGone), so a killed node's slots stop counting once its lease
// expired.

var _ ledger.LimitTx = (*tx)(nil)

const (
	// The tools of the keys named, sorted, then each tool's row looked up
	// and locked by its primary key (as queries.go's lockKeys: a lookup
	// per id whatever the prepared statement's plan).
	limitsOfKeys = `SELECT l.* FROM (SELECT DISTINCT k.tool FROM unnest($1::text[]) AS x (key),
			LATERAL (SELECT tool FROM {S}.keys WHERE key = x.key OFFSET 0) AS k ORDER BY 1) AS w,
		LATERAL (SELECT tool, record FROM {S}.tool_limits WHERE tool = w.tool FOR UPDATE) AS l`
	limitForUpdate = `SELECT tool, record FROM {S}.tool_limits WHERE tool = $1 FOR UPDATE`
	insertLimit    = `INSERT INTO {S}.tool_limits (tool, record) VALUES ($1, $2)`
	updateLimit    = `UPDATE {S}.tool_limits SET record = $2 WHERE tool = $1`
)

type limitEntry struct {
	rec   ledger.LimitRecord
	found bool // a row exists (UPDATE, not INSERT)
}

func (t *tx) limitCache() map[string]*limitEntry {
	if t.lim == nil {
		t.lim = map[string]*limitEntry{}
	}
	return t.lim
}

func scanLimit(row pgx.Row, e *limitEntry) error {
	var tool string
	var raw []byte
	if err := row.Scan(&tool, &raw); err != nil {
		return err
	}
	if err := json.Unmarshal(raw, &e.rec); err != nil {
		return fmt.Errorf("%w: tool limit of %q: %v", ledger.ErrFormat, tool, err)
	}
	e.rec.Tool, e.found = tool, true
	return nil
}

// queueLimitReads adds the lock of the tools of keys to begin's pipeline.
func (t *tx) queueLimitReads(b *pgx.Batch, keys []string) {
	b.Queue(t.s.bq(limitsOfKeys), keys)
}

// cacheLimits reads the result of queueLimitReads: the tools of the keys
// found (cached by begin) without a row are cached as absent.
func (t *tx) cacheLimits(br pgx.BatchResults, keys []string) error {
	c := t.limitCache()
	if err := eachRow(br, func(rows pgx.Rows) error {
		e := &limitEntry{}
		if err := scanLimit(rows, e); err != nil {
			return err
		}
		c[e.rec.Tool] = e
		return nil
	}); err != nil {
		return err
	}
	for _, k := range keys {
		if e, ok := t.keys[k]; ok && e.found {
			if _, ok := c[e.rec.Tool]; !ok {
				c[e.rec.Tool] = &limitEntry{}
			}
		}
	}
	return nil
}

// Limit returns a tool's limiter record, locked for this transaction
// (ledger.LimitTx).
func (t *tx) Limit(tool string) (ledger.LimitRecord, bool, error) {
	c := t.limitCache()
	if e, ok := c[tool]; ok {
		return e.rec, e.found, nil
	}
	e := &limitEntry{}
	if t.spec {
		if t.s.recent.hasLimit(tool) {
			return ledger.LimitRecord{}, false, t.missed()
		}
		// Taken as absent; the pipeline checks that it is.
		t.ver.limits = append(t.ver.limits, tool)
		c[tool] = e
		return e.rec, false, nil
	}
	err := scanLimit(t.ptx.QueryRow(t.ctx, t.s.bq(limitForUpdate), tool), e)
	if err != nil && !errors.Is(err, pgx.ErrNoRows) {
		return ledger.LimitRecord{}, false, err
	}
	c[tool] = e
	return e.rec, e.found, nil
}

// PutLimit writes a tool's limiter record (ledger.LimitTx).
func (t *tx) PutLimit(r ledger.LimitRecord) error {
	if _, _, err := t.Limit(r.Tool); err != nil {
		return err
	}
	raw, err := json.Marshal(r)
	if err != nil {
		return err
	}
	e := t.limitCache()[r.Tool]
	if e.found {
		t.batch.Queue(t.s.bq(updateLimit), r.Tool, raw)
	} else {
		t.batch.Queue(t.s.bq(insertLimit), r.Tool, raw)
	}
	e.rec, e.found = r, true
	return nil
}
