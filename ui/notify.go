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
	"net/url"
	"regexp"
	"strconv"
	"strings"
	"time"
)

// Webhook headers: every --notify call carries its delivery's id (the same
// on every retry of that delivery, so a receiver drops repeats) and, with a
// secret, its signature, which covers the id, the call's time and the body.
const (
	HeaderDelivery  = "Docket-Delivery"
	HeaderSignature = "Docket-Signature"
)

// SignWebhook is the Docket-Signature value of delivery id's body sent at
// unix time t: "t=T,v1=" + hex(HMAC-SHA256(secret, T + "." + body)) +
// ",v2=" + hex(HMAC-SHA256(secret, ID + "." + T + "." + body)). v2 signs
// the id too, so that a captured call cannot be replayed under a new id
// past a receiver that drops repeated ids; v1, the signature receivers
// written before v2 check, is still sent so that they keep working.
func SignWebhook(secret []byte, id string, t int64, body []byte) string {
	ts := strconv.FormatInt(t, 10)
	v1 := hmac.New(sha256.New, secret)
	v1.Write([]byte(ts + "."))
	v1.Write(body)
	return "t=" + ts + ",v1=" + hex.EncodeToString(v1.Sum(nil)) + ",v2=" + hex.EncodeToString(webhookMAC(secret, id, ts, body))
}

func webhookMAC(secret []byte, id, ts string, body []byte) []byte {
	mac := hmac.New(sha256.New, secret)
	mac.Write([]byte(id))
	mac.Write([]byte{'.'})
	mac.Write([]byte(ts))
	mac.Write([]byte{'.'})
	mac.Write(body)
	return mac.Sum(nil)
}

// Webhook verification errors.
var (
	ErrWebhookSignature = errors.New("webhook signature does not match")
	ErrWebhookStale     = errors.New("webhook timestamp is outside the tolerance")
)

// deliveryIDRE is what a delivery id may hold: no '.', so that the signed
// string splits one way only.
var deliveryIDRE = regexp.MustCompile(`^[A-Za-z0-9_-]{1,128}$`)

// VerifyWebhook checks a call's Docket-Signature header against its
// Docket-Delivery id and body: some v2 signature matches (a header may carry
// several while secrets rotate) and its timestamp is within tolerance of now
// (replays of an old call are refused). A receiver still drops an id it has
// seen within the tolerance: that is a retry, or a replay of a recent call.
// A receiver in Go can call it; the README shows the same in a few lines for
// receivers that do not import docket.
func VerifyWebhook(secret []byte, id, header string, body []byte, now time.Time, tolerance time.Duration) error {
	if !deliveryIDRE.MatchString(id) {
		return fmt.Errorf("%w: bad delivery id %q", ErrWebhookSignature, id)
	}
	var (
		ts   string
		sigs []string
	)
	for _, part := range strings.Split(header, ",") {
		k, v, _ := strings.Cut(strings.TrimSpace(part), "=")
		switch k {
		case "t":
			ts = v
		case "v2":
			sigs = append(sigs, v)
		}
	}
	t, err := strconv.ParseInt(ts, 10, 64)
	if err != nil || len(sigs) == 0 {
		return fmt.Errorf("%w: the header needs t= and v2=", ErrWebhookSignature)
	}
	want := hex.EncodeToString(webhookMAC(secret, id, ts, body))
	ok := false
	for _, sig := range sigs {
		if hmac.Equal([]byte(sig), []byte(want)) {
			ok = true
		}
	}
	if !ok {
		return ErrWebhookSignature
	}
	if d := now.Sub(time.Unix(t, 0)); d > tolerance || d < -tolerance {
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
		req.Header.Set(HeaderSignature, SignWebhook([]byte(s.cfg.NotifySecret), id, s.cfg.Now().Unix(), body))
	}
	// Redirects are not followed: the call (its body, its signature) goes
	// to the configured URL only, whoever answers it.
	client := &http.Client{CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
	resp, err := client.Do(req)
	if err != nil {
		return err
	}
	resp.Body.Close()
	switch {
	case resp.StatusCode >= 300 && resp.StatusCode < 400:
		return fmt.Errorf("answered %d with a redirect to %s, not followed (webhook calls go to the --notify URL only)", resp.StatusCode, redactedLocation(resp.Header.Get("Location")))
	case resp.StatusCode < 200 || resp.StatusCode >= 300:
		return fmt.Errorf("answered %d", resp.StatusCode)
	}
	return nil
}

// redactedLocation is a redirect's Location for the log: without user
// information or query, which may hold credentials.
func redactedLocation(loc string) string {
	if loc == "" {
		return "(no Location)"
	}
	u, err := url.Parse(loc)
	if err != nil {
		return "(an unreadable Location)"
	}
	u.User = nil
	if u.RawQuery != "" {
		u.RawQuery = "…"
	}
	u.Fragment = ""
	return strconv.Quote(u.String())
}
