package mcptool

import (
	"encoding/json"
	"regexp"
	"strings"
	"testing"

	"github.com/docketrun/docket/tools/toolsfile"
)

// FuzzRecorded feeds arbitrary tools/call results (what a server sends is
// untrusted) through the output extraction and pointer selection: no panic,
// and whatever is returned is valid JSON.
func FuzzRecorded(f *testing.F) {
	f.Add([]byte(`{"content":[{"type":"text","text":"hi"}]}`), "")
	f.Add([]byte(`{"structuredContent":{"entities":[{"name":"a","n":9007199254740993}]},"content":[]}`), "/entities/0/n")
	f.Add([]byte(`{"structuredContent":null,"content":null}`), "/content")
	f.Add([]byte(`{"structuredContent":[1,2,3]}`), "/1")
	f.Add([]byte(`not json`), "/a~1b/~0")
	f.Fuzz(func(t *testing.T, raw []byte, ptr string) {
		out, err := recorded(raw)
		if err != nil {
			return
		}
		if !json.Valid(out) {
			t.Fatalf("recorded(%q) = %q: not JSON", raw, out)
		}
		toks, err := toolsfile.SplitPointer(ptr)
		if err != nil {
			if (strings.HasPrefix(ptr, "/") || ptr == "") && !badEscape(ptr) {
				t.Fatalf("toolsfile.SplitPointer(%q) refused a valid pointer: %v", ptr, err)
			}
			return
		}
		sel, err := selectValue(out, toks)
		if err == nil && !json.Valid(sel) {
			t.Fatalf("selectValue(%q, %q) = %q: not JSON", out, ptr, sel)
		}
		_ = nonEmpty(sel)
	})
}

// badEscape reports a "~" not followed by "0" or "1" (RFC 6901 refuses it).
func badEscape(ptr string) bool { return regexp.MustCompile(`~([^01]|$)`).MatchString(ptr) }
