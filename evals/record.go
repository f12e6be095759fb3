package evals

import (
	"bytes"
	"compress/gzip"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"sync"
)

// Exchange is one recorded request to the model and its answer. Only the
// method, the path and the bodies are kept: headers (Authorization above
// all) are never written.
type Exchange struct {
	Method   string          `json:"method"`
	Path     string          `json:"path"`
	Request  json.RawMessage `json:"request"`
	Status   int             `json:"status"`
	Response json.RawMessage `json:"response"`
	// ResponseText holds a body that is not JSON.
	ResponseText string `json:"response_text,omitempty"`
}

type caseKey struct{}

// caseTag names the case and try a request belongs to.
type caseTag struct {
	id  string
	try int
}

// WithCase tags ctx with the case and try (1-based) that the model requests
// made under it belong to; the Recorder and the Replayer file exchanges by it.
func WithCase(ctx context.Context, id string, try int) context.Context {
	return context.WithValue(ctx, caseKey{}, caseTag{id, try})
}

func tagOf(ctx context.Context) (caseTag, bool) {
	t, ok := ctx.Value(caseKey{}).(caseTag)
	return t, ok
}

// recordingFile is where a case's exchanges live: DIR/<id>.json.gz for the
// first try, DIR/<id>.try<N>.json.gz for later ones (gzip-compressed JSON:
// every request repeats the tool definitions; zcat shows them). Ids are
// made file-safe.
func recordingFile(dir string, t caseTag) string {
	safe := []byte(t.id)
	for i, c := range safe {
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '-' || c == '_' || c == '.') {
			safe[i] = '_'
		}
	}
	name := string(safe)
	if t.try > 1 {
		name += fmt.Sprintf(".try%d", t.try)
	}
	return filepath.Join(dir, name+".json.gz")
}

// Recorder is an http.RoundTripper that sends requests through Next and keeps
// every exchange, per case and try (see WithCase); Save writes a case's
// exchanges to DIR. Give it to planner.Config.HTTPClient.
type Recorder struct {
	Dir  string
	Next http.RoundTripper // default http.DefaultTransport

	mu  sync.Mutex
	got map[caseTag][]Exchange
}

// NewRecorder records into dir (created if needed).
func NewRecorder(dir string, next http.RoundTripper) (*Recorder, error) {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, fmt.Errorf("recordings directory: %w", err)
	}
	return &Recorder{Dir: dir, Next: next, got: map[caseTag][]Exchange{}}, nil
}

// RoundTrip implements http.RoundTripper.
func (r *Recorder) RoundTrip(req *http.Request) (*http.Response, error) {
	tag, ok := tagOf(req.Context())
	if !ok {
		return nil, errors.New("evals: recorder: request without a case (use evals.WithCase)")
	}
	body, err := readBody(req)
	if err != nil {
		return nil, err
	}
	next := r.Next
	if next == nil {
		next = http.DefaultTransport
	}
	resp, err := next.RoundTrip(req)
	if err != nil {
		return nil, err // transport failures are not recorded: replay never sees them
	}
	rb, err := io.ReadAll(resp.Body)
	resp.Body.Close()
	if err != nil {
		return nil, err
	}
	resp.Body = io.NopCloser(bytes.NewReader(rb))
	ex := Exchange{Method: req.Method, Path: req.URL.Path, Request: jsonOrString(body), Status: resp.StatusCode}
	if json.Valid(rb) {
		ex.Response = compactJSON(rb)
	} else {
		ex.ResponseText = string(rb)
	}
	r.mu.Lock()
	r.got[tag] = append(r.got[tag], ex)
	r.mu.Unlock()
	return resp, nil
}

// Save writes the exchanges of one case and try and forgets them. A case
// that made no request writes an empty list (so replay knows it made none).
func (r *Recorder) Save(id string, try int) error {
	tag := caseTag{id, try}
	r.mu.Lock()
	exs := r.got[tag]
	delete(r.got, tag)
	r.mu.Unlock()
	if exs == nil {
		exs = []Exchange{}
	}
	data, err := json.MarshalIndent(exs, "", " ")
	if err != nil {
		return err
	}
	var buf bytes.Buffer
	zw, _ := gzip.NewWriterLevel(&buf, gzip.BestCompression)
	zw.Write(append(data, '\n'))
	if err := zw.Close(); err != nil {
		return err
	}
	return os.WriteFile(recordingFile(r.Dir, tag), buf.Bytes(), 0o644)
}

