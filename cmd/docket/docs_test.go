package main

import (
	"bufio"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"unicode"
)

// The manuals are the repository's README.md files: the top-level one and
// one per folder. TestDocs keeps them true to the tree they describe.

// docsRoot is the repository's root, seen from this package.
const docsRoot = "../.."

// maxReadmeLines bounds the top-level README.md: it is the front page, and
// the manuals it links to hold the detail.
const maxReadmeLines = 400

var (
	mdLink     = regexp.MustCompile(`\[[^\]]*\]\(([^)\s]+)\)`)
	inlineCode = regexp.MustCompile("`[^`]*`")
	mdHeading  = regexp.MustCompile(`^#{1,6}\s+(.*?)\s*#*\s*$`)
	issueRef   = regexp.MustCompile(`(?i)\bissue\s+#?\d+|\bmain at [0-9a-f]{7,40}\b`)
)

// readmes returns every README.md under root, relative to it, skipping
// hidden directories (.git, installed npm tools) and node_modules.
func readmes(t *testing.T, root string) []string {
	t.Helper()
	var out []string
	err := filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() && path != root && (strings.HasPrefix(d.Name(), ".") || d.Name() == "node_modules") {
			return filepath.SkipDir
		}
		if !d.IsDir() && d.Name() == "README.md" {
			rel, err := filepath.Rel(root, path)
			if err != nil {
				return err
			}
			out = append(out, rel)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// mdDoc is what TestDocs needs of a markdown file: its relative links (with
// their line numbers) and the anchors of its headings, as GitHub makes them.
type mdDoc struct {
	links   []mdRef
	anchors map[string]bool
}

type mdRef struct {
	line   int
	target string
}

func readMarkdown(path string) (mdDoc, error) {
	f, err := os.Open(path)
	if err != nil {
		return mdDoc{}, err
	}
	defer f.Close()
	doc := mdDoc{anchors: map[string]bool{}}
	seen := map[string]int{}
	fenced := false
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for n := 1; sc.Scan(); n++ {
		line := sc.Text()
		if strings.HasPrefix(strings.TrimSpace(line), "```") {
			fenced = !fenced
			continue
		}
		if fenced {
			continue
		}
		if m := mdHeading.FindStringSubmatch(line); m != nil {
			a := githubAnchor(m[1])
			if k := seen[a]; k > 0 {
				doc.anchors[fmt.Sprintf("%s-%d", a, k)] = true
			} else {
				doc.anchors[a] = true
			}
			seen[a]++
		}
		for _, m := range mdLink.FindAllStringSubmatch(inlineCode.ReplaceAllString(line, ""), -1) {
			doc.links = append(doc.links, mdRef{line: n, target: m[1]})
		}
	}
	return doc, sc.Err()
}

// githubAnchor is the fragment GitHub gives a heading: lower case, markup
// and punctuation dropped, spaces turned into hyphens.
func githubAnchor(heading string) string {
	var b strings.Builder
	for _, r := range strings.ToLower(heading) {
		switch {
		case unicode.IsLetter(r), unicode.IsDigit(r), r == '_', r == '-':
			b.WriteRune(r)
		case r == ' ':
			b.WriteRune('-')
		}
	}
	return b.String()
}

// TestDocs: every relative link in a README.md names a file or directory of
// the repository and, when it has a fragment, a heading of that file; the
// top-level README.md stays short; no manual cites an issue number or a
// commit of the history.
func TestDocs(t *testing.T) {
	t.Parallel()
	files := readmes(t, docsRoot)
	if len(files) < 2 {
		t.Fatalf("found only %v under %s", files, docsRoot)
	}
	docs := map[string]mdDoc{} // by path relative to the root
	load := func(rel string) (mdDoc, error) {
		if d, ok := docs[rel]; ok {
			return d, nil
		}
		d, err := readMarkdown(filepath.Join(docsRoot, rel))
		if err == nil {
			docs[rel] = d
		}
		return d, err
	}
	for _, rel := range files {
		doc, err := load(rel)
		if err != nil {
			t.Fatal(err)
		}
		for _, l := range doc.links {
			if strings.Contains(l.target, "://") || strings.HasPrefix(l.target, "mailto:") {
				continue
			}
			target, frag, _ := strings.Cut(l.target, "#")
			dest := rel
			if target != "" {
				dest = filepath.Join(filepath.Dir(rel), filepath.FromSlash(target))
				if _, err := os.Stat(filepath.Join(docsRoot, dest)); err != nil {
					t.Errorf("%s:%d: link %q: no such file in the repository", rel, l.line, l.target)
					continue
				}
			}
			if frag == "" {
				continue
			}
			if !strings.HasSuffix(dest, ".md") {
				t.Errorf("%s:%d: link %q: a fragment on a file that is not markdown", rel, l.line, l.target)
				continue
			}
			to, err := load(dest)
			if err != nil {
				t.Errorf("%s:%d: link %q: %v", rel, l.line, l.target, err)
				continue
			}
			if !to.anchors[frag] {
				t.Errorf("%s:%d: link %q: %s has no heading #%s", rel, l.line, l.target, dest, frag)
			}
		}
		raw, err := os.ReadFile(filepath.Join(docsRoot, rel))
		if err != nil {
			t.Fatal(err)
		}
		for i, line := range strings.Split(string(raw), "\n") {
			if m := issueRef.FindString(line); m != "" {
				t.Errorf("%s:%d: %q: manuals describe the software, not its history (no issue numbers or commits)", rel, i+1, m)
			}
		}
	}
	raw, err := os.ReadFile(filepath.Join(docsRoot, "README.md"))
	if err != nil {
		t.Fatal(err)
	}
	if n := strings.Count(string(raw), "\n"); n > maxReadmeLines {
		t.Errorf("README.md has %d lines, more than %d: move detail into the folder manuals", n, maxReadmeLines)
	}
}

// TestDocsAnchors pins githubAnchor to what GitHub renders.
func TestDocsAnchors(t *testing.T) {
	t.Parallel()
	for heading, want := range map[string]string{
		"Quick start":                                     "quick-start",
		"Temporal (`executor/temporalstep`)":              "temporal-executortemporalstep",
		"From any language: `docket step`":                "from-any-language-docket-step",
		"Runs, revisions, forks":                          "runs-revisions-forks",
		"On the shared ledger: three nodes, one database": "on-the-shared-ledger-three-nodes-one-database",
		"Against a peer: DBOS Transact":                   "against-a-peer-dbos-transact",
	} {
		if got := githubAnchor(heading); got != want {
			t.Errorf("githubAnchor(%q) = %q, want %q", heading, got, want)
		}
	}
}
