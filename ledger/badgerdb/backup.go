package badgerdb

import (
	"bufio"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"io"
	"os"
	"path/filepath"

	"github.com/dgraph-io/badger/v4"

	"github.com/docketrun/docket/ledger"
)

// Errors of Backup and Restore, tested with errors.Is.
var (
	// ErrNotEmpty: Restore refuses a target directory that holds anything.
	ErrNotEmpty = errors.New("ledger: restore target directory is not empty")
	// ErrCorrupt: a backup stream is truncated or damaged.
	ErrCorrupt = errors.New("ledger: backup stream is truncated or corrupt")
)

// Backup stream layout. Badger's own backup stream (length-prefixed protobuf
// KV lists) ends at any list boundary, so a stream cut there would load as a
// smaller, valid-looking ledger. It is therefore carried in checksummed
// frames with an end marker:
//
//	header   "DOCKETBK", len(format) u8, format version
//	frame*   length u32 BE (1..backupChunk), CRC-32C u32 BE, bytes
//	end      0 u32, total payload bytes u64 BE
//
// Restore checks each frame before Badger sees its bytes, so Badger parses
// only bytes Backup wrote; a cut or damaged stream is ErrCorrupt.
const (
	backupMagic = "DOCKETBK"
	backupChunk = 1 << 20
)

var castagnoli = crc32.MakeTable(crc32.Castagnoli)

// Backup writes a consistent full backup of the ledger to w: every record as
// of one moment (one Badger read timestamp), so each Apply is in it wholly or
// not at all. Writes may continue meanwhile; Close waits for a running
// Backup. Restore reads the stream back. With Config.Key the stream is
// encrypted with it (backupcrypt.go). Errors: ErrClosed, the context's
// error, w's error.
func (l *Ledger) Backup(ctx context.Context, w io.Writer) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	l.mu.RLock()
	defer l.mu.RUnlock()
	if l.closed {
		return ledger.ErrClosed
	}
	if l.cfg.Key.Valid() {
		// The stream holds every record in plaintext: seal it
		// (backupcrypt.go).
		sw, err := newSealWriter(w, l.cfg.Key)
		if err != nil {
			return err
		}
		if err := l.backup(ctx, sw); err != nil {
			return err
		}
		return sw.Close()
	}
	return l.backup(ctx, w)
}

// backup writes the plain backup stream to w.
func (l *Ledger) backup(ctx context.Context, w io.Writer) error {
	hdr := append([]byte(backupMagic), byte(len(formatVersion)))
	hdr = append(hdr, formatVersion...)
	if _, err := w.Write(hdr); err != nil {
		return fmt.Errorf("ledger: writing backup header: %w", err)
	}
	fw := &frameWriter{ctx: ctx, w: w}
	bw := bufio.NewWriterSize(fw, 256<<10)
	stream := l.db.NewStream()
	stream.LogPrefix = "ledger.Backup"
	// One producer: each producer reads in its own transaction (its own read
	// timestamp), so with several a backup taken during writes would mix
	// moments.
	stream.NumGo = 1
	if _, err := stream.Backup(bw, 0); err != nil {
		if fw.err != nil {
			return fw.err
		}
		return fmt.Errorf("ledger: streaming backup: %w", translate(err))
	}
	if err := bw.Flush(); err != nil {
		if fw.err != nil {
			return fw.err
		}
		return fmt.Errorf("ledger: writing backup: %w", err)
	}
	var end [12]byte
	binary.BigEndian.PutUint64(end[4:], fw.total)
	if _, err := w.Write(end[:]); err != nil {
		return fmt.Errorf("ledger: writing backup trailer: %w", err)
	}
	return nil
}

// frameWriter cuts what it is given into checksummed frames.
type frameWriter struct {
	ctx   context.Context
	w     io.Writer
	total uint64
	err   error
}

func (f *frameWriter) Write(p []byte) (int, error) {
	if f.err != nil {
		return 0, f.err
	}
	n := 0
	for len(p) > 0 {
		if err := f.ctx.Err(); err != nil {
			f.err = err
			return n, err
		}
		c := p[:min(len(p), backupChunk)]
		var h [8]byte
		binary.BigEndian.PutUint32(h[:4], uint32(len(c)))
		binary.BigEndian.PutUint32(h[4:], crc32.Checksum(c, castagnoli))
		if _, err := f.w.Write(h[:]); err != nil {
			f.err = fmt.Errorf("ledger: writing backup: %w", err)
			return n, f.err
		}
		if _, err := f.w.Write(c); err != nil {
			f.err = fmt.Errorf("ledger: writing backup: %w", err)
			return n, f.err
		}
		f.total += uint64(len(c))
		n += len(c)
		p = p[len(c):]
	}
	return n, nil
}

// frameReader returns the payload of a backup's frames, io.EOF only after a
// complete, intact end marker, and ErrCorrupt (or the reader's or context's
// error) otherwise.
type frameReader struct {
	ctx   context.Context
	r     io.Reader
	buf   []byte // the current frame's unread bytes
	total uint64
	done  bool
	err   error
}

