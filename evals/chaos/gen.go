package chaos

import (
	"encoding/binary"
	"encoding/json"
	"fmt"
	"hash/fnv"
	"io"
	"math/rand/v2"
	"time"
)

// The tools the generated plans use, one per service of the world.
const (
	ToolCatalogue = "catalogue_get_item"     // read_only
	ToolContact   = "crm_create_contact"     // lookup (by the key in the note field)
	ToolLead      = "crm_create_lead"        // lookup, eventually consistent
	ToolCharge    = "payments_create_charge" // keyed (Idempotency-Key)
	ToolSettings  = "settings_put"           // idempotent (PUT)
	ToolEmail     = "email_send"             // at_most_once
)

// service names a tool's service in the world and in the report.
var service = map[string]string{
	ToolCatalogue: "catalogue",
	ToolContact:   "crm",
	ToolLead:      "leads",
	ToolCharge:    "payments",
	ToolSettings:  "settings",
	ToolEmail:     "email",
}

// newRand returns a generator seeded by seed and the given labels, so that
// each run's plan and each step's kill are drawn independently of the order
// in which workers reach them.
func newRand(seed uint64, labels ...any) *rand.Rand {
	h := fnv.New64a()
	var b [8]byte
	binary.LittleEndian.PutUint64(b[:], seed)
	h.Write(b[:])
	for _, l := range labels {
		fmt.Fprintf(h, "\x00%v", l)
	}
	io.WriteString(h, "\x00")
	s := h.Sum64()
	return rand.New(rand.NewPCG(s, seed^0x6a09e667f3bcc909))
}

// genAction is an action of a generated plan.
type genAction struct {
	ID        string         `json:"id"`
	Tool      string         `json:"tool"`
	Args      map[string]any `json:"args"`
	DependsOn []string       `json:"depends_on,omitempty"`
}

// genPlan is a generated plan.
type genPlan struct {
	Goal    string      `json:"goal"`
	Actions []genAction `json:"actions"`
}

var skus = []string{"basic", "pro", "team"}

