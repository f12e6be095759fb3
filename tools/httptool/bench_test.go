package httptool

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"testing"

	"github.com/docketrun/docket/tools"
)

// BenchmarkCall measures one call against a local fake API, request
// rendering and response selection included.
func BenchmarkCall(b *testing.B) {
	bnd := setup(b, "["+createTool+"]", func(w http.ResponseWriter, r *http.Request) {
		io.WriteString(w, `{"item":{"id":"it_1"}}`)
	})
	tl := bnd.tools["create"]
	args := json.RawMessage(`{"name":"a/b c","n":12,"tags":["x"],"obj":{"k":1}}`)
	b.ReportAllocs()
	for b.Loop() {
		if _, err := tl.Call(context.Background(), tools.Call{Key: "dk1_k", Args: args}); err != nil {
			b.Fatal(err)
		}
	}
}

func BenchmarkParse(b *testing.B) {
	data := []byte(`{"version":1,"tools":[` + createTool + `]}`)
	env := testEnv(map[string]string{"BASE": "https://x.example", "TOKEN": "t0k3n"})
	b.ReportAllocs()
	for b.Loop() {
		if _, err := Parse(data, env); err != nil {
			b.Fatal(err)
		}
	}
}
