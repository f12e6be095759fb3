package plan

import (
	"bytes"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
)

// Refusing an oversized plan must not cost memory in proportion to it. Not
// parallel, so that no other test allocates while it measures.
func TestDecodeTooLargeAllocatesLittle(t *testing.T) {
	big := bytes.Repeat([]byte(" "), 50<<20)
	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	_, err := Decode(big)
	runtime.ReadMemStats(&after)
	if err == nil {
		t.Fatal("50 MiB accepted")
	}
	if grew := after.TotalAlloc - before.TotalAlloc; grew > 64<<10 {
		t.Errorf("refusing a 50 MiB plan allocated %d bytes, want under 64 KiB", grew)
	}
}

// Validating a large but legal document allocates a bounded multiple of its
// size (no tree of the document is built).
func TestCanonicalCheckAllocatesLittle(t *testing.T) {
	doc := []byte("[" + strings.Repeat("0,", 1<<20) + "0]") // 2 MiB, a million numbers
	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	if err := checkJSON(doc); err != nil {
		t.Fatal(err)
	}
	runtime.ReadMemStats(&after)
	if grew := after.TotalAlloc - before.TotalAlloc; grew > 1<<20 {
		t.Errorf("checking a 2 MiB array allocated %d bytes, want under 1 MiB", grew)
	}
}

func BenchmarkDecode(b *testing.B) {
	data, err := os.ReadFile(filepath.Join("testdata", "decode", "valid.json"))
	if err != nil {
		b.Fatal(err)
	}
	b.SetBytes(int64(len(data)))
	for b.Loop() {
		if _, err := Decode(data); err != nil {
			b.Fatal(err)
		}
	}
}

func BenchmarkDecode1000Actions(b *testing.B) {
	var sb strings.Builder
	sb.WriteString(`{"goal":"g","actions":[`)
	for i := range 1000 {
		if i > 0 {
			sb.WriteByte(',')
		}
		dep := ""
		if i > 0 {
			dep = fmt.Sprintf(`,"depends_on":["a%d"]`, i-1)
		}
		fmt.Fprintf(&sb, `{"id":"a%d","tool":"t","args":{"n":%d,"s":"text","ref":"${a0.output.id}"}%s}`, i, i, dep)
	}
	sb.WriteString(`]}`)
	data := []byte(strings.Replace(sb.String(), `"ref":"${a0.output.id}"`, `"ref":"x"`, 1))
	b.SetBytes(int64(len(data)))
	for b.Loop() {
		if _, err := Decode(data); err != nil {
			b.Fatal(err)
		}
	}
}

func BenchmarkKey(b *testing.B) {
	args := json.RawMessage(`{"customer_id":"cus_42","amount":1250,"currency":"EUR","lines":[{"sku":"A-1","qty":2},{"sku":"B-2","qty":1}]}`)
	for b.Loop() {
		if _, err := Key("run-1", "a2", "payments.charge", args); err != nil {
			b.Fatal(err)
		}
	}
}

func BenchmarkResolve(b *testing.B) {
	args := json.RawMessage(`{"customer_id":"${a1.output.id}","amount":1250,"lines":"${a1.output.lines}"}`)
	outputs := map[string]json.RawMessage{"a1": json.RawMessage(`{"id":"cus_42","lines":[{"sku":"A-1","qty":2},{"sku":"B-2","qty":1}],"other":{"x":[1,2,3]}}`)}
	for b.Loop() {
		if _, err := Resolve(args, outputs); err != nil {
			b.Fatal(err)
		}
	}
}