// GeneratePlan returns the n-th plan of a seed's workload (plan JSON, as
// `docket run --plan` reads it) and its number of actions. Plans onboard one
// or two customers: look up a catalogue item, create a CRM contact and
// sometimes a lead, charge them (the amount from the catalogue or given;
// about one run in fifty has an amount the payments service declines, so the
// run fails), store the account's settings and email them, with references
// between outputs, some extra dependencies, and some identical actions under
// different ids ("…_twin": the same request made twice on purpose, which
// must take effect twice).
func GeneratePlan(seed uint64, n int) ([]byte, int) {
	rng := newRand(seed, "plan", n)
	run := fmt.Sprintf("r%d", n)
	p := genPlan{Goal: fmt.Sprintf("chaos workload %d/%d: onboard customers", seed, n)}
	ids := map[string]bool{}
	add := func(a genAction, twinnable bool) {
		// An extra dependency on an earlier action now and then.
		if len(p.Actions) > 0 && rng.Float64() < 0.15 {
			d := p.Actions[rng.IntN(len(p.Actions))].ID
			dup := false
			for _, x := range a.DependsOn {
				dup = dup || x == d
			}
			if !dup {
				a.DependsOn = append(a.DependsOn, d)
			}
		}
		p.Actions = append(p.Actions, a)
		ids[a.ID] = true
		if twinnable && rng.Float64() < 0.08 {
			t := a
			t.ID = a.ID + "_twin"
			p.Actions = append(p.Actions, t)
		}
	}
	ref := func(id, path string) string { return "${" + id + ".output." + path + "}" }
	customers := 1 + rng.IntN(2)
	declined := rng.Float64() < 0.02
	for c := 1; c <= customers; c++ {
		pre := fmt.Sprintf("c%d", c)
		email := fmt.Sprintf("%s.%s@example.test", pre, run)
		sku := skus[rng.IntN(len(skus))]
		item := ""
		if rng.Float64() < 0.7 {
			item = pre + "_item"
			add(genAction{ID: item, Tool: ToolCatalogue, Args: map[string]any{"sku": sku}}, false)
		}
		contact := pre + "_contact"
		add(genAction{ID: contact, Tool: ToolContact, Args: map[string]any{"name": "Customer " + pre + " of " + run, "email": email}}, true)
		if rng.Float64() < 0.5 {
			add(genAction{ID: pre + "_lead", Tool: ToolLead, Args: map[string]any{"name": "Lead " + pre + " of " + run, "email": "lead." + email}}, true)
		}
		charges := 1 + rng.IntN(2)
		first := ""
		for j := 1; j <= charges; j++ {
			id := fmt.Sprintf("%s_charge%d", pre, j)
			args := map[string]any{"customer": ref(contact, "id"), "currency": "EUR", "reference": fmt.Sprintf("%s-%s-%d", run, pre, j)}
			deps := []string{contact}
			switch {
			case declined && c == customers && j == charges:
				args["amount"] = 9500
			case item != "" && j == 1:
				args["amount"] = ref(item, "price")
				deps = append(deps, item)
			default:
				args["amount"] = 100 + rng.IntN(5000)
			}
			add(genAction{ID: id, Tool: ToolCharge, Args: args, DependsOn: deps}, true)
			if first == "" {
				first = id
			}
		}
		add(genAction{ID: pre + "_settings", Tool: ToolSettings, DependsOn: []string{contact, first},
			Args: map[string]any{"account": ref(contact, "id"), "settings": map[string]any{"plan": sku, "last_charge": ref(first, "id")}}}, true)
		add(genAction{ID: pre + "_welcome", Tool: ToolEmail, DependsOn: []string{contact},
			Args: map[string]any{"to": email, "template": "welcome", "ref": ref(contact, "id")}}, true)
		if rng.Float64() < 0.6 {
			add(genAction{ID: pre + "_receipt", Tool: ToolEmail, DependsOn: []string{first},
				Args: map[string]any{"to": email, "template": "receipt", "ref": ref(first, "id")}}, true)
		}
	}
	// Shapes people make (a separate random stream, so the actions above
	// stay those of earlier harness versions): a wide fan-out from a
	// customer's contact, joined again by one action that depends on every
	// branch and on the settings (themselves a join): fan-in, diamond and
	// join of joins in one plan.
	shapes := newRand(seed, "shapes", n)
	for c := 1; c <= customers; c++ {
		if shapes.Float64() >= 0.4 {
			continue
		}
		pre := fmt.Sprintf("c%d", c)
		contact := pre + "_contact"
		join := []string{pre + "_settings"}
		refs := map[string]any{}
		for i := 1; i <= 2+shapes.IntN(5); i++ {
			id := fmt.Sprintf("%s_fan%d", pre, i)
			// Contacts (a lookup by key, no visibility lag): the lag races
			// stay those of the leads, which TestChaosVisibilityLag counts.
			add(genAction{ID: id, Tool: ToolContact, DependsOn: []string{contact},
				Args: map[string]any{"name": fmt.Sprintf("Referral %d of %s of %s", i, pre, run), "email": fmt.Sprintf("ref%d.%s.%s@example.test", i, pre, run)}}, false)
			join = append(join, id)
			refs[id] = ref(id, "id")
		}
		add(genAction{ID: pre + "_digest", Tool: ToolEmail, DependsOn: join,
			Args: map[string]any{"to": fmt.Sprintf("%s.%s@example.test", pre, run), "template": "digest", "ref": ref(pre+"_settings", "account")}}, false)
	}
	b, err := json.MarshalIndent(p, "", " ")
	if err != nil {
		panic(err) // maps of strings and numbers only: cannot fail
	}
	return append(b, '\n'), len(p.Actions)
}

// ToolsOptions describe the tools file of one run.
type ToolsOptions struct {
	Base        string        // the run's namespace in the world: http://HOST/NS
	Protected   bool          // keys, lookups and at_most_once; false: every writing tool declared idempotent, no key, no lookup
	Timeout     time.Duration // every tool's call timeout
	LagDeclared time.Duration // the leads tool's visibility_lag
}

