package postgres

import (
	"errors"
	"sync/atomic"

	"github.com/jackc/pgx/v5"
)

// sendBuf is the buffer a connection's pipelines are written into. pgx's
// frontend writes each pipeline into a buffer that it drops after any send
// over 1 KiB, and grows a new one, by appending, for the next: for a step's
// pipeline (about 4 KiB) that was a fifth of the bytes docket allocated per
// step, and as large a share of its garbage collections.
// Sent first in a pipeline, sendBuf hands the frontend this connection's
// buffer to append to instead (Encode appends nothing: the frontend's bytes
// so far are copied over). Each buffer belongs to one server connection
// (its CustomData), as the frontend keeps using it until it drops it.
type sendBuf struct{ b []byte }

// noSendBuf turns sendBuf off (tests measure what it saves).
var noSendBuf atomic.Bool

// sendBufSize holds a step's pipeline; a larger one grows past it as
// before.
const sendBufSize = 8 << 10

func (m *sendBuf) Frontend() {}

func (m *sendBuf) Decode([]byte) error { return errors.New("postgres: sendBuf is not a message") }

func (m *sendBuf) Encode(dst []byte) ([]byte, error) {
	if cap(dst) >= cap(m.b) {
		return dst, nil
	}
	return append(m.b[:0], dst...), nil
}

// primeSend makes conn's next pipeline go into the connection's own
// buffer (sendBuf).
func primeSend(conn *pgx.Conn) {
	if noSendBuf.Load() {
		return
	}
	pc := conn.PgConn()
	data := pc.CustomData()
	m, _ := data["docket.sendbuf"].(*sendBuf)
	if m == nil {
		m = &sendBuf{b: make([]byte, 0, sendBufSize)}
		data["docket.sendbuf"] = m
	}
	pc.Frontend().Send(m)
}