func (f *frameReader) Read(p []byte) (int, error) {
	if f.err != nil {
		return 0, f.err
	}
	for len(f.buf) == 0 {
		if f.done {
			return 0, io.EOF
		}
		if err := f.next(); err != nil {
			f.err = err
			return 0, err
		}
	}
	n := copy(p, f.buf)
	f.buf = f.buf[n:]
	return n, nil
}

func (f *frameReader) next() error {
	if err := f.ctx.Err(); err != nil {
		return err
	}
	var h [8]byte
	if err := f.readFull(h[:4], "a frame header"); err != nil {
		return err
	}
	n := binary.BigEndian.Uint32(h[:4])
	if n == 0 {
		var t [8]byte
		if err := f.readFull(t[:], "the end marker"); err != nil {
			return err
		}
		if got := binary.BigEndian.Uint64(t[:]); got != f.total {
			return fmt.Errorf("%w: end marker says %d bytes, read %d", ErrCorrupt, got, f.total)
		}
		var extra [1]byte
		if k, _ := io.ReadFull(f.r, extra[:]); k != 0 {
			return fmt.Errorf("%w: data after the end marker", ErrCorrupt)
		}
		f.done = true
		return nil
	}
	if n > backupChunk {
		return fmt.Errorf("%w: frame of %d bytes at offset %d (at most %d)", ErrCorrupt, n, f.total, backupChunk)
	}
	if err := f.readFull(h[4:], "a frame header"); err != nil {
		return err
	}
	if cap(f.buf) < int(n) {
		f.buf = make([]byte, n)
	}
	f.buf = f.buf[:n]
	if err := f.readFull(f.buf, "a frame"); err != nil {
		return err
	}
	if crc32.Checksum(f.buf, castagnoli) != binary.BigEndian.Uint32(h[4:]) {
		return fmt.Errorf("%w: checksum mismatch in the frame at offset %d", ErrCorrupt, f.total)
	}
	f.total += uint64(n)
	return nil
}

func (f *frameReader) readFull(b []byte, what string) error {
	_, err := io.ReadFull(f.r, b)
	switch {
	case err == nil:
		return nil
	case errors.Is(err, io.EOF), errors.Is(err, io.ErrUnexpectedEOF):
		return fmt.Errorf("%w: stream ends inside %s after %d bytes of data (truncated?)", ErrCorrupt, what, f.total)
	}
	return fmt.Errorf("ledger: reading backup: %w", err)
}

// readBackupHeader checks the magic and the format version.
func readBackupHeader(r io.Reader) error {
	var h [len(backupMagic) + 1]byte
	if _, err := io.ReadFull(r, h[:]); err != nil {
		if errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) {
			return fmt.Errorf("%w: not a docket ledger backup (stream shorter than its header)", ledger.ErrFormat)
		}
		return fmt.Errorf("ledger: reading backup header: %w", err)
	}
	if string(h[:len(backupMagic)]) != backupMagic {
		return fmt.Errorf("%w: not a docket ledger backup (bad magic %q)", ledger.ErrFormat, h[:len(backupMagic)])
	}
	v := make([]byte, h[len(backupMagic)])
	if _, err := io.ReadFull(r, v); err != nil {
		return fmt.Errorf("%w: backup header cut short", ErrCorrupt)
	}
	if err := formatError("the backup", string(v)); err != nil {
		return err
	}
	return nil
}

// Restore makes a ledger in dir from a stream written by Backup. dir must not
// exist or be empty: an existing ledger is never overwritten. The ledger is
// built in a temporary sibling directory, synced, and renamed to dir only when
// the whole stream loaded, so a failed restore leaves no ledger behind.
// cfg.Dir is ignored; cfg's other fields are as for Open: with cfg.Key the
// new ledger is encrypted with it, and an encrypted backup is decrypted with
// it (a plain backup restored with a key makes an encrypted ledger: how a
// plain ledger is encrypted). Errors: ledger.ErrKey (an encrypted backup
// without its key), ErrNotEmpty,
// ErrFormat (not a backup, or another format version), ErrCorrupt (truncated
// or damaged), ErrInvalid, the context's error, r's error.
func Restore(ctx context.Context, dir string, r io.Reader, cfg Config) (err error) {
	if dir == "" {
		return fmt.Errorf("%w: restore needs a target directory", ledger.ErrInvalid)
	}
	dir = filepath.Clean(dir)
	cfg.Dir = dir
	cfg = cfg.WithDefaults()
	if err := cfg.validate(); err != nil {
		return err
	}
	if err := ctx.Err(); err != nil {
		return err
	}
	if err := checkEmptyDir(dir); err != nil {
		return err
	}
	br := bufio.NewReader(r)
	if magic, _ := br.Peek(len(sealMagic)); string(magic) == sealMagic {
		if r, err = openBackup(br, cfg.Key); err != nil {
			return err
		}
	} else {
		r = br
	}
	if err := readBackupHeader(r); err != nil {
		return err
	}
	parent := filepath.Dir(dir)
	if err := os.MkdirAll(parent, 0o700); err != nil {
		return fmt.Errorf("ledger: creating %s: %w", parent, err)
	}
	tmp, err := os.MkdirTemp(parent, "."+filepath.Base(dir)+".restore-")
	if err != nil {
		return fmt.Errorf("ledger: creating restore directory: %w", err)
	}
	defer func() {
		if err != nil {
			os.RemoveAll(tmp)
		}
	}()
	cfg.Dir = tmp
	if err = loadBackup(ctx, r, cfg); err != nil {
		return err
	}
	if err = syncDir(tmp); err != nil {
		return err
	}
	if err = moveInto(tmp, dir); err != nil {
		return err
	}
	return syncDir(parent)
}

