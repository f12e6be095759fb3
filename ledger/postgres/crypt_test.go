package postgres_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"reflect"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5"

	"github.com/docketrun/docket/ledger"
	"github.com/docketrun/docket/ledger/ledgertest"
	"github.com/docketrun/docket/ledger/masterkey"
	"github.com/docketrun/docket/ledger/postgres"
	"github.com/docketrun/docket/plan"
)

// The conformance suite passes on an encrypted ledger: the rules that
// compare args, outputs and errors (identical rewrites, the claim's decided
// args, approvals bound to an args hash, the audit chain) work on the
// values as they were before sealing.
func TestConformanceEncrypted(t *testing.T) {
	kr := postgres.NewTestKeyring(t, 2)
	ledgertest.Run(t, func(t *testing.T, c ledgertest.Config) ledger.Store {
		return open(t, postgres.Config{Schema: schemaFor("enc" + c.Dir), Clock: c.Clock, Keyring: kr,
			SubscriberBuffer: c.SubscriberBuffer, MaxOutputBytes: c.MaxOutputBytes})
	}, ledgertest.Options{Durable: true})
}

const pgSecret = "sk-live-PGsecret-93e1"

// recordSecretRun records a run whose goal, args, output, error, events and
// a memo hold the secret, a large argument (stored once, as a blob) too.
func recordSecretRun(t *testing.T, s ledger.Store, runID string) {
	ledgertest.RecordSecret(t, s, runID, pgSecret, 70<<10)
}

// pgState is what a run reads back as.
type pgState struct {
	Doc    ledger.RunDoc
	Plan   *plan.Plan
	Events []ledger.Event
	Keys   []ledger.KeyRecord
}

func readPGState(t *testing.T, s ledger.Store, runID string) pgState {
	t.Helper()
	ctx := context.Background()
	var st pgState
	var err error
	if st.Doc, err = s.Doc(ctx, runID); err != nil {
		t.Fatalf("Doc %s: %v", runID, err)
	}
	if st.Plan, err = s.Plan(ctx, runID, 0); err != nil {
		t.Fatalf("Plan %s: %v", runID, err)
	}
	if st.Events, err = s.Events(ctx, runID, 0, 0); err != nil {
		t.Fatalf("Events %s: %v", runID, err)
	}
	for _, a := range st.Doc.Actions {
		rec, err := s.Key(ctx, a.Key)
		if err != nil {
			t.Fatalf("Key: %v", err)
		}
		st.Keys = append(st.Keys, rec)
	}
	return st
}

// rawHolding lists the columns of the schema's tables whose raw bytes hold
// s (every row of every table, each column cast to text).
func rawHolding(t *testing.T, schema, s string) []string {
	t.Helper()
	ctx := context.Background()
	conn := rawConn(t)
	defer conn.Close(ctx)
	rows, err := conn.Query(ctx, `SELECT table_name, column_name, data_type FROM information_schema.columns WHERE table_schema = $1`, schema)
	if err != nil {
		t.Fatal(err)
	}
	type col struct{ table, name, typ string }
	var cols []col
	for rows.Next() {
		var c col
		if err := rows.Scan(&c.table, &c.name, &c.typ); err != nil {
			t.Fatal(err)
		}
		cols = append(cols, c)
	}
	rows.Close()
	var found []string
	needle := []byte(s)
	for _, c := range cols {
		expr := pgx.Identifier{c.name}.Sanitize() + "::text"
		if c.typ == "bytea" {
			expr = "encode(" + pgx.Identifier{c.name}.Sanitize() + ", 'escape')"
		}
		rows, err := conn.Query(ctx, `SELECT `+expr+` FROM `+pgx.Identifier{schema, c.table}.Sanitize())
		if err != nil {
			t.Fatalf("reading %s.%s: %v", c.table, c.name, err)
		}
		for rows.Next() {
			var v *string
			if err := rows.Scan(&v); err != nil {
				t.Fatal(err)
			}
			if v != nil && bytes.Contains([]byte(*v), needle) {
				found = append(found, c.table+"."+c.name)
				break
			}
		}
		rows.Close()
	}
	return found
}

