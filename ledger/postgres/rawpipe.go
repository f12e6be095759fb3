package postgres

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgproto3"
	"github.com/jackc/pgx/v5/pgtype"
)

// A commit's pipeline, written by this package rather than by pgx's
// SendBatch.
//
// Before every write pgx arms a 15 ms timer (it guards against a write that
// blocks while the server blocks writing results back to us) and stops it
// after. Arming a timer due before anything else the Go runtime waits for
// makes it wake a thread (wakep), which finds nothing to do and sleeps
// again: on a chain of steps, one wasted thread wake per step, at the
// moment PostgreSQL needs the CPU to run the pipeline just sent. Without
// the timer a chain's step took a tenth less time on a 2-core machine
// (evals/bench/README.md). A commit's pipeline cannot block that way: it
// is small (rawMaxBytes, far below the buffers of the server's socket, so
// the write ends even while the server is busy writing results, a
// document's rows among them), so it is written here, with the statements
// pgx prepared on the connection, and its results are read after, through
// pgx's ReceiveMessage. A larger pipeline, or a connection that may not
// prepare statements (a pooler in transaction mode, or another exec mode
// asked for in the URL), takes SendBatch.

// rawMaxBytes bounds the bind parameters of a pipeline written here.
const rawMaxBytes = 32 << 10

// rawOK reports whether b may be sent by sendRaw on conn.
func (s *Store) rawOK(conn *pgx.Conn, b *pgx.Batch) bool {
	if s.pooled || noRaw.Load() || conn.Config().DefaultQueryExecMode != pgx.QueryExecModeCacheStatement {
		return false
	}
	n := 0
	for _, q := range b.QueuedQueries {
		for _, a := range q.Arguments {
			switch v := a.(type) {
			case []byte:
				n += len(v)
			case string:
				n += len(v)
			case []string:
				for _, x := range v {
					n += len(x) + 4
				}
			default:
				n += 16
			}
		}
	}
	return n <= rawMaxBytes
}

// sendRaw sends b's statements in one pipeline (Bind and Execute each,
// then Sync) and returns its results, which must be read in order and then
// closed. Preparing a statement the connection has not prepared yet is a
// round trip of its own, before anything of the pipeline is sent.
func sendRaw(ctx context.Context, conn *pgx.Conn, b *pgx.Batch) (*rawResults, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	pc := conn.PgConn()
	r := &rawResults{ctx: ctx, conn: conn, sds: make([]*pgconn.StatementDescription, len(b.QueuedQueries))}
	for i, q := range b.QueuedQueries {
		sd, err := conn.Prepare(ctx, rawName(q.SQL), q.SQL)
		if err != nil {
			if pgCode(err) != "" {
				return nil, err // the server's answer
			}
			return nil, &rawError{err, true}
		}
		r.sds[i] = sd
	}
	if countingTrips {
		count(ctx)
	}
	primeSend(conn)
	fe := pc.Frontend()
	// The connection's builder keeps its buffers from one pipeline to the
	// next; each Bind is copied into the frontend's buffer as it is sent.
	data := pc.CustomData()
	eqb, _ := data["docket.eqb"].(*pgx.ExtendedQueryBuilder)
	if eqb == nil {
		eqb = &pgx.ExtendedQueryBuilder{}
		data["docket.eqb"] = eqb
	}
	for i, q := range b.QueuedQueries {
		if err := eqb.Build(conn.TypeMap(), r.sds[i], q.Arguments); err != nil {
			// Part of the pipeline is in the frontend's buffer: the
			// connection goes (nothing was written to it).
			closeConn(pc)
			return nil, fmt.Errorf("postgres: statement %d of the pipeline: %w", i, err)
		}
		fe.SendBind(&pgproto3.Bind{PreparedStatement: r.sds[i].Name, ParameterFormatCodes: eqb.ParamFormats,
			Parameters: eqb.ParamValues, ResultFormatCodes: eqb.ResultFormats})
		fe.SendExecute(&pgproto3.Execute{})
	}
	fe.SendSync(&pgproto3.Sync{})
	// A context that ends while the pipeline is under way ends the reads
	// and writes on the connection at once (then closed: rawResults.Close).
	nc := pc.Conn()
	r.unwatch = context.AfterFunc(ctx, func() { nc.SetDeadline(time.Unix(1, 0)) })
	if err := fe.Flush(); err != nil {
		r.unwatch()
		closeConn(pc)
		if pgconn.SafeToRetry(err) {
			return nil, err // nothing was written
		}
		return nil, &rawError{err, false}
	}
	rawSends.Add(1)
	return r, nil
}

