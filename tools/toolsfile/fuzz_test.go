package toolsfile

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// FuzzParse feeds arbitrary tools files to Parse: it must never panic, and a
// refused file must list at least one problem.
func FuzzParse(f *testing.F) {
	paths, _ := filepath.Glob("testdata/*/*.json")
	for _, p := range paths {
		data, err := os.ReadFile(p)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(data)
	}
	env := testEnv(nil)
	f.Fuzz(func(t *testing.T, data []byte) {
		file, err := Parse(data, env)
		if err != nil {
			le, ok := err.(*LoadError)
			if !ok || len(le.Problems) == 0 {
				t.Fatalf("error without problems: %v", err)
			}
			return
		}
		for _, tl := range file.Tools {
			if tl.Spec.Name == "" || !tl.Spec.Class.Valid() {
				t.Fatalf("accepted a tool without name or class: %+v", tl.Spec)
			}
		}
	})
}

// FuzzTemplate parses arbitrary templates; a parsed template renders, and
// rendering a template without actions gives it back unchanged.
func FuzzTemplate(f *testing.F) {
	for _, s := range []string{"", "plain", "{{.a}}", `x{{env "HOME"}}y{{key}}`, "{{", "}}{{.a.b}}", "{{ .a }}?q={{.b}}", "{{env}}"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		tm, err := ParseTemplate(s)
		if err != nil {
			return
		}
		d := &Data{Args: map[string]any{"a": "x"}, Key: "k", Env: map[string]string{}}
		out := tm.Render(d)
		if !strings.Contains(s, "{{") && out != s {
			t.Fatalf("literal template %q rendered as %q", s, out)
		}
		if u, err := ParseURLTemplate(s); err == nil {
			out := u.RenderURL(d)
			if g, err := u.RenderGuardedURL(d); err == nil && g != out {
				t.Fatalf("%q: guarded %q, unguarded %q", s, g, out)
			}
		}
	})
}