// No column of an encrypted ledger holds the secret (the same run in a
// plain ledger does, so the search can fail); everything reads back as it
// was written; a keyring without the ledger's key, or none, is refused at
// Open with ErrKey before anything is written.
func TestEncryptedColumns(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	plainSchema, encSchema := schemaFor(t.Name()+"plain"), schemaFor(t.Name()+"enc")
	plain := open(t, postgres.Config{Schema: plainSchema})
	recordSecretRun(t, plain, "r1")
	if cols := rawHolding(t, plainSchema, pgSecret); len(cols) < 5 {
		t.Fatalf("a plain ledger holds the secret in only %v: the search cannot fail", cols)
	}

	kr := postgres.NewTestKeyring(t, 1)
	enc := open(t, postgres.Config{Schema: encSchema, Keyring: kr})
	recordSecretRun(t, enc, "r1")
	if cols := rawHolding(t, encSchema, pgSecret); len(cols) > 0 {
		t.Fatalf("the encrypted ledger holds the secret in %v", cols)
	}
	want := readPGState(t, plain, "r1")
	got := readPGState(t, enc, "r1")
	if !strings.Contains(string(got.Doc.Actions[0].Args), pgSecret) || got.Doc.Actions[1].Error == "" {
		t.Fatalf("args or errors do not round-trip: %+v", got.Doc.Actions)
	}
	if !reflect.DeepEqual(got.Plan, want.Plan) || !reflect.DeepEqual(got.Doc.Actions, want.Doc.Actions) || got.Doc.Run.Goal != want.Doc.Run.Goal {
		t.Fatalf("encrypted ledger reads %+v, the plain one %+v", got, want)
	}
	if len(got.Events) != len(want.Events) {
		t.Fatalf("%d events, want %d", len(got.Events), len(want.Events))
	}
	for i := range got.Events {
		if string(got.Events[i].Data) != string(want.Events[i].Data) {
			t.Fatalf("event %d: %s, want %s", i, got.Events[i].Data, want.Events[i].Data)
		}
	}
	for i := range got.Keys {
		g, w := got.Keys[i], want.Keys[i]
		if string(g.Args) != string(w.Args) || string(g.Output) != string(w.Output) || g.Error != w.Error {
			t.Fatalf("key %d: %+v, want %+v", i, g, w)
		}
	}
	if m, err := enc.Memo(ctx, "r1", "m", json.RawMessage(`{"other":1}`)); err != nil || !strings.Contains(string(m), pgSecret) {
		t.Fatalf("memo: %s %v", m, err)
	}
	enc.Close()

	countNodes := func() int {
		conn := rawConn(t)
		defer conn.Close(ctx)
		var n int
		if err := conn.QueryRow(ctx, `SELECT count(*) FROM `+pgx.Identifier{encSchema, "nodes"}.Sanitize()).Scan(&n); err != nil {
			t.Fatal(err)
		}
		return n
	}
	before := countNodes()
	for name, k := range map[string]*masterkey.Keyring{"no key": nil, "another key": postgres.NewTestKeyring(t, 1)} {
		s, err := postgres.Open(ctx, postgres.Config{URL: database(t), Schema: encSchema, Keyring: k})
		if err == nil {
			s.Close()
			t.Fatalf("%s: Open succeeded", name)
		}
		if !errors.Is(err, ledger.ErrKey) {
			t.Fatalf("%s: %v, want ErrKey", name, err)
		}
		if strings.Contains(err.Error(), kr.Current().Hex()) {
			t.Fatalf("the error shows the key: %v", err)
		}
	}
	if after := countNodes(); after != before {
		t.Fatalf("a refused Open registered a node (%d → %d nodes)", before, after)
	}
}

// Rotation: a new current key with the old one kept after it reads what the
// old one sealed and seals new values with the new one; dropping the old
// key while values still use it is refused. A ledger written in plaintext
// before it was encrypted stays readable.
func TestEncryptionRotation(t *testing.T) {
	t.Parallel()
	schema := schemaFor(t.Name())
	plain := open(t, postgres.Config{Schema: schema})
	recordSecretRun(t, plain, "r0")
	want0 := readPGState(t, plain, "r0")
	plain.Close()

	old := postgres.NewTestKeyring(t, 1)
	s1 := open(t, postgres.Config{Schema: schema, Keyring: old})
	if got := readPGState(t, s1, "r0"); !reflect.DeepEqual(got.Plan, want0.Plan) || !reflect.DeepEqual(got.Doc.Actions, want0.Doc.Actions) {
		t.Fatal("plaintext records written before encryption do not read back")
	}
	recordSecretRun(t, s1, "r1")
	want1 := readPGState(t, s1, "r1")
	s1.Close()

	nk, err := masterkey.Generate()
	if err != nil {
		t.Fatal(err)
	}
	rotated, err := masterkey.NewKeyring(nk, old.Current())
	if err != nil {
		t.Fatal(err)
	}
	s2 := open(t, postgres.Config{Schema: schema, Keyring: rotated})
	if got := readPGState(t, s2, "r1"); !reflect.DeepEqual(got.Doc.Actions, want1.Doc.Actions) || !reflect.DeepEqual(got.Plan, want1.Plan) {
		t.Fatal("records of the old key do not read back after rotation")
	}
	recordSecretRun(t, s2, "r2")
	want2 := readPGState(t, s2, "r2")
	s2.Close()

	onlyNew, err := masterkey.NewKeyring(nk)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := postgres.Open(context.Background(), postgres.Config{URL: database(t), Schema: schema, Keyring: onlyNew}); !errors.Is(err, ledger.ErrKey) || !strings.Contains(err.Error(), old.Current().ID()) {
		t.Fatalf("a keyring without the old key: %v, want ErrKey naming it", err)
	}
	s3 := open(t, postgres.Config{Schema: schema, Keyring: rotated})
	if got := readPGState(t, s3, "r2"); !reflect.DeepEqual(got.Doc.Actions, want2.Doc.Actions) {
		t.Fatal("records of the new key do not read back")
	}
	if cols := rawHolding(t, schema, nk.ID()); len(cols) == 0 {
		t.Fatal("no value names the new key")
	}
}
