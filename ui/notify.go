package ui

import (
	"bytes"
	"context"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"time"
)

// Webhook headers: every --notify call carries its delivery's id (the same
// on every retry of that delivery, so a receiver drops repeats) and, with a
// secret, its signature.
const (
	HeaderDelivery  = "Docket-Delivery"
	HeaderSignature = "Docket-Signature"
)

// SignWebhook is the Docket-Signature value of body sent at unix time t:
// "t=T,v1=" + hex(HMAC-SHA256(secret, "T." + body)).
func SignWebhook(secret []byte, t int64, body []byte) string {
	ts := strconv.FormatInt(t, 10)
	mac := hmac.New(sha256.New, secret)
	mac.Write([]byte(ts))
	mac.Write([]byte{'.'})
	mac.Write(body)
	return "t=" + ts + ",v1=" + hex.EncodeToString(mac.Sum(nil))
}

// Webhook verification errors.
var (
	ErrWebhookSignature = errors.New("webhook signature does not match")
	ErrWebhookStale     = errors.New("webhook timestamp is outside the tolerance")
)

// VerifyWebhook checks a Docket-Signature header against body: some v1
// signature matches (a header may carry several while secrets rotate) and
// its timestamp is within tolerance of now (replays of an old call are
// refused). A receiver in Go can call it; the README shows the same in a
// few lines for receivers that do not import docket.
func VerifyWebhook(secret []byte, header string, body []byte, now time.Time, tolerance time.Duration) error {
	var (
		ts   int64
		sigs []string
		hasT bool
	)
	for _, part := range strings.Split(header, ",") {
		k, v, _ := strings.Cut(strings.TrimSpace(part), "=")
		switch k {
		case "t":
			n, err := strconv.ParseInt(v, 10, 64)
			if err != nil {
				return fmt.Errorf("%w: bad t", ErrWebhookSignature)
			}
			ts, hasT = n, true
		case "v1":
			sigs = append(sigs, v)
		}
	}
	if !hasT || len(sigs) == 0 {
		return fmt.Errorf("%w: the header needs t= and v1=", ErrWebhookSignature)
	}
	want := SignWebhook(secret, ts, body)
	_, wantSig, _ := strings.Cut(want, ",v1=")
	ok := false
	for _, sig := range sigs {
		if hmac.Equal([]byte(sig), []byte(wantSig)) {
			ok = true
		}
	}
	if !ok {
		return ErrWebhookSignature
	}
	if d := now.Sub(time.Unix(ts, 0)); d > tolerance || d < -tolerance {
		return fmt.Errorf("%w: signed %s ago, tolerance %s", ErrWebhookStale, d.Round(time.Second), tolerance)
	}
	return nil
}

// notify delivers body to the webhook in the background: one delivery id,
// calls signed afresh (their timestamp is the call's), retried with backoff
// on an error or a non-2xx answer until Config.NotifyAttempts run out or the
// server shuts down.
func (s *Server) notify(runID string, body []byte) {
	id, err := randomHex(16)
	if err != nil {
		s.log.Warn("webhook delivery id", "err", err)
		return
	}
	id = "dlv_" + id
	s.notifyWG.Add(1)
	go func() {
		defer s.notifyWG.Done()
		wait := s.cfg.NotifyBackoff
		for attempt := 1; ; attempt++ {
			err := s.notifyOnce(id, body)
			if err == nil {
				s.metrics.webhooks.Add(1)
				return
			}
			s.metrics.webhookFailures.Add(1)
			if attempt >= s.cfg.NotifyAttempts {
				s.log.Warn("webhook delivery given up", "run_id", runID, "delivery", id, "attempts", attempt, "err", err)
				return
			}
			s.log.Warn("webhook call failed: retrying", "run_id", runID, "delivery", id, "attempt", attempt, "retry_in", wait, "err", err)
			t := time.NewTimer(wait)
			select {
			case <-t.C:
			case <-s.ctx.Done():
				t.Stop()
				s.log.Warn("webhook delivery dropped: the server is shutting down", "run_id", runID, "delivery", id)
				return
			}
			wait = min(2*wait, time.Minute)
		}
	}()
}

// notifyOnce makes one call of a delivery.
func (s *Server) notifyOnce(id string, body []byte) error {
	ctx, cancel := context.WithTimeout(s.ctx, 10*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, s.cfg.Notify, bytes.NewReader(body))
	if err != nil {
		return err
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set(HeaderDelivery, id)
	if s.cfg.NotifySecret != "" {
		req.Header.Set(HeaderSignature, SignWebhook([]byte(s.cfg.NotifySecret), s.cfg.Now().Unix(), body))
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return err
	}
	resp.Body.Close()
	if resp.StatusCode < 200 || resp.StatusCode >= 300 {
		return fmt.Errorf("answered %d", resp.StatusCode)
	}
	return nil
}