// noRaw turns sendRaw off: every pipeline takes SendBatch (tests measure
// and compare); rawSends counts the pipelines sendRaw wrote.
var (
	noRaw    atomic.Bool
	rawSends atomic.Int64
)

// rawNames are the names sendRaw prepares its statements under, by SQL
// (short: every Bind carries its statement's name).
var rawNames sync.Map

func rawName(sql string) string {
	if n, ok := rawNames.Load(sql); ok {
		return n.(string)
	}
	h := sha256.Sum256([]byte(sql))
	n := "docket_" + hex.EncodeToString(h[:12])
	rawNames.Store(sql, n)
	return n
}

// rawError is a failure of the connection, not an answer of the server:
// safe to try again when nothing of the pipeline was written (preparing
// its statements), never once it began to be written (its outcome, COMMIT
// included, is unknown, whatever the error under it says).
type rawError struct {
	err  error
	safe bool
}

func (e *rawError) Error() string     { return e.err.Error() }
func (e *rawError) Unwrap() error     { return e.err }
func (e *rawError) SafeToRetry() bool { return e.safe }

// results are a pipeline's results, read in order, then closed: what
// commit reads of pgx's BatchResults and of rawResults.
type results interface {
	Exec() (pgconn.CommandTag, error)
	Query() (pgx.Rows, error)
	QueryRow() pgx.Row
	Close() error
}

// rawResults reads a pipeline's results.
type rawResults struct {
	ctx     context.Context
	conn    *pgx.Conn
	sds     []*pgconn.StatementDescription
	next    int   // the statement whose result is read next
	err     error // the first error: the server's, or the connection's
	synced  bool  // ReadyForQuery was read
	unwatch func() bool
}

var (
	_ results = (*rawResults)(nil)
	_ results = pgx.BatchResults(nil)
)

// receive reads the next message, or fails the pipeline.
func (r *rawResults) receive() (pgproto3.BackendMessage, error) {
	msg, err := r.conn.PgConn().ReceiveMessage(context.Background())
	if err != nil {
		if r.ctx.Err() != nil {
			err = fmt.Errorf("%w (%w)", r.ctx.Err(), err)
		}
		r.fail(&rawError{err, false})
		return nil, r.err
	}
	return msg, nil
}

func (r *rawResults) fail(err error) {
	if r.err == nil {
		r.err = err
	}
}

// result reads the next statement's result to its end, with copies of
// the values of its first keep rows (-1: all of them).
func (r *rawResults) result(keep int) (sd *pgconn.StatementDescription, rows [][][]byte, tag pgconn.CommandTag, err error) {
	if r.err != nil {
		return nil, nil, tag, r.err
	}
	if r.next >= len(r.sds) {
		return nil, nil, tag, errors.New("postgres: no more results in the pipeline")
	}
	sd = r.sds[r.next]
	r.next++
	for {
		msg, err := r.receive()
		if err != nil {
			return nil, nil, tag, err
		}
		switch m := msg.(type) {
		case *pgproto3.BindComplete:
		case *pgproto3.DataRow:
			if keep < 0 || len(rows) < keep {
				row := make([][]byte, len(m.Values))
				for i, v := range m.Values {
					if v != nil {
						row[i] = append([]byte{}, v...)
					}
				}
				rows = append(rows, row)
			}
		case *pgproto3.CommandComplete:
			return sd, rows, pgconn.NewCommandTag(string(m.CommandTag)), nil
		case *pgproto3.EmptyQueryResponse:
			return sd, rows, tag, nil
		case *pgproto3.ErrorResponse:
			r.fail(pgconn.ErrorResponseToPgError(m))
			return nil, nil, tag, r.err
		case *pgproto3.ReadyForQuery:
			r.synced = true
			r.fail(errors.New("postgres: the pipeline ended before its results"))
			return nil, nil, tag, r.err
		}
		// Notices, notifications and parameter statuses: pgx's handlers
		// saw them.
	}
}

