// Package testsink holds the real receivers the events' sinks are tested
// against: a webhook endpoint that verifies every delivery by Standard
// Webhooks' rules, written here from the spec and not with the sender's
// code; a Kafka broker (franz-go's kfake, the Kafka protocol in process)
// read back with franz-go's consumer; and Check, which holds what a sink
// received to the outbox.
package testsink

import (
	"bytes"
	"context"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/flashsale/flashsale/pkg/db"
	"github.com/flashsale/flashsale/pkg/event"
)

// Delivery is an event as a sink received it, and when (a webhook
// endpoint's deliveries: when the request's body was read).
type Delivery struct {
	ID, Type, Subject, Sequence string
	Body                        []byte
	At                          time.Time
}

// Secret is a Standard Webhooks secret for tests.
var Secret = "whsec_" + base64.StdEncoding.EncodeToString([]byte("flashsale-test-signing-key-32byt"))

// Answer is how a Receiver answers a delivery.
type Answer int

const (
	OK    Answer = iota // 204
	Fail                // 500
	Hang                // no answer until the client gives up
	Close               // the connection closed without an answer
	Gone                // 410
)

// Receiver is a webhook endpoint over real HTTP.
type Receiver struct {
	URL      string
	srv      *httptest.Server
	key      []byte
	mu       sync.Mutex
	got      []Delivery
	bad      []string
	requests int
	answer   func(request int) Answer
	// byEvent, when set, answers instead of answer, by the event's id and
	// its attempt (from 1) at this endpoint.
	byEvent  func(id string, attempt int) Answer
	attempts map[string]int
	hung     chan struct{}
}

// NewReceiver starts an endpoint that verifies deliveries signed with
// Secret and answers OK until Answer says otherwise, closed when the
// test ends.
func NewReceiver(t testing.TB) *Receiver {
	r := StartReceiver()
	t.Cleanup(r.Close)
	return r
}

// StartReceiver is NewReceiver outside a test (the benchmark): Close it.
func StartReceiver() *Receiver {
	key, err := base64.StdEncoding.DecodeString(strings.TrimPrefix(Secret, "whsec_"))
	if err != nil {
		panic(err) // Secret is a constant
	}
	r := &Receiver{key: key, answer: func(int) Answer { return OK }, hung: make(chan struct{})}
	r.srv = httptest.NewServer(http.HandlerFunc(r.serve))
	r.URL = r.srv.URL + "/hooks/flashsale"
	return r
}

// Close stops the endpoint.
func (r *Receiver) Close() {
	close(r.hung)
	r.srv.CloseClientConnections()
	r.srv.Close()
}

// Answer sets how the endpoint answers its n-th request (from 1) from now on.
func (r *Receiver) Answer(f func(request int) Answer) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.answer = f
}

// Always answers a every request from now on.
func (r *Receiver) Always(a Answer) { r.Answer(func(int) Answer { return a }) }

// AnswerEvents sets how the endpoint answers a delivery of the event id,
// its attempt-th (from 1), from now on.
func (r *Receiver) AnswerEvents(f func(id string, attempt int) Answer) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.byEvent, r.attempts = f, map[string]int{}
}

func (r *Receiver) serve(w http.ResponseWriter, req *http.Request) {
	body, err := io.ReadAll(req.Body)
	at := time.Now()
	var ev struct {
		ID, Type, Subject, Sequence string
	}
	problem := ""
	if err == nil {
		if jerr := json.Unmarshal(body, &ev); jerr != nil {
			problem = "body is not JSON: " + jerr.Error()
		} else {
			problem = r.verify(req, body, ev.ID)
		}
	}
	r.mu.Lock()
	r.requests++
	answer := r.answer(r.requests)
	if r.byEvent != nil && ev.ID != "" {
		r.attempts[ev.ID]++
		answer = r.byEvent(ev.ID, r.attempts[ev.ID])
	}
	if problem != "" {
		r.bad = append(r.bad, problem)
		answer = Fail
	}
	if answer == OK && err == nil {
		r.got = append(r.got, Delivery{ID: ev.ID, Type: ev.Type, Subject: ev.Subject, Sequence: ev.Sequence, Body: body, At: at})
	}
	r.mu.Unlock()
	switch answer {
	case OK:
		w.WriteHeader(http.StatusNoContent)
	case Fail:
		http.Error(w, "down for maintenance", http.StatusInternalServerError)
	case Gone:
		w.WriteHeader(http.StatusGone)
	case Hang:
		select {
		case <-req.Context().Done():
		case <-r.hung:
		}
	case Close:
		if c, _, herr := http.NewResponseController(w).Hijack(); herr == nil {
			c.Close()
		}
	}
}

