package main

import (
	"context"
	"errors"
	"io"
	"path/filepath"
	"strings"
	"sync"
	"testing"
)

// A whole chat session fed through stdin: plan, approve (twice: the
// at-most-once email is shown again once its reference resolved), results
// back into the conversation, a turn without actions, a declined plan.
func TestChatSession(t *testing.T) {
	b := setup(t)
	m := newChatModel(t,
		// turn 1
		wireReply("", [3]string{"c1", "crm_create_contact", `{"company":"ACME","email":"billing@acme.example"}`}),
		wireReply("", [3]string{"c2", "email_send", `{"to":"billing@acme.example","template":"welcome-pack","contact_id":"${a1.output.id}"}`}),
		wireReply("I will create the contact and then send the welcome pack."),
		// turn 2
		wireReply("You're welcome."),
		// turn 3
		wireReply("", [3]string{"c3", "payments_create_invoice", `{"customer":"c_1","amount":1200,"currency":"EUR","reference":"acme-1"}`}),
		wireReply("Invoice planned."),
	)
	stdin := "onboard ACME\ny\ny\nthanks\ninvoice them 1200 EUR\nn\nexit\n"
	code, out, errOut := runWith(t, modelEnv(m, stdin, nil, nil), "chat", "--tools", b.tools, "--data", filepath.Join(b.dir, "chat-data"))
	if code != 0 {
		t.Fatalf("exit %d\nstdout:\n%s\nstderr:\n%s", code, out, errOut)
	}
	for _, want := range []string{
		"a1  crm_create_contact  [lookup]",
		"key   dk1_",
		"a2  email_send  [at_most_once]",
		"(derived once ${a1.output.id} resolves)",
		"after a1",
		"approve and perform it? [y/N]",
		"approve a2 now (arguments resolved)? [y/N]",
		"a1  crm_create_contact  succeeded",
		"a2  email_send  succeeded",
		"model> You're welcome.",
		"a3  payments_create_invoice  [keyed]",
		"declined: nothing more is performed",
		"bye",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("stdout lacks %q\n%s", want, out)
		}
	}
	// The key shown before approval is the key a1 ran under (the CRM stores it).
	if i := strings.Index(out, "key   dk1_"); i < 0 || !strings.Contains(out, `"external_ref":"`+out[i+6:i+6+68]+`"`) {
		t.Errorf("the key shown for a1 is not the one it ran under\n%s", out)
	}
	eff := b.world.Effects()
	if eff["crm/billing@acme.example"] != 1 || eff["email/billing@acme.example/welcome-pack"] != 1 || eff["payments/acme-1"] != 0 {
		t.Errorf("effects = %v", eff)
	}
	reqs := m.requests()
	if len(reqs) != 6 {
		t.Fatalf("%d model requests", len(reqs))
	}
	// Turn 2 carries the conversation and the results of turn 1.
	msgs := reqs[3]["messages"].([]any)
	var sawResults, sawGoal bool
	for _, mm := range msgs {
		c, _ := mm.(map[string]any)["content"].(string)
		sawResults = sawResults || (strings.Contains(c, "Results of run chat_") && strings.Contains(c, "a2 (email_send): succeeded"))
		sawGoal = sawGoal || c == "onboard ACME"
	}
	if !sawResults || !sawGoal || msgs[len(msgs)-1].(map[string]any)["content"] != "thanks" {
		t.Errorf("turn 2 request messages = %v", msgs)
	}
}

// notifyWriter collects output and signals when it contains a marker.
type notifyWriter struct {
	mu     sync.Mutex
	buf    strings.Builder
	marker string
	seen   chan struct{}
	once   sync.Once
}

func (w *notifyWriter) Write(p []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.buf.Write(p)
	if strings.Contains(w.buf.String(), w.marker) {
		w.once.Do(func() { close(w.seen) })
	}
	return len(p), nil
}

// Ctrl-C at the approval prompt: the command ends, the plan stays recorded
// and waiting, nothing was performed.
func TestChatInterruptedAtApproval(t *testing.T) {
	b := setup(t)
	m := newChatModel(t,
		wireReply("", [3]string{"c1", "crm_create_contact", `{"company":"ACME","email":"billing@acme.example"}`}),
		wireReply("planned"),
	)
	pr, pw := io.Pipe()
	defer pw.Close()
	out := &notifyWriter{marker: "approve and perform it?", seen: make(chan struct{})}
	env := modelEnv(m, "", out, io.Discard)
	env.Stdin = pr
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	data := filepath.Join(b.dir, "chat-data")
	done := make(chan error, 1)
	go func() { done <- runEnv(ctx, []string{"chat", "--tools", b.tools, "--data", data}, env) }()
	if _, err := io.WriteString(pw, "onboard ACME\n"); err != nil {
		t.Fatal(err)
	}
	select {
	case <-out.seen:
	case err := <-done:
		t.Fatalf("chat ended early: %v\n%s", err, out.buf.String())
	}
	cancel()
	if err := <-done; !errors.Is(err, context.Canceled) {
		t.Fatalf("err = %v", err)
	}
	if len(b.world.Effects()) != 0 {
		t.Errorf("effects = %v", b.world.Effects())
	}
	r := inproc(t, "runs", "list", "--data", data, "--json")
	if r.code != 0 || !strings.Contains(r.stdout, `"awaiting_approval"`) {
		t.Errorf("the plan must stay recorded, waiting:\n%s", r)
	}
}