// rows are a statement's rows read by result, with its result columns in
// the formats the Bind asked for.
func (r *rawResults) rows(sd *pgconn.StatementDescription, rows [][][]byte, tag pgconn.CommandTag, err error) *rawRows {
	w := &rawRows{conn: r.conn, rows: rows, tag: tag, err: err}
	if sd != nil {
		w.fields = make([]pgconn.FieldDescription, len(sd.Fields))
		copy(w.fields, sd.Fields)
		tm := r.conn.TypeMap()
		for i := range w.fields {
			w.fields[i].Format = tm.FormatCodeForOID(w.fields[i].DataTypeOID)
		}
	}
	return w
}

func (r *rawResults) Exec() (pgconn.CommandTag, error) {
	_, _, tag, err := r.result(0)
	return tag, err
}

// Query reads the whole result (a document's rows) before it returns.
func (r *rawResults) Query() (pgx.Rows, error) {
	w := r.rows(r.result(-1))
	return w, w.err
}

func (r *rawResults) QueryRow() pgx.Row {
	w := r.rows(r.result(1))
	w.one = true
	return w
}

// Close reads what is left of the pipeline, to its ReadyForQuery, and
// returns its first error. After a failure of the connection, or a context
// that ended, the connection is closed (the pool drops it).
func (r *rawResults) Close() error {
	// After a server's error the connection is still in step: read up to
	// its ReadyForQuery (the statements after the error were skipped).
	var re *rawError
	for !r.synced && !errors.As(r.err, &re) {
		msg, err := r.receive()
		if err != nil {
			break
		}
		switch m := msg.(type) {
		case *pgproto3.ErrorResponse:
			r.fail(pgconn.ErrorResponseToPgError(m))
		case *pgproto3.ReadyForQuery:
			r.synced = true
		}
	}
	// Its deadline is set, it broke, or a statement it prepared no longer
	// fits the tables (another node upgraded them): the pool drops it, and
	// a new connection prepares them again.
	code := pgCode(r.err)
	if fired := !r.unwatch(); fired || errors.As(r.err, &re) || code == "0A000" || code == "26000" {
		closeConn(r.conn.PgConn())
	}
	return r.err
}

// closeConn closes a connection that is out of step (the pool drops it),
// waiting at most a second for a broken one.
func closeConn(pc *pgconn.PgConn) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	pc.Close(ctx)
}

// rawRows are a statement's rows, read (pgx.Rows; as a pgx.Row, the
// first).
type rawRows struct {
	conn   *pgx.Conn
	fields []pgconn.FieldDescription
	rows   [][][]byte
	tag    pgconn.CommandTag
	err    error
	at     int  // 1 + the current row (0: before the first)
	one    bool // a QueryRow's
}

var _ pgx.Rows = (*rawRows)(nil)

func (w *rawRows) Close()                                       {}
func (w *rawRows) Err() error                                   { return w.err }
func (w *rawRows) CommandTag() pgconn.CommandTag                { return w.tag }
func (w *rawRows) FieldDescriptions() []pgconn.FieldDescription { return w.fields }
func (w *rawRows) Conn() *pgx.Conn                              { return w.conn }
func (w *rawRows) TypeMap() *pgtype.Map                         { return w.conn.TypeMap() }

func (w *rawRows) Next() bool {
	if w.err != nil || w.at >= len(w.rows) {
		return false
	}
	w.at++
	return true
}

func (w *rawRows) RawValues() [][]byte {
	if w.at == 0 {
		return nil
	}
	return w.rows[w.at-1]
}

// Scan scans the current row; for a QueryRow's, its first (pgx.ErrNoRows:
// none).
func (w *rawRows) Scan(dest ...any) error {
	if w.one {
		if w.err != nil {
			return w.err
		}
		if len(w.rows) == 0 {
			return pgx.ErrNoRows
		}
		w.at = 1
	}
	if w.at == 0 {
		return errors.New("postgres: Scan before Next")
	}
	return pgx.ScanRow(w.conn.TypeMap(), w.fields, w.rows[w.at-1], dest...)
}

func (w *rawRows) Values() ([]any, error) {
	vals := make([]any, len(w.fields))
	dest := make([]any, len(vals))
	for i := range vals {
		dest[i] = &vals[i]
	}
	return vals, w.Scan(dest...)
}