// verify checks a delivery by the Standard Webhooks rules: the three
// headers, a timestamp within five minutes, a v1 signature that is the
// HMAC-SHA256 of "id.timestamp.body" under the secret's key; and the
// CloudEvents content type; and that webhook-id is the body's id. It
// returns what is wrong ("" nothing).
func (r *Receiver) verify(req *http.Request, body []byte, bodyID string) string {
	id, ts, sigs := req.Header.Get("webhook-id"), req.Header.Get("webhook-timestamp"), req.Header.Get("webhook-signature")
	if id == "" || ts == "" || sigs == "" {
		return "missing a webhook- header"
	}
	if ct := req.Header.Get("Content-Type"); ct != "application/cloudevents+json" {
		return "content type " + ct
	}
	sec, err := strconv.ParseInt(ts, 10, 64)
	if err != nil || time.Since(time.Unix(sec, 0)).Abs() > 5*time.Minute {
		return "timestamp " + ts + " not within 5 minutes"
	}
	mac := hmac.New(sha256.New, r.key)
	mac.Write([]byte(id + "." + ts + "."))
	mac.Write(body)
	want := mac.Sum(nil)
	for _, s := range strings.Fields(sigs) {
		v, b64, _ := strings.Cut(s, ",")
		got, err := base64.StdEncoding.DecodeString(b64)
		if v == "v1" && err == nil && hmac.Equal(got, want) {
			if bodyID != id {
				return "webhook-id " + id + " is not the event's id " + bodyID
			}
			return ""
		}
	}
	return "no valid v1 signature in " + sigs
}

// Deliveries is what the endpoint took (answered 2xx), in arrival order.
func (r *Receiver) Deliveries() []Delivery {
	r.mu.Lock()
	defer r.mu.Unlock()
	return slices.Clone(r.got)
}

// Delivered is how many deliveries the endpoint took.
func (r *Receiver) Delivered() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return len(r.got)
}

// Requests is how many requests reached the endpoint.
func (r *Receiver) Requests() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.requests
}

// Unverified is every delivery that failed verification, and why.
func (r *Receiver) Unverified() []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	return slices.Clone(r.bad)
}

// Kafka is an in-process Kafka broker that can be stopped and started
// again on its port with what it held.
type Kafka struct {
	Topic string
	dir   string
	port  int
	mu    sync.Mutex
	c     *kfake.Cluster
}

// NewKafka starts a broker with topic (3 partitions), stopped when the
// test ends.
func NewKafka(t testing.TB, topic string) *Kafka {
	k, err := StartKafka(t.TempDir(), topic)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(k.Stop)
	return k
}

// StartKafka is NewKafka outside a test, keeping its data in dir ("": in
// memory, lost at Stop): Stop it.
func StartKafka(dir, topic string) (*Kafka, error) {
	k := &Kafka{Topic: topic, dir: dir}
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	k.port = l.Addr().(*net.TCPAddr).Port
	l.Close()
	return k, k.Start()
}

// Addr is the broker's host:port.
func (k *Kafka) Addr() string { return "127.0.0.1:" + strconv.Itoa(k.port) }

// Start starts the broker (again), with what it held when stopped.
func (k *Kafka) Start() error {
	k.mu.Lock()
	defer k.mu.Unlock()
	if k.c != nil {
		return nil
	}
	opts := []kfake.Opt{kfake.NumBrokers(1), kfake.Ports(k.port), kfake.SeedTopics(3, k.Topic)}
	if k.dir != "" { // kept across a stop, each batch synced as it lands
		opts = append(opts, kfake.DataDir(k.dir), kfake.SyncWrites())
	}
	c, err := kfake.NewCluster(opts...)
	if err != nil {
		return err
	}
	k.c = c
	return nil
}

// Stop stops the broker: connections refused until Start.
func (k *Kafka) Stop() {
	k.mu.Lock()
	defer k.mu.Unlock()
	if k.c != nil {
		k.c.Close()
		k.c = nil
	}
}

// Records is how many records the topic holds.
func (k *Kafka) Records(ctx context.Context) (int64, error) {
	cl, err := kgo.NewClient(kgo.SeedBrokers(k.Addr()))
	if err != nil {
		return 0, err
	}
	defer cl.Close()
	ends, err := kadm.NewClient(cl).ListEndOffsets(ctx, k.Topic)
	if err != nil {
		return 0, err
	}
	var n int64
	ends.Each(func(o kadm.ListedOffset) { n += o.Offset })
	return n, nil
}

