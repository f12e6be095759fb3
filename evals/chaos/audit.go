package chaos

import (
	"bytes"
	"encoding/json"
	"fmt"
	"sort"
)

// RunResult is one run of one workload, as results.jsonl records it.
type RunResult struct {
	Mode     string         `json:"mode"`
	N        int            `json:"n"` // the plan's number in the workload
	RunID    string         `json:"run_id"`
	Actions  int            `json:"actions"`
	Status   string         `json:"status"` // completed or failed
	Kills    int            `json:"kills"`  // children that died of our SIGKILL
	Restarts int            `json:"restarts"`
	Commands int            `json:"commands"` // docket run / resolve processes started
	Resolved map[string]int `json:"resolved"` // person decisions, by the action's class
	Seconds  float64        `json:"seconds"`  // from the first command to the run's end
	// OpenFailures counts commands that exited because the data directory
	// would not open (after a kill); OpenError is the first one's message.
	OpenFailures int      `json:"open_failures,omitempty"`
	OpenError    string   `json:"open_error,omitempty"`
	Audit        RunAudit `json:"audit"`
	// Control is what a person did to the run while it was in flight
	// (driven by docket serve), nil for a run driven by docket run alone.
	Control *ControlStats `json:"control,omitempty"`
	Error   string        `json:"error,omitempty"` // the harness could not finish the run
}

// RunAudit compares one run's ledger with the world.
type RunAudit struct {
	// Duplicates are effects beyond those the ledger's actions explain, by
	// service (for settings: changes of value beyond one per distinct value).
	Duplicates map[string]int `json:"duplicates"`
	// LostMissing: the ledger says succeeded but the world has nothing (or
	// the output names an object the world does not have, or one another
	// action also claims). LostUnexplained: the world has an effect that no
	// action the ledger says succeeded explains.
	LostMissing     int `json:"lost_missing"`
	LostUnexplained int `json:"lost_unexplained"`
	// AtMostOnceReexec counts requests the email service acted on beyond the
	// executions people allowed (one per attempt a person approved or
	// retried): automatic re-executions of an at-most-once action.
	AtMostOnceReexec int `json:"at_most_once_reexec"`
	// RepeatWrites counts write requests a service received beyond one per
	// action that was attempted: retries a customer of the service could see
	// in its logs (harmless when deduplicated).
	RepeatWrites int `json:"repeat_writes"`
	// LookupHits counts searches that found a prior effect.
	LookupHits int `json:"lookup_hits"`
	// ControlViolations counts broken expectations of a pause, cancel, edit
	// or replay the service acknowledged (auditControl).
	ControlViolations int `json:"control_violations,omitempty"`
	// CancelLeftPending counts actions of a cancelled run that had been
	// attempted (outcome known: nothing happened) and were waiting for their
	// next attempt when the cancel came: docket leaves them pending, not
	// skipped. Reported; not a duplicate or a loss.
	CancelLeftPending int `json:"cancel_left_pending,omitempty"`
	// BudgetChecked: the run's budget usage was compared with the world
	// (the protected workload, budget.go); BudgetMismatches counts runs
	// whose usage differs from the charges the world saw (0 or 1).
	BudgetChecked    bool `json:"budget_checked,omitempty"`
	BudgetMismatches int  `json:"budget_mismatches,omitempty"`
	// Findings describe each duplicate or loss, for people.
	Findings []string `json:"findings,omitempty"`
}

// identity names an action's logical effect in the world from its resolved
// arguments.
func identity(svc string, args map[string]any) string {
	s := func(k string) string { v, _ := args[k].(string); return v }
	switch svc {
	case "payments":
		return s("reference")
	case "crm", "leads":
		return s("email")
	case "email":
		return s("to") + "|" + s("template")
	case "settings":
		return s("account")
	}
	return ""
}

type bucket struct {
	actions   []string
	attempted int // actions claimed at least once
	succeeded int
	unsettled int // attempted, not succeeded
	outputs   []string
	allowed   int             // executions people allowed (email)
	values    map[string]bool // settings values of attempted actions
	succVals  map[string]bool // settings values of succeeded actions
}

func canonicalJSON(v any) string {
	b, _ := json.Marshal(v)
	return string(b)
}

