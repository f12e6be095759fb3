package httptool

import (
	"encoding/json"
	"fmt"
	"slices"
	"strings"
	"unicode"

	"github.com/docketrun/docket/tools/toolsfile"
)

// argNames is what a tool's input schema says about top-level argument
// names: the declared properties, and whether undeclared ones may be sent.
type argNames struct {
	declared map[string]bool
	folded   map[string]string // fold(name) -> declared name
	// open: the schema lets undeclared properties through on purpose
	// (toolsfile.InputNames).
	open bool
}

func newArgNames(schema json.RawMessage) argNames {
	n := argNames{declared: map[string]bool{}, folded: map[string]string{}}
	var names []string
	names, n.open = toolsfile.InputNames(schema)
	for _, name := range names {
		n.declared[name] = true
		n.folded[fold(name)] = name
	}
	return n
}

// fold maps s to a form equal for every two strings that strings.EqualFold
// finds equal (each rune to the smallest of its case-folding orbit): the
// case-insensitive matching of Go's encoding/json and of many other
// decoders ("cuſtomer" with a long s, "Customer" and "customer" fold alike).
func fold(s string) string {
	var b strings.Builder
	for _, r := range s {
		m := r
		for f := unicode.SimpleFold(r); f != r; f = unicode.SimpleFold(f) {
			m = min(m, f)
		}
		b.WriteRune(m)
	}
	return b.String()
}

// check refuses arguments that could mean one thing to docket (its schema
// validation, approval limits and policies) and another to the called
// service:
//   - two member names of one object, at any depth, that differ only in
//     letter case (a case-insensitive decoder reads both as one field, the
//     last one winning);
//   - an undeclared top-level argument whose name folds to a declared one;
//   - when the request sends the arguments themselves as its body (no body
//     template), any undeclared top-level argument, unless the schema lets
//     them through on purpose (see argNames.open).
func (n argNames) check(args map[string]any, r *toolsfile.Request) error {
	if err := foldCollisions(args, ""); err != nil {
		return err
	}
	var undeclared []string
	for name := range args {
		if n.declared[name] {
			continue
		}
		if d, ok := n.folded[fold(name)]; ok {
			return fmt.Errorf("argument %q is not in the input schema but differs from %q only in letter case (a service that matches names without regard to case reads it as %q): refused, nothing sent", name, d, d)
		}
		undeclared = append(undeclared, name)
	}
	if len(undeclared) > 0 && r.SendsArgs() && !n.open {
		slices.Sort(undeclared)
		return fmt.Errorf("%s not in the input schema: this tool sends its arguments as the request body, and only declared properties may be sent (add them to input_schema.properties, or set \"additionalProperties\" to allow them): refused, nothing sent",
			quoteList("argument", undeclared))
	}
	return nil
}

// foldCollisions finds two member names of one object in v that differ only
// in letter case.
func foldCollisions(v any, at string) error {
	switch v := v.(type) {
	case map[string]any:
		names := make([]string, 0, len(v))
		for k := range v {
			names = append(names, k)
		}
		slices.Sort(names)
		seen := map[string]string{}
		for _, k := range names {
			f := fold(k)
			if other, ok := seen[f]; ok {
				where := ""
				if at != "" {
					where = " in " + at
				}
				return fmt.Errorf("arguments %q and %q%s differ only in letter case (a service that matches names without regard to case reads them as one): refused, nothing sent", other, k, where)
			}
			seen[f] = k
		}
		for _, k := range names {
			if err := foldCollisions(v[k], joinPath(at, k)); err != nil {
				return err
			}
		}
	case []any:
		for i, x := range v {
			if err := foldCollisions(x, fmt.Sprintf("%s[%d]", at, i)); err != nil {
				return err
			}
		}
	}
	return nil
}

func joinPath(at, k string) string {
	if at == "" {
		return k
	}
	return at + "." + k
}

func quoteList(noun string, names []string) string {
	q := make([]string, len(names))
	for i, n := range names {
		q[i] = fmt.Sprintf("%q", n)
	}
	if len(q) == 1 {
		return noun + " " + q[0] + " is"
	}
	return noun + "s " + strings.Join(q, ", ") + " are"
}
