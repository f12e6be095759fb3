package ui

import (
	"bufio"
	"errors"
	"net/http"
	"strconv"

	"github.com/docketrun/docket/ledger"
)

// audit is GET /v1/runs/{id}/audit: the run's whole history as JSON Lines
// (one event per line, with its hash), for download. The chain is verified
// before anything is sent: Docket-Audit says "verified", "broken" (and
// Docket-Audit-Broken-At the first event that does not verify) or
// "unchained" (a run from before the audit chain); Docket-Audit-Head is the
// hash of the last event.
func (s *Server) audit(w http.ResponseWriter, r *http.Request) {
	runID := r.PathValue("id")
	run, err := s.led.GetRun(r.Context(), runID)
	if err != nil {
		s.fail(w, err)
		return
	}
	evs, err := s.led.Events(r.Context(), runID, 0, 0)
	if err != nil {
		s.fail(w, err)
		return
	}
	chained, verr := ledger.VerifyChain(runID, evs, run.AuditHash)
	state := "verified"
	var ce *ledger.ChainError
	switch {
	case errors.As(verr, &ce):
		state = "broken"
		w.Header().Set("Docket-Audit-Broken-At", strconv.FormatUint(ce.Seq, 10))
	case !chained:
		state = "unchained"
	}
	w.Header().Set("Docket-Audit", state)
	if run.AuditHash != "" {
		w.Header().Set("Docket-Audit-Head", run.AuditHash)
	}
	w.Header().Set("Content-Type", "application/jsonl")
	w.Header().Set("Content-Disposition", `attachment; filename="docket-audit-`+fileSafe(runID)+`.jsonl"`)
	w.WriteHeader(http.StatusOK)
	bw := bufio.NewWriter(w)
	var line []byte
	for _, ev := range evs {
		if line, err = AppendEventLine(line[:0], ev); err != nil {
			return
		}
		if _, err := bw.Write(line); err != nil {
			return
		}
	}
	bw.Flush()
}

// fileSafe keeps letters, digits, '.', '_' and '-' of s ('_' for the rest).
func fileSafe(s string) string {
	b := []byte(s)
	for i, c := range b {
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '.' || c == '_' || c == '-') {
			b[i] = '_'
		}
	}
	return string(b)
}
