package plan

import (
	"container/heap"
	"errors"
	"fmt"
	"strings"
	"unicode/utf8"
)

// maxToolLength bounds tool names, in bytes.
const maxToolLength = 256

// idProblem returns why id is not a valid action id, or "".
func idProblem(id string) string {
	if id == "" {
		return "is empty: ids match [A-Za-z0-9_-]+"
	}
	if len(id) > MaxIDLength {
		return fmt.Sprintf("is %d bytes long: ids are at most %d bytes", len(id), MaxIDLength)
	}
	for i := 0; i < len(id); i++ {
		c := id[i]
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '_' || c == '-') {
			return "contains a character outside [A-Za-z0-9_-]: ids cannot hold '.', whitespace or \"${\""
		}
	}
	return ""
}

// fieldAt names one field of one action, for skipping checks that decoding
// already reported.
type fieldAt struct {
	action int
	field  string
}

// checker collects the problems of one plan, grouped by position so that
// Errors come in document order whatever finds them.
type checker struct {
	p      *Plan
	plan   []Problem   // plan-level problems
	action [][]Problem // problems per action position
	// skip lists fields whose decoding already failed (field "*": the whole
	// action was not an object).
	skip   map[fieldAt]bool
	argsOK []bool // args is a valid object (Validate may pass it on)
}

func newChecker(p *Plan) *checker {
	return &checker{p: p, action: make([][]Problem, len(p.Actions)), skip: map[fieldAt]bool{}, argsOK: make([]bool, len(p.Actions))}
}

// add records a problem of action i. Actions with a valid id are named by it;
// others by their position ("actions[3].tool").
func (c *checker) add(i int, field, msg string) {
	id := c.p.Actions[i].ID
	if idProblem(id) != "" {
		if field == "" {
			field = fmt.Sprintf("actions[%d]", i)
		} else {
			field = fmt.Sprintf("actions[%d].%s", i, field)
		}
		id = ""
	}
	c.action[i] = append(c.action[i], Problem{Action: id, Field: field, Msg: msg})
}

func (c *checker) addPlan(field, msg string) {
	c.plan = append(c.plan, Problem{Field: field, Msg: msg})
}

func (c *checker) skipped(i int, field string) bool {
	return c.skip[fieldAt{i, "*"}] || c.skip[fieldAt{i, field}]
}

// err returns every problem in document order, or nil.
func (c *checker) err() error {
	all := append([]Problem(nil), c.plan...)
	for _, ps := range c.action {
		all = append(all, ps...)
	}
	if len(all) == 0 {
		return nil
	}
	return Errors(all)
}

// Check verifies the plan's structure and returns every problem found as
// Errors (nil when there is none):
//
//   - every action has a valid id ([A-Za-z0-9_-], 1 to MaxIDLength bytes),
//     unique within the plan, and a non-empty tool name;
//   - args is present and is a JSON object within limits: no number beyond
//     ±2^53, no string containing "${" that is not exactly one reference, no
//     object key containing "${";
//   - depends_on names other actions of the plan, each once, without cycles
//     (a cycle is reported once, naming its actions in order);
//   - every reference names an action that is a transitive dependency;
//   - not_before, when set, is an RFC 3339 time with a zone, and after, when
//     set, a duration ParseDuration reads ("2d", "90m"; not negative).
//
// A plan has at most MaxActions actions.
func (p *Plan) Check() error {
	if p == nil {
		return Errors{{Msg: "no plan (nil)"}}
	}
	c := newChecker(p)
	c.run()
	return c.err()
}

// Validate runs Check and then v.ValidateArgs on every action whose tool and
// args passed Check, collecting every problem. A validator's error becomes a
// Problem with Field "args" and its text as the message. A nil v runs Check
// only.
func (p *Plan) Validate(v Validator) error {
	if p == nil {
		return Errors{{Msg: "no plan (nil)"}}
	}
	c := newChecker(p)
	c.run()
	if v != nil {
		for i, a := range p.Actions {
			if !c.argsOK[i] || a.Tool == "" {
				continue
			}
			if err := v.ValidateArgs(a.Tool, a.Args); err != nil {
				c.add(i, "args", err.Error())
			}
		}
	}
	return c.err()
}

