package event

import (
	"bytes"
	"context"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/base64"
	"errors"
	"fmt"
	"hash/maphash"
	"io"
	"net"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"
)

// ContentType is a delivery's Content-Type: the structured mode of
// CloudEvents' HTTP binding.
const ContentType = "application/cloudevents+json"

// WebhookLanes is how many deliveries to one endpoint are in flight at
// once; one order's events always take the same lane, in order.
const WebhookLanes = 16

// WebhookMaxHeaderBytes bounds an endpoint's answer headers.
const WebhookMaxHeaderBytes = 64 << 10

// Webhook is one endpoint as a sink: each event a POST signed by Standard
// Webhooks' rules (webhook-id, webhook-timestamp, webhook-signature).
type Webhook struct {
	name, url string
	key       []byte
	client    *http.Client
	now       func() time.Time
	seed      maphash.Seed
}

// NewWebhook is the sink of the endpoint rawURL, signing with secret
// ("whsec_..."), each delivery bounded by timeout.
func NewWebhook(rawURL, secret string, timeout time.Duration) (*Webhook, error) {
	name, err := WebhookName(rawURL)
	if err != nil {
		return nil, err
	}
	key, err := SecretKey(secret)
	if err != nil {
		return nil, err
	}
	tr := http.DefaultTransport.(*http.Transport).Clone()
	tr.MaxIdleConnsPerHost = WebhookLanes
	// An endpoint's answer is bounded: its headers (Go's default is
	// 10 MiB, 16 lanes at once), the wait for its first byte, and its body
	// (read to 64 KiB, post).
	tr.MaxResponseHeaderBytes = WebhookMaxHeaderBytes
	tr.ResponseHeaderTimeout = timeout
	client := &http.Client{Transport: tr, Timeout: timeout,
		// A redirect is not a delivery: the endpoint's URL is wrong.
		CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
	return &Webhook{name: name, url: rawURL, key: key, client: client, now: time.Now, seed: maphash.MakeSeed()}, nil
}

// Name is "webhook:" and the endpoint's URL.
func (w *Webhook) Name() string { return w.name }

// Close closes the idle connections.
func (w *Webhook) Close() { w.client.CloseIdleConnections() }

// Lanes is how many lanes an endpoint's deliveries take (WebhookLanes).
func (w *Webhook) Lanes() int { return WebhookLanes }

// Lane is e's lane: one order's events (its subject) always take the
// same one, in order.
func (w *Webhook) Lane(e Event) int { return int(maphash.String(w.seed, e.Subject) % WebhookLanes) }

// SendLane POSTs events one after another, as one lane sends them, and
// stops at the first that fails: those before it are delivered.
func (w *Webhook) SendLane(ctx context.Context, events []Event) ([]bool, error) {
	ok := make([]bool, len(events))
	for i, e := range events {
		if err := w.post(ctx, e); err != nil {
			return ok, err
		}
		ok[i] = true
	}
	return ok, nil
}

// Send POSTs events over WebhookLanes lanes, one order's events on one lane
// in order; a lane stops at its first failure.
func (w *Webhook) Send(ctx context.Context, events []Event) (int, error) {
	if len(events) == 1 {
		if err := w.post(ctx, events[0]); err != nil {
			return 0, err
		}
		return 1, nil
	}
	var lanes [WebhookLanes][]int
	for i, e := range events {
		l := w.Lane(e)
		lanes[l] = append(lanes[l], i)
	}
	ctx, cancel := context.WithCancel(ctx) // a 410 stops every lane
	defer cancel()
	var mu sync.Mutex
	first, firstErr, gone := len(events), error(nil), error(nil)
	var wg sync.WaitGroup
	for _, lane := range lanes {
		if len(lane) == 0 {
			continue
		}
		wg.Go(func() {
			for _, i := range lane {
				if err := w.post(ctx, events[i]); err != nil {
					mu.Lock()
					if i < first {
						first, firstErr = i, err
					}
					if f, ok := errors.AsType[*Failure](err); ok && f.Gone {
						gone = err
						cancel()
					}
					mu.Unlock()
					return
				}
			}
		})
	}
	wg.Wait()
	if gone != nil { // what the other lanes saw is the cancel
		return first, gone
	}
	return first, firstErr
}

// post delivers one event.
func (w *Webhook) post(ctx context.Context, e Event) error {
	body := e.JSON()
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, w.url, bytes.NewReader(body))
	if err != nil {
		return &Failure{Cause: "other", Err: err}
	}
	ts := strconv.FormatInt(w.now().Unix(), 10)
	req.Header.Set("Content-Type", ContentType)
	req.Header.Set("User-Agent", "flashsale-events")
	req.Header.Set("webhook-id", e.ID)
	req.Header.Set("webhook-timestamp", ts)
	req.Header.Set("webhook-signature", "v1,"+Sign(w.key, e.ID, ts, body))
	resp, err := w.client.Do(req)
	if err != nil {
		return &Failure{Cause: transportCause(err), Err: w.redact(err)}
	}
	_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, 64<<10)) // the connection is reused
	resp.Body.Close()
	switch c := resp.StatusCode; {
	case c >= 200 && c < 300:
		return nil
	case c == http.StatusGone:
		return &Failure{Cause: "gone", Gone: true, Err: errors.New("410 Gone: the endpoint asks for no more events")}
	default:
		return &Failure{Cause: "http_" + strconv.Itoa(c/100) + "xx", Err: fmt.Errorf("answered %s", resp.Status)}
	}
}

// redact is a client's error with the endpoint named as the sink is
// (no credentials, no query): the error is logged, stored in
// event_sinks and shown by the API, the console and the CLI.
func (w *Webhook) redact(err error) error {
	var ue *url.Error
	if errors.As(err, &ue) {
		return &redacted{msg: ue.Op + " " + strings.TrimPrefix(w.name, "webhook:") + ": " + ue.Err.Error(), err: ue.Err}
	}
	return err
}

// redacted is an error whose text is msg, wrapping err (for its cause).
type redacted struct {
	msg string
	err error
}

func (e *redacted) Error() string { return e.msg }
func (e *redacted) Unwrap() error { return e.err }

// transportCause is a failed request's cause label.
func transportCause(err error) string {
	var ne net.Error
	switch {
	case errors.As(err, &ne) && ne.Timeout(), errors.Is(err, context.DeadlineExceeded):
		return "timeout"
	case errors.Is(err, syscall.ECONNREFUSED):
		return "refused"
	default:
		return "connection"
	}
}

// Sign is the base64 HMAC-SHA256, under key, of "id.timestamp.body": a
// Standard Webhooks signature (sent as "v1," and it).
func Sign(key []byte, id, timestamp string, body []byte) string {
	mac := hmac.New(sha256.New, key)
	mac.Write([]byte(id))
	mac.Write([]byte{'.'})
	mac.Write([]byte(timestamp))
	mac.Write([]byte{'.'})
	mac.Write(body)
	return base64.StdEncoding.EncodeToString(mac.Sum(nil))
}