// Replayer is an http.RoundTripper that answers from recordings without any
// network: each case and try's requests must match its recorded requests in
// order (bodies compared as JSON). A request that does not match fails with
// the difference.
type Replayer struct {
	Dir string

	mu   sync.Mutex
	next map[caseTag]int
	recs map[caseTag][]Exchange // while a case is being replayed
	done map[caseTag]int        // cases whose recordings were all used: how many
}

// NewReplayer replays from dir.
func NewReplayer(dir string) (*Replayer, error) {
	if st, err := os.Stat(dir); err != nil || !st.IsDir() {
		return nil, fmt.Errorf("recordings directory %s: not found (record first with --record %s)", dir, dir)
	}
	return &Replayer{Dir: dir, next: map[caseTag]int{}, recs: map[caseTag][]Exchange{}, done: map[caseTag]int{}}, nil
}

// ErrNoRecording is wrapped by replay failures: no recording, or a request
// that differs from the recorded one.
var ErrNoRecording = errors.New("no matching recording")

// RoundTrip implements http.RoundTripper.
func (p *Replayer) RoundTrip(req *http.Request) (*http.Response, error) {
	tag, ok := tagOf(req.Context())
	if !ok {
		return nil, errors.New("evals: replayer: request without a case (use evals.WithCase)")
	}
	body, err := readBody(req)
	if err != nil {
		return nil, err
	}
	// A case's requests come one after another (one planning session per
	// case and try), so only the maps need the lock.
	p.mu.Lock()
	recs, loaded := p.recs[tag]
	i := p.next[tag]
	used, finished := p.done[tag]
	p.mu.Unlock()
	file := recordingFile(p.Dir, tag)
	if finished {
		return nil, fmt.Errorf("%w: case %s made request %d, but %s holds only %d", ErrNoRecording, tag.id, used+1, file, used)
	}
	if !loaded {
		recs, err = readRecording(file)
		if errors.Is(err, os.ErrNotExist) {
			return nil, fmt.Errorf("%w for case %s (try %d): %v", ErrNoRecording, tag.id, tag.try, err)
		}
		if err != nil {
			return nil, fmt.Errorf("recording %s: %v", file, err)
		}
		for k := range recs {
			recs[k].Request = compactJSON(recs[k].Request) // files are indented
		}
		p.mu.Lock()
		p.recs[tag] = recs
		p.mu.Unlock()
	}
	if i >= len(recs) {
		return nil, fmt.Errorf("%w: case %s made request %d, but %s holds only %d", ErrNoRecording, tag.id, i+1, file, len(recs))
	}
	ex := recs[i]
	if ex.Method != req.Method || ex.Path != req.URL.Path {
		return nil, fmt.Errorf("%w: case %s request %d is %s %s, recorded %s %s (%s)", ErrNoRecording, tag.id, i+1, req.Method, req.URL.Path, ex.Method, ex.Path, file)
	}
	if bytes.Equal(body, ex.Request) {
		// the common case: the same bytes as recorded
	} else if now := jsonOrString(body); !bytes.Equal(now, ex.Request) {
		if diff := jsonDiff(ex.Request, now, 6); diff != "" {
			return nil, fmt.Errorf("%w: case %s request %d differs from %s (recorded → now):\n%s", ErrNoRecording, tag.id, i+1, file, diff)
		}
	}
	p.mu.Lock()
	p.next[tag] = i + 1
	if i+1 == len(recs) {
		// all used: keep the count, free the exchanges
		delete(p.recs, tag)
		delete(p.next, tag)
		p.done[tag] = len(recs)
	}
	p.mu.Unlock()
	rb := []byte(ex.ResponseText)
	h := http.Header{}
	h.Set("Content-Type", "application/json")
	switch {
	case ex.ResponseText == "" && ex.Response != nil:
		rb = ex.Response
	case strings.HasPrefix(ex.ResponseText, "data:"):
		h.Set("Content-Type", "text/event-stream") // a streamed reply, replayed whole
	}
	return &http.Response{
		Status: fmt.Sprintf("%d %s", ex.Status, http.StatusText(ex.Status)), StatusCode: ex.Status,
		Proto: "HTTP/1.1", ProtoMajor: 1, ProtoMinor: 1, Header: h,
		Body: io.NopCloser(bytes.NewReader(rb)), ContentLength: int64(len(rb)), Request: req,
	}, nil
}

