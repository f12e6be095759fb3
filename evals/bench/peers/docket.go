package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"

	"github.com/docketrun/docket/executor"
	"github.com/docketrun/docket/ledger"
	"github.com/docketrun/docket/ledger/badgerdb"
	pgledger "github.com/docketrun/docket/ledger/postgres"
	"github.com/docketrun/docket/plan"
	"github.com/docketrun/docket/tools"
	"github.com/docketrun/docket/tools/httptool"
)

// docketSide is docket's executor as an application embedding it would run
// it: over a Badger ledger in its own directory (side "docket"), or over the
// shared ledger on PostgreSQL (side "docket-pg": ledger/postgres with its
// defaults, as `docket serve --ledger postgres://…` opens it).
type docketSide struct {
	led  ledger.Store
	eng  *executor.Engine
	tool string
	file *httptool.File
}

type stepArgs struct {
	I int `json:"i"`
}

type stepOut struct {
	OK bool `json:"ok"`
}

// timed wraps a tool so that the recorder sees when its call starts and ends.
type timed struct {
	tools.Tool
	rec *recorder
}

func (t timed) Call(ctx context.Context, c tools.Call) (json.RawMessage, error) {
	t.rec.enter()
	defer t.rec.exit()
	return t.Tool.Call(ctx, c)
}

func openDocket(ctx context.Context, spec childSpec, rec *recorder) (engine, error) {
	quiet := slog.New(slog.NewTextHandler(io.Discard, nil))
	d := &docketSide{}
	var tool tools.Tool
	switch spec.Workload {
	case "noop":
		d.tool = "noop"
		tool = tools.Func(tools.Spec{Name: "noop", Description: "returns at once", Class: tools.Keyed},
			func(ctx context.Context, c tools.Call, in stepArgs) (stepOut, error) {
				rec.enter()
				defer rec.exit()
				return stepOut{OK: true}, nil
			})
	case "http":
		d.tool = "step"
		// The same kind of tools file a user writes: a keyed POST that sends
		// the action's key in Idempotency-Key.
		file := fmt.Sprintf(`{"version": 1, "tools": [{
			"name": "step", "description": "POST one step to the loopback endpoint", "effect": "keyed",
			"input_schema": {"type": "object", "properties": {"i": {"type": "integer"}}, "required": ["i"]},
			"request": {"method": "POST", "url": %q},
			"key_header": "Idempotency-Key", "timeout": "10s"}]}`, spec.HTTPURL)
		f, err := httptool.Parse([]byte(file), func(string) string { return "" })
		if err != nil {
			return nil, err
		}
		d.file = f
		tool = timed{Tool: f.Tools[0], rec: rec}
	default:
		return nil, fmt.Errorf("unknown workload %q", spec.Workload)
	}
	reg, err := tools.NewRegistry(tool)
	if err != nil {
		return nil, err
	}
	switch spec.Side {
	case "docket":
		d.led, err = badgerdb.Open(ctx, badgerdb.Config{Dir: spec.Dir, Logger: quiet})
	case "docket-pg":
		d.led, err = pgledger.Open(ctx, pgledger.Config{URL: spec.DSN, Logger: quiet})
	default:
		err = fmt.Errorf("unknown docket side %q", spec.Side)
	}
	if err != nil {
		return nil, err
	}
	// Parallelism is per run; each run here is a chain, so 1 would do as well.
	if d.eng, err = executor.New(executor.Config{Ledger: d.led, Tools: reg, Logger: quiet}); err != nil {
		d.led.Close()
		return nil, err
	}
	return d, nil
}

func (d *docketSide) run(ctx context.Context, id string, steps int) error {
	p := &plan.Plan{Goal: "peers benchmark"}
	for i := range steps {
		a := plan.Action{ID: fmt.Sprintf("s%d", i), Tool: d.tool, Args: json.RawMessage(fmt.Sprintf(`{"i":%d}`, i))}
		if i > 0 {
			a.DependsOn = []string{fmt.Sprintf("s%d", i-1)}
		}
		p.Actions = append(p.Actions, a)
	}
	// Policy all: every action is pre-approved (no person in the loop here).
	doc, err := d.eng.Run(ctx, id, p, &executor.RunOptions{Policy: executor.PolicyAll})
	if err != nil {
		return err
	}
	if doc.Run.Status != ledger.RunCompleted {
		return fmt.Errorf("run %s ended %s: %s", id, doc.Run.Status, doc.Run.Error)
	}
	return nil
}

func (d *docketSide) close() error {
	if d.file != nil {
		d.file.CloseIdleConnections()
	}
	return d.led.Close()
}