// ToolsFile returns the tools file (tools/README.md, version 1) for the world's
// services. Unprotected, the same tools are declared idempotent without
// key_header or lookup, and the CRM note carries no key: plain retries.
func ToolsFile(o ToolsOptions) []byte {
	obj := func(props map[string]any, required ...string) map[string]any {
		return map[string]any{"type": "object", "properties": props, "required": required, "additionalProperties": false}
	}
	str := map[string]any{"type": "string"}
	timeout := o.Timeout.String()
	write := func(protected string) string {
		if o.Protected {
			return protected
		}
		return "idempotent"
	}
	contactTool := func(name, path, desc string, lag time.Duration) map[string]any {
		t := map[string]any{
			"name":         name,
			"description":  desc,
			"effect":       write("lookup"),
			"input_schema": obj(map[string]any{"name": str, "email": str}, "name", "email"),
			"request": map[string]any{
				"method": "POST",
				"url":    o.Base + path,
				"body":   map[string]any{"name": "{{.name}}", "email": "{{.email}}"},
			},
			"timeout": timeout,
		}
		if o.Protected {
			t["request"].(map[string]any)["body"].(map[string]any)["note"] = "{{key}}"
			t["lookup"] = map[string]any{"method": "GET", "url": o.Base + path + "?note={{key}}", "found": "nonempty"}
			t["visibility_lag"] = lag.String()
		}
		return t
	}
	charge := map[string]any{
		"name":        ToolCharge,
		"description": "Charge a customer.",
		"effect":      write("keyed"),
		"input_schema": obj(map[string]any{
			"customer":  str,
			"amount":    map[string]any{"type": "integer", "minimum": 1},
			"currency":  str,
			"reference": str,
		}, "customer", "amount", "currency", "reference"),
		"request": map[string]any{"method": "POST", "url": o.Base + "/payments/charges"},
		"timeout": timeout,
	}
	if o.Protected {
		charge["key_header"] = "Idempotency-Key"
		charge["key_ttl"] = "24h"
	}
	file := map[string]any{
		"version": 1,
		"tools": []any{
			map[string]any{
				"name":         ToolCatalogue,
				"description":  "Look up a catalogue item's price.",
				"effect":       "read_only",
				"input_schema": obj(map[string]any{"sku": str}, "sku"),
				"request":      map[string]any{"method": "GET", "url": o.Base + "/catalogue/items/{{.sku}}"},
				"timeout":      timeout,
			},
			contactTool(ToolContact, "/crm/contacts", "Create a CRM contact.", 0),
			contactTool(ToolLead, "/leads/leads", "Create a sales lead (searches see new leads late).", o.LagDeclared),
			charge,
			map[string]any{
				"name":         ToolSettings,
				"description":  "Replace an account's settings.",
				"effect":       "idempotent",
				"input_schema": obj(map[string]any{"account": str, "settings": map[string]any{"type": "object"}}, "account", "settings"),
				"request": map[string]any{
					"method": "PUT",
					"url":    o.Base + "/settings/accounts/{{.account}}",
					"body":   "{{.settings}}",
				},
				"timeout": timeout,
			},
			map[string]any{
				"name":         ToolEmail,
				"description":  "Send an email from a template. No key, no search.",
				"effect":       write("at_most_once"),
				"input_schema": obj(map[string]any{"to": str, "template": str, "ref": str}, "to", "template"),
				"request":      map[string]any{"method": "POST", "url": o.Base + "/email/messages"},
				"timeout":      timeout,
			},
		},
	}
	if o.Protected {
		// A budget on charges whose limit is never reached: the harness
		// compares its usage with the world's charges after every run.
		file["budgets"] = []any{map[string]any{"name": BudgetCharges, "tools": []any{ToolCharge}, "per": "run",
			"sum": "amount", "group_by": "currency", "limit": "1000000000", "outcome": "deny"}}
	}
	b, err := json.MarshalIndent(file, "", " ")
	if err != nil {
		panic(err)
	}
	return append(b, '\n')
}