// Unused lists, for the cases and tries replayed so far, recordings that
// were not asked for (a shorter conversation than recorded).
func (p *Replayer) Unused() []string {
	p.mu.Lock()
	defer p.mu.Unlock()
	var out []string
	for tag, recs := range p.recs {
		if n := p.next[tag]; n < len(recs) {
			out = append(out, fmt.Sprintf("case %s try %d used %d of %d recorded requests", tag.id, tag.try, n, len(recs)))
		}
	}
	sort.Strings(out)
	return out
}

var gzipReaders sync.Pool // *gzip.Reader, reused across recordings

// readRecording decodes a recording file straight from its gzip stream.
func readRecording(path string) ([]Exchange, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	zr, _ := gzipReaders.Get().(*gzip.Reader)
	if zr == nil {
		zr, err = gzip.NewReader(f)
	} else {
		err = zr.Reset(f)
	}
	if err != nil {
		return nil, err
	}
	defer gzipReaders.Put(zr)
	var recs []Exchange
	if err := json.NewDecoder(zr).Decode(&recs); err != nil {
		return nil, err
	}
	return recs, nil
}

func readGzip(path string) ([]byte, error) {
	r, err := openMaybeGzip(path)
	if err != nil {
		return nil, err
	}
	defer r.Close()
	return io.ReadAll(r)
}

func readBody(req *http.Request) ([]byte, error) {
	if req.Body == nil {
		return nil, nil
	}
	b, err := io.ReadAll(req.Body)
	req.Body.Close()
	if err != nil {
		return nil, err
	}
	req.Body = io.NopCloser(bytes.NewReader(b))
	req.GetBody = func() (io.ReadCloser, error) { return io.NopCloser(bytes.NewReader(b)), nil }
	return b, nil
}

func compactJSON(b []byte) json.RawMessage {
	var buf bytes.Buffer
	if err := json.Compact(&buf, b); err != nil {
		return append(json.RawMessage(nil), b...)
	}
	return buf.Bytes()
}

func jsonOrString(b []byte) json.RawMessage {
	if len(bytes.TrimSpace(b)) == 0 {
		return json.RawMessage("null")
	}
	if json.Valid(b) {
		return compactJSON(b)
	}
	s, _ := json.Marshal(string(b))
	return s
}

// jsonDiff lists up to max paths where a and b differ ("" when equal as JSON).
func jsonDiff(a, b json.RawMessage, max int) string {
	var va, vb any
	if json.Unmarshal(a, &va) != nil || json.Unmarshal(b, &vb) != nil {
		if bytes.Equal(a, b) {
			return ""
		}
		return fmt.Sprintf("  body: %s → %s", clipText(string(a), 200), clipText(string(b), 200))
	}
	var out []string
	diffAny("$", va, vb, &out, max)
	return strings.Join(out, "\n")
}

func diffAny(path string, a, b any, out *[]string, max int) {
	if len(*out) >= max {
		return
	}
	show := func(v any) string {
		if v == nil {
			return "(absent or null)"
		}
		s, _ := json.Marshal(v)
		return clipText(string(s), 160)
	}
	switch x := a.(type) {
	case map[string]any:
		y, ok := b.(map[string]any)
		if !ok {
			break
		}
		keys := map[string]bool{}
		for k := range x {
			keys[k] = true
		}
		for k := range y {
			keys[k] = true
		}
		for _, k := range sortedKeys(keys) {
			xv, xok := x[k]
			yv, yok := y[k]
			switch {
			case !xok:
				*out = append(*out, fmt.Sprintf("  %s.%s: (absent) → %s", path, k, show(yv)))
			case !yok:
				*out = append(*out, fmt.Sprintf("  %s.%s: %s → (absent)", path, k, show(xv)))
			default:
				diffAny(path+"."+k, xv, yv, out, max)
			}
			if len(*out) >= max {
				return
			}
		}
		return
	case []any:
		y, ok := b.([]any)
		if !ok {
			break
		}
		n := min(len(x), len(y))
		for i := 0; i < n; i++ {
			diffAny(fmt.Sprintf("%s[%d]", path, i), x[i], y[i], out, max)
		}
		if len(x) != len(y) && len(*out) < max {
			*out = append(*out, fmt.Sprintf("  %s: %d elements → %d", path, len(x), len(y)))
		}
		return
	}
	ja, _ := json.Marshal(a)
	jb, _ := json.Marshal(b)
	if !bytes.Equal(ja, jb) {
		*out = append(*out, fmt.Sprintf("  %s: %s → %s", path, show(a), show(b)))
	}
}