func (c *checker) run() {
	p := c.p
	if len(p.Actions) > MaxActions {
		c.addPlan("actions", fmt.Sprintf("%d actions, the limit is %d", len(p.Actions), MaxActions))
		return
	}
	index := make(map[string]int, len(p.Actions)) // valid id -> first position
	refs := make([][]foundRef, len(p.Actions))
	for i, a := range p.Actions {
		if c.skipped(i, "id") {
			continue
		}
		switch msg := idProblem(a.ID); {
		case a.ID == "":
			c.add(i, "id", "required: a non-empty id matching [A-Za-z0-9_-]+")
		case msg != "":
			c.add(i, "id", fmt.Sprintf("%s %s", quoteShort(a.ID), msg))
		default:
			if j, dup := index[a.ID]; dup {
				c.add(i, "id", fmt.Sprintf("duplicate id: %s is also the id of actions[%d]", a.ID, j))
			} else {
				index[a.ID] = i
			}
		}
	}
	for i, a := range p.Actions {
		if !c.skipped(i, "tool") {
			switch {
			case a.Tool == "":
				c.add(i, "tool", "required: the registry name of the tool to call")
			case len(a.Tool) > maxToolLength:
				c.add(i, "tool", fmt.Sprintf("tool name is %d bytes long, the limit is %d", len(a.Tool), maxToolLength))
			case !utf8.ValidString(a.Tool):
				c.add(i, "tool", "tool name is not valid UTF-8")
			}
		}
		if !c.skipped(i, "args") {
			refs[i] = c.checkArgs(i, a)
		}
		c.checkTimer(i, a)
	}
	deps := c.checkDeps(index)
	c.checkCycles(deps)
	c.checkRefs(index, deps, refs)
}

// checkArgs validates the args of action i and returns its references.
func (c *checker) checkArgs(i int, a Action) []foundRef {
	if len(a.Args) == 0 {
		c.add(i, "args", "required, must be a JSON object")
		return nil
	}
	bad := false
	found, err := scanRefs(a.Args, func(path string, err error) {
		bad = true
		c.add(i, "args"+path, err.Error())
	})
	if err != nil {
		var je *jsonError
		if errors.As(err, &je) {
			c.add(i, "args"+je.path, je.problemMsg())
		} else {
			c.add(i, "args", err.Error())
		}
		return nil
	}
	c.argsOK[i] = !bad
	return found
}

// checkDeps validates depends_on and returns the dependency graph by
// position: deps[i] lists the positions action i depends on, once each.
func (c *checker) checkDeps(index map[string]int) [][]int {
	deps := make([][]int, len(c.p.Actions))
	for i, a := range c.p.Actions {
		if c.skipped(i, "depends_on") {
			continue
		}
		seen := make(map[string]bool, len(a.DependsOn))
		for _, d := range a.DependsOn {
			if seen[d] {
				c.add(i, "depends_on", fmt.Sprintf("lists %s more than once", quoteShort(d)))
				continue
			}
			seen[d] = true
			j, ok := index[d]
			switch {
			case d == a.ID:
				c.add(i, "depends_on", "the action depends on itself")
			case !ok:
				c.add(i, "depends_on", fmt.Sprintf("names %s, which is not an action of this plan", quoteShort(d)))
			case j != i:
				deps[i] = append(deps[i], j)
			}
		}
	}
	return deps
}

// checkCycles reports each dependency cycle once, on the cycle's first
// action by position, naming its actions in order.
func (c *checker) checkCycles(deps [][]int) {
	_, rest := topoOrder(deps)
	if len(rest) == 0 {
		return
	}
	remaining := make(map[int]bool, len(rest))
	for _, i := range rest {
		remaining[i] = true
	}
	reported := make(map[int]bool)
	for _, start := range rest {
		if reported[start] {
			continue
		}
		// Every remaining action depends on another remaining one, so this
		// walk ends on a repeat (a new cycle) or a reported action.
		pos := map[int]int{}
		var walk []int
		x := start
		for !reported[x] {
			if at, again := pos[x]; again {
				cycle := walk[at:]
				for _, y := range cycle {
					reported[y] = true
				}
				c.reportCycle(cycle)
				break
			}
			pos[x] = len(walk)
			walk = append(walk, x)
			next := -1
			for _, j := range deps[x] {
				if remaining[j] {
					next = j
					break
				}
			}
			if next < 0 { // cannot happen for a remaining action
				break
			}
			x = next
		}
	}
}

// reportCycle reports cycle (each member depends on the next) starting at its
// first member by position.
func (c *checker) reportCycle(cycle []int) {
	first := 0
	for k, i := range cycle {
		if i < cycle[first] {
			first = k
		}
	}
	names := make([]string, 0, len(cycle)+1)
	for k := range cycle {
		names = append(names, c.p.Actions[cycle[(first+k)%len(cycle)]].ID)
	}
	names = append(names, names[0])
	c.add(cycle[first], "depends_on", fmt.Sprintf("dependency cycle: %s (each depends on the next)", strings.Join(names, " -> ")))
}

