package main

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"time"

	"github.com/dbos-inc/dbos-transact-golang/dbos"
)

// dbosSide is DBOS Transact with its system database on the throwaway
// cluster: a workflow of steps durable steps, run as DBOS's README shows.
type dbosSide struct {
	ctx dbos.Context
	wf  dbos.Workflow[int, int]
}

func openDBOS(ctx context.Context, spec childSpec, rec *recorder) (engine, error) {
	quiet := slog.New(slog.NewTextHandler(io.Discard, nil))
	// Configured like docket's HTTP tools (see newHTTPClient).
	client := newHTTPClient()
	var step func(ctx context.Context, wfID string, i int) error
	switch spec.Workload {
	case "noop":
		step = func(context.Context, string, int) error { return nil }
	case "http":
		step = func(ctx context.Context, wfID string, i int) error {
			req, err := http.NewRequestWithContext(ctx, http.MethodPost, spec.HTTPURL,
				bytes.NewReader(fmt.Appendf(nil, `{"i":%d}`, i)))
			if err != nil {
				return err
			}
			req.Header.Set("Content-Type", "application/json")
			req.Header.Set("Idempotency-Key", fmt.Sprintf("%s/%d", wfID, i))
			resp, err := client.Do(req)
			if err != nil {
				return err
			}
			defer resp.Body.Close()
			if _, err := io.Copy(io.Discard, resp.Body); err != nil {
				return err
			}
			if resp.StatusCode/100 != 2 {
				return fmt.Errorf("POST %s: %s", spec.HTTPURL, resp.Status)
			}
			return nil
		}
	default:
		return nil, fmt.Errorf("unknown workload %q", spec.Workload)
	}

	dctx, err := dbos.NewContext(ctx, dbos.Config{AppName: "docket-peers", DatabaseURL: spec.DSN, Logger: quiet})
	if err != nil {
		return nil, fmt.Errorf("dbos: %w", err)
	}
	wf := func(ctx dbos.Context, steps int) (int, error) {
		wfID, err := dbos.GetWorkflowID(ctx)
		if err != nil {
			return 0, err
		}
		for i := range steps {
			if _, err := dbos.RunAsStep(ctx, func(c context.Context) (bool, error) {
				rec.enter()
				defer rec.exit()
				return true, step(c, wfID, i)
			}, dbos.WithStepName("step")); err != nil {
				return 0, err
			}
		}
		return steps, nil
	}
	dbos.RegisterWorkflow(dctx, wf, dbos.WithWorkflowName("chain"))
	if err := dbos.Launch(dctx); err != nil {
		return nil, fmt.Errorf("dbos launch: %w", err)
	}
	return &dbosSide{ctx: dctx, wf: wf}, nil
}

func (d *dbosSide) run(ctx context.Context, id string, steps int) error {
	h, err := dbos.RunWorkflow(d.ctx, d.wf, steps, dbos.WithWorkflowID(id))
	if err != nil {
		return err
	}
	n, err := h.GetResult()
	if err != nil {
		return err
	}
	if n != steps {
		return fmt.Errorf("workflow %s: %d steps, want %d", id, n, steps)
	}
	return nil
}

func (d *dbosSide) close() error {
	return dbos.Shutdown(d.ctx, 10*time.Second)
}