// Deliveries reads every record of the topic, partition by partition in
// offset order, and checks each record's headers agree with its value.
func (k *Kafka) Deliveries(ctx context.Context) ([]Delivery, []string, error) {
	cl, err := kgo.NewClient(kgo.SeedBrokers(k.Addr()), kgo.ConsumeTopics(k.Topic),
		kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()))
	if err != nil {
		return nil, nil, err
	}
	defer cl.Close()
	ends, err := kadm.NewClient(cl).ListEndOffsets(ctx, k.Topic)
	if err != nil {
		return nil, nil, err
	}
	want := map[int32]int64{}
	ends.Each(func(o kadm.ListedOffset) {
		if o.Offset > 0 {
			want[o.Partition] = o.Offset
		}
	})
	byPart := map[int32][]Delivery{}
	var bad []string
	for len(want) > 0 {
		fs := cl.PollFetches(ctx)
		if err := ctx.Err(); err != nil {
			return nil, nil, fmt.Errorf("reading the topic: %w", err)
		}
		fs.EachRecord(func(rec *kgo.Record) {
			d, problem := fromRecord(rec)
			if problem != "" {
				bad = append(bad, problem)
			}
			byPart[rec.Partition] = append(byPart[rec.Partition], d)
			if rec.Offset+1 >= want[rec.Partition] {
				delete(want, rec.Partition)
			}
		})
	}
	var out []Delivery
	for _, p := range slices.Sorted(func(yield func(int32) bool) {
		for p := range byPart {
			if !yield(p) {
				return
			}
		}
	}) {
		out = append(out, byPart[p]...)
	}
	return out, bad, nil
}

// fromRecord is the record's event, and what is wrong with the record.
func fromRecord(rec *kgo.Record) (Delivery, string) {
	var ev struct {
		SpecVersion, ID, Source, Type, Subject, Time, Sequence string
	}
	if err := json.Unmarshal(rec.Value, &ev); err != nil {
		return Delivery{}, "record value is not JSON"
	}
	d := Delivery{ID: ev.ID, Type: ev.Type, Subject: ev.Subject, Sequence: ev.Sequence, Body: rec.Value}
	// Structured mode, and only it: one header, content-type; a ce_
	// header would make it binary mode's too.
	if len(rec.Headers) != 1 || rec.Headers[0].Key != "content-type" || string(rec.Headers[0].Value) != "application/cloudevents+json" {
		return d, fmt.Sprintf("record %s: headers %v, not content-type application/cloudevents+json alone", ev.ID, rec.Headers)
	}
	if string(rec.Key) != ev.Subject {
		return d, fmt.Sprintf("record %s: key %q is not the subject %s", ev.ID, rec.Key, ev.Subject)
	}
	return d, ""
}

// Check holds what a sink received to want, the events it should have
// (sequenced, in sequence order): every one received at least once, the
// sequence with no gap, a duplicate the same bytes as the first, nothing
// that is not an event of want, and each order's events in the order of
// their sequences. It returns what is wrong.
func Check(want []db.OutboxEvent, got []Delivery) []string { return check(want, got, true) }

// CheckRedelivered is Check for a sink that was sent events recorded
// failed again ("redeliver --failed"): those arrive after the events of
// their order that followed them, so the order of arrival is not held.
func CheckRedelivered(want []db.OutboxEvent, got []Delivery) []string { return check(want, got, false) }

func check(want []db.OutboxEvent, got []Delivery, ordered bool) []string {
	var problems []string
	add := func(format string, args ...any) {
		if len(problems) < 20 {
			problems = append(problems, fmt.Sprintf(format, args...))
		}
	}
	byID := map[string]db.OutboxEvent{}
	for i, e := range want {
		if e.Sequence != want[0].Sequence+int64(i) {
			add("the outbox's sequences have a gap at %d", e.Sequence)
		}
		byID[e.ID()] = e
	}
	first := map[string][]byte{}
	lastSeq := map[string]int64{}
	for _, d := range got {
		e, ok := byID[d.ID]
		if !ok {
			add("received %s (sequence %s), not an event of the outbox", d.ID, d.Sequence)
			continue
		}
		ev := event.Of("", e)
		if d.Sequence != ev.Sequence.String() || d.Type != ev.Type || d.Subject != ev.Subject {
			add("received %s as sequence %s type %s subject %s; the outbox says %d %s %s", d.ID, d.Sequence, d.Type, d.Subject, e.Sequence, ev.Type, ev.Subject)
		}
		if b, seen := first[d.ID]; seen {
			if !bytes.Equal(b, d.Body) {
				add("event %s received twice with different bodies", d.ID)
			}
			continue
		}
		first[d.ID] = d.Body
		// A subject is an order's, or a split voucher's.
		subject, _, _ := strings.Cut(ev.Type, ".")
		subject += " " + d.Subject
		if ordered && e.Sequence < lastSeq[subject] {
			add("%s: event %d received after %d", subject, e.Sequence, lastSeq[subject])
		}
		lastSeq[subject] = max(lastSeq[subject], e.Sequence)
	}
	missing := 0
	for _, e := range want {
		if _, ok := first[e.ID()]; !ok {
			if missing++; missing <= 5 {
				add("event %s (sequence %d, order %d %s) never received", e.ID(), e.Sequence, e.OrderID, e.Status)
			}
		}
	}
	if missing > 5 {
		add("%d events never received in all", missing)
	}
	return problems
}

// Duplicates is how many deliveries repeated an event already received.
func Duplicates(got []Delivery) int {
	seen := map[string]bool{}
	n := 0
	for _, d := range got {
		if seen[d.ID] {
			n++
		}
		seen[d.ID] = true
	}
	return n
}