// checkRefs verifies that every reference names a transitive dependency.
func (c *checker) checkRefs(index map[string]int, deps [][]int, refs [][]foundRef) {
	stamp := make([]int, len(c.p.Actions)) // stamp[j] == i+1: j is an ancestor of i
	var queue []int
	for i, rs := range refs {
		if len(rs) == 0 {
			continue
		}
		queue = append(queue[:0], deps[i]...)
		for _, j := range deps[i] {
			stamp[j] = i + 1
		}
		for len(queue) > 0 {
			j := queue[len(queue)-1]
			queue = queue[:len(queue)-1]
			for _, k := range deps[j] {
				if stamp[k] != i+1 {
					stamp[k] = i + 1
					queue = append(queue, k)
				}
			}
		}
		for _, f := range rs {
			j, ok := index[f.ref.Action]
			field := "args" + f.path
			switch {
			case !ok:
				c.add(i, field, fmt.Sprintf("reference %s names %s, which is not an action of this plan", f.ref.Text, f.ref.Action))
			case j == i:
				c.add(i, field, fmt.Sprintf("reference %s names the action itself: an action cannot use its own output", f.ref.Text))
			case stamp[j] != i+1:
				c.add(i, field, fmt.Sprintf("reference %s names %s, which is not among its dependencies: add %q to depends_on", f.ref.Text, f.ref.Action, f.ref.Action))
			}
		}
	}
}

// Order returns the action ids in a deterministic topological order:
// dependencies first, ties broken by position in Actions. It is meant for a
// plan that passes Check; for one that does not, unknown dependencies are
// ignored and actions caught in cycles come last, in position order.
func (p *Plan) Order() []string {
	if p == nil {
		return nil
	}
	index := make(map[string]int, len(p.Actions))
	for i, a := range p.Actions {
		if _, dup := index[a.ID]; !dup {
			index[a.ID] = i
		}
	}
	deps := make([][]int, len(p.Actions))
	for i, a := range p.Actions {
		seen := map[int]bool{}
		for _, d := range a.DependsOn {
			if j, ok := index[d]; ok && j != i && !seen[j] {
				seen[j] = true
				deps[i] = append(deps[i], j)
			}
		}
	}
	order, rest := topoOrder(deps)
	ids := make([]string, 0, len(p.Actions))
	for _, i := range append(order, rest...) {
		ids = append(ids, p.Actions[i].ID)
	}
	return ids
}

// topoOrder orders positions dependencies first, ties by position (Kahn's
// algorithm with a min-heap). rest lists, by position, the positions that
// could not be ordered because they are in or behind a cycle.
func topoOrder(deps [][]int) (order, rest []int) {
	n := len(deps)
	waiting := make([]int, n) // number of unmet dependencies
	dependents := make([][]int, n)
	for i, ds := range deps {
		waiting[i] = len(ds)
		for _, j := range ds {
			dependents[j] = append(dependents[j], i)
		}
	}
	ready := &intHeap{}
	for i := range n {
		if waiting[i] == 0 {
			heap.Push(ready, i)
		}
	}
	order = make([]int, 0, n)
	for ready.Len() > 0 {
		i := heap.Pop(ready).(int)
		order = append(order, i)
		for _, k := range dependents[i] {
			waiting[k]--
			if waiting[k] == 0 {
				heap.Push(ready, k)
			}
		}
	}
	for i := range n {
		if waiting[i] > 0 {
			rest = append(rest, i)
		}
	}
	return order, rest
}

type intHeap []int

func (h intHeap) Len() int           { return len(h) }
func (h intHeap) Less(i, j int) bool { return h[i] < h[j] }
func (h intHeap) Swap(i, j int)      { h[i], h[j] = h[j], h[i] }
func (h *intHeap) Push(x any)        { *h = append(*h, x.(int)) }
func (h *intHeap) Pop() any {
	old := *h
	x := old[len(old)-1]
	*h = old[:len(old)-1]
	return x
}

// Action returns the action with the given id (the first one, should the
// plan hold duplicates).
func (p *Plan) Action(id string) (Action, bool) {
	if p == nil {
		return Action{}, false
	}
	for _, a := range p.Actions {
		if a.ID == id {
			return a, true
		}
	}
	return Action{}, false
}

// checkTimer validates the action's not_before and after.
func (c *checker) checkTimer(i int, a Action) {
	if a.NotBefore != "" && !c.skipped(i, "not_before") {
		if _, err := parseNotBefore(a.NotBefore); err != nil {
			c.add(i, "not_before", err.Error())
		}
	}
	if a.After != "" && !c.skipped(i, "after") {
		if _, err := ParseDuration(a.After); err != nil {
			c.add(i, "after", err.Error()+": after is a duration such as \"2d\" or \"90m\"")
		}
	}
}