// auditRun compares a run's final Run JSON with the world's state of its
// namespace. retries counts the person's --retry decisions per action.
func auditRun(doc *runDoc, w *Audit, retries map[string]int) RunAudit {
	out := RunAudit{Duplicates: map[string]int{}, LookupHits: w.LookupHits}
	prefix := doc.RunID + ": "
	if doc.Status != "completed" {
		prefix = doc.RunID + " (run " + doc.Status + "): "
	}
	find := func(format string, a ...any) {
		out.Findings = append(out.Findings, prefix+fmt.Sprintf(format, a...))
	}
	buckets := map[string]*bucket{}
	for _, a := range doc.Actions {
		svc := service[a.Tool]
		if svc == "" || svc == "catalogue" {
			continue
		}
		if a.Attempts == 0 && a.Status != "succeeded" {
			continue // never claimed: its arguments may be unresolved
		}
		dec := json.NewDecoder(bytes.NewReader(a.Args))
		dec.UseNumber()
		var args map[string]any
		dec.Decode(&args)
		name := svc + "/" + identity(svc, args)
		b := buckets[name]
		if b == nil {
			b = &bucket{values: map[string]bool{}, succVals: map[string]bool{}}
			buckets[name] = b
		}
		b.actions = append(b.actions, a.ID)
		b.attempted++
		b.allowed += min(max(a.Attempts, 1), 1+retries[a.ID])
		if svc == "settings" {
			b.values[canonicalJSON(args["settings"])] = true
		}
		if a.Status != "succeeded" {
			b.unsettled++
			continue
		}
		b.succeeded++
		var o map[string]any
		json.Unmarshal(a.Output, &o)
		switch svc {
		case "email":
			s, _ := o["message_id"].(string)
			b.outputs = append(b.outputs, s)
		case "settings":
			b.succVals[canonicalJSON(args["settings"])] = true
		default:
			s, _ := o["id"].(string)
			b.outputs = append(b.outputs, s)
		}
	}

	// The world's effects by logical effect.
	world := map[string][]string{}
	for _, c := range w.Charges {
		world["payments/"+c.Reference] = append(world["payments/"+c.Reference], c.ID)
	}
	for _, c := range w.Contacts {
		world["crm/"+c.Email] = append(world["crm/"+c.Email], c.ID)
	}
	for _, c := range w.Leads {
		world["leads/"+c.Email] = append(world["leads/"+c.Email], c.ID)
	}
	for _, e := range w.Emails {
		k := "email/" + e.To + "|" + e.Template
		world[k] = append(world[k], e.MessageID)
	}

	names := make([]string, 0, len(buckets))
	for n := range buckets {
		names = append(names, n)
	}
	sort.Strings(names)
	for _, name := range names {
		b := buckets[name]
		svc, id, _ := cut(name)
		if st, ok := w.Requests[name]; ok {
			out.RepeatWrites += max(0, st.Received-b.attempted)
			if svc == "email" {
				if n := st.Processed - b.allowed; n > 0 {
					out.AtMostOnceReexec += n
					find("email %s: the service acted on %d requests, people allowed %d executions (%v)", id, st.Processed, b.allowed, b.actions)
				}
			}
		}
		if svc == "settings" {
			s, ok := w.Settings[id]
			switch {
			case !ok && b.succeeded > 0:
				out.LostMissing++
				find("settings %s: the ledger says set (%v), the world has nothing", id, b.actions)
			case ok && b.succeeded > 0 && !b.succVals[string(s.Value)]:
				out.LostMissing++
				find("settings %s: the world holds %s, not what the ledger says was set (%v)", id, s.Value, b.actions)
			}
			if ok && s.Changes > len(b.values) {
				out.Duplicates[svc] += s.Changes - len(b.values)
				find("settings %s: %d changes of value for %d distinct values (%v)", id, s.Changes, len(b.values), b.actions)
			}
			continue
		}
		have := world[name]
		delete(world, name)
		extra := len(have) - b.succeeded
		if extra > 0 {
			unexplained := min(extra, b.unsettled)
			out.LostUnexplained += unexplained
			if extra > unexplained {
				out.Duplicates[svc] += extra - unexplained
			}
			find("%s %s: %d effects in the world %v, %d actions succeeded (%v)", svc, id, len(have), have, b.succeeded, b.actions)
		}
		inWorld := map[string]bool{}
		for _, x := range have {
			inWorld[x] = true
		}
		bad := 0
		seen := map[string]bool{}
		for _, x := range b.outputs {
			if !inWorld[x] || seen[x] {
				bad++
				find("%s %s: the ledger's output %q is not an effect of its own in the world %v (%v)", svc, id, x, have, b.actions)
			}
			seen[x] = true
		}
		if lost := max(-extra, bad); lost > 0 {
			out.LostMissing += lost
			if extra < 0 {
				find("%s %s: %d actions succeeded, %d effects in the world (%v)", svc, id, b.succeeded, len(have), b.actions)
			}
		}
	}
	// Effects no attempted action explains at all.
	rest := make([]string, 0, len(world))
	for name := range world {
		rest = append(rest, name)
	}
	sort.Strings(rest)
	for _, name := range rest {
		out.LostUnexplained += len(world[name])
		find("%s: %d effects in the world %v that no action of the ledger explains", name, len(world[name]), world[name])
	}
	accts := make([]string, 0, len(w.Settings))
	for acct := range w.Settings {
		accts = append(accts, acct)
	}
	sort.Strings(accts)
	for _, acct := range accts {
		if s := w.Settings[acct]; buckets["settings/"+acct] == nil {
			out.LostUnexplained += s.Changes
			find("settings/%s: set in the world, no action of the ledger explains it", acct)
		}
	}
	return out
}

func cut(name string) (svc, id string, ok bool) {
	for i := 0; i < len(name); i++ {
		if name[i] == '/' {
			return name[:i], name[i+1:], true
		}
	}
	return name, "", false
}