// loadBackup loads the stream after its header into a new Badger database
// in cfg.Dir, checks that it is a ledger of this format and syncs it.
// Errors: ErrCorrupt (truncated or damaged, or no end marker), ErrFormat,
// the context's error, r's error.
func loadBackup(ctx context.Context, r io.Reader, cfg Config) error {
	log := cfg.Logger.With("component", "ledger")
	db, err := badger.Open(badgerOptions(cfg, log))
	if err != nil {
		return fmt.Errorf("ledger: opening restore directory %s: %w", cfg.Dir, err)
	}
	fr := &frameReader{ctx: ctx, r: r}
	err = db.Load(fr, 16)
	if err == nil {
		err = checkRestored(db)
	}
	if err == nil {
		if err = db.Sync(); err != nil {
			err = fmt.Errorf("ledger: syncing the restored ledger: %w", err)
		}
	}
	if cerr := db.Close(); err == nil && cerr != nil {
		err = fmt.Errorf("ledger: closing the restored ledger: %w", cerr)
	}
	if err != nil {
		if fr.err != nil {
			return fr.err
		}
		if !fr.done && !errors.Is(err, ErrCorrupt) {
			// Badger stopped on bytes that passed their checksums.
			return fmt.Errorf("%w: loading: %v", ErrCorrupt, err)
		}
		return err
	}
	if !fr.done {
		return fmt.Errorf("%w: stream ends without its end marker", ErrCorrupt)
	}
	return nil
}

// moveInto renames the restored ledger tmp to dir, which must not exist
// or be empty.
func moveInto(tmp, dir string) error {
	err := os.Rename(tmp, dir)
	if err == nil {
		return nil
	}
	// Some systems do not rename onto an existing (empty) directory.
	if rerr := os.Remove(dir); rerr == nil {
		err = os.Rename(tmp, dir)
	} else if !errors.Is(rerr, os.ErrNotExist) {
		return fmt.Errorf("%w: %s (it changed during the restore): %v", ErrNotEmpty, dir, rerr)
	}
	if err != nil {
		return fmt.Errorf("ledger: moving the restored ledger into %s: %w", dir, err)
	}
	return nil
}

// checkRestored makes sure the loaded data is a ledger of this format.
func checkRestored(db *badger.DB) error {
	var v []byte
	err := db.View(func(txn *badger.Txn) error {
		item, err := txn.Get(metaFormatKey)
		if err != nil {
			return err
		}
		v, err = item.ValueCopy(nil)
		return err
	})
	if errors.Is(err, badger.ErrKeyNotFound) {
		return fmt.Errorf("%w: the backup holds no format record", ErrCorrupt)
	}
	if err != nil {
		return fmt.Errorf("ledger: checking the restored ledger: %w", err)
	}
	if err := formatError("the backup's data", string(v)); err != nil {
		return err
	}
	return nil
}

func checkEmptyDir(dir string) error {
	f, err := os.Open(dir)
	if errors.Is(err, os.ErrNotExist) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("ledger: checking restore target: %w", err)
	}
	defer f.Close()
	st, err := f.Stat()
	if err != nil {
		return fmt.Errorf("ledger: checking restore target: %w", err)
	}
	if !st.IsDir() {
		return fmt.Errorf("%w: %s is a file", ErrNotEmpty, dir)
	}
	names, err := f.Readdirnames(1)
	if len(names) > 0 {
		return fmt.Errorf("%w: %s (restore never overwrites; choose a new or empty directory)", ErrNotEmpty, dir)
	}
	if err != nil && !errors.Is(err, io.EOF) {
		return fmt.Errorf("ledger: checking restore target: %w", err)
	}
	return nil
}

func syncDir(dir string) error {
	f, err := os.Open(dir)
	if err != nil {
		return fmt.Errorf("ledger: syncing %s: %w", dir, err)
	}
	defer f.Close()
	if err := f.Sync(); err != nil {
		return fmt.Errorf("ledger: syncing %s: %w", dir, err)
	}
	return nil
}
