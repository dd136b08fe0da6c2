package harness

// A history of claims, in the spirit of Jepsen's: every client records
// each answer it saw (a status and its error code, or a transport error:
// an unknown outcome), and the checker compares the history with MySQL at
// the end. A failing check prints the history of each key it blames.

import (
	"context"
	"fmt"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/flashsale/flashsale/pkg/reaper"
)

// Attempt is one claim as its client saw it.
type Attempt struct {
	User, Key string
	Status    int    // 0: no answer (a transport error or a timeout)
	Code      string // the error body's code
	OrderID   string // a 202's order id
	Err       string
	At        time.Time
}

// Unknown: the claim may or may not have been admitted (no answer, or
// 503 outcome_unknown). A 503 of another code is a refusal: the script
// never ran for the claim.
func (a Attempt) Unknown() bool {
	return a.Status == 0 || (a.Status == 503 && a.Code == "outcome_unknown")
}

func (a Attempt) String() string {
	switch {
	case a.Status == 0:
		return fmt.Sprintf("%s no answer (%s)", a.At.Format("15:04:05.000"), a.Err)
	case a.Status == 202:
		return fmt.Sprintf("%s 202 order %s", a.At.Format("15:04:05.000"), a.OrderID)
	default:
		return fmt.Sprintf("%s %d %s", a.At.Format("15:04:05.000"), a.Status, a.Code)
	}
}

// ClaimRecorded sends user's claim of voucher v through c, under the
// Idempotency-Key "k-" + user and within 5 s, records what came back in h
// and returns it.
func (s *Stack) ClaimRecorded(ctx context.Context, c *Client, h *History, v int64, user string) Attempt {
	var body struct {
		Code    string `json:"error"`
		OrderID string `json:"order_id"`
	}
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	key := "k-" + user
	status, err := c.Do(ctx, "POST", "/v1/vouchers/"+strconv.FormatInt(v, 10)+"/orders", s.Token(user), nil, &body, "Idempotency-Key", key)
	a := Attempt{User: user, Key: key, Status: status, Code: body.Code, OrderID: body.OrderID, At: time.Now()}
	if err != nil {
		a.Status, a.Err = 0, err.Error()
	}
	h.Add(a)
	return a
}

// History is every attempt of every client, safe for concurrent use.
// Each key belongs to one user, and each user claims under one key.
type History struct {
	mu    sync.Mutex
	byKey map[string][]Attempt
	order []string
}

// Add records an attempt.
func (h *History) Add(a Attempt) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.byKey == nil {
		h.byKey = map[string][]Attempt{}
	}
	if _, ok := h.byKey[a.Key]; !ok {
		h.order = append(h.order, a.Key)
	}
	h.byKey[a.Key] = append(h.byKey[a.Key], a)
}

// Last is each key's last attempt.
func (h *History) Last() map[string]Attempt {
	h.mu.Lock()
	defer h.mu.Unlock()
	out := map[string]Attempt{}
	for k, as := range h.byKey {
		out[k] = as[len(as)-1]
	}
	return out
}

// Count is how many attempts satisfied f.
func (h *History) Count(f func(Attempt) bool) int {
	h.mu.Lock()
	defer h.mu.Unlock()
	n := 0
	for _, as := range h.byKey {
		for _, a := range as {
			if f(a) {
				n++
			}
		}
	}
	return n
}

// Summary counts the attempts by answer: "202", "503 unavailable",
// "no answer", ..., in that order of first appearance.
func (h *History) Summary() string {
	h.mu.Lock()
	defer h.mu.Unlock()
	counts := map[string]int{}
	var seen []string
	for _, k := range h.order {
		for _, a := range h.byKey[k] {
			what := strconv.Itoa(a.Status)
			switch {
			case a.Status == 0:
				what = "no answer"
			case a.Code != "":
				what += " " + a.Code
			}
			if counts[what] == 0 {
				seen = append(seen, what)
			}
			counts[what]++
		}
	}
	out := make([]string, len(seen))
	for i, w := range seen {
		out[i] = fmt.Sprintf("%s: %d", w, counts[w])
	}
	return strings.Join(out, ", ")
}

// CheckHistory compares the history of claims of voucher v (per-user limit 1)
// with MySQL once every order is persisted: every key answered 202 is
// exactly one order, its user's, with the id every 202 of it named; a key
// whose last answer is a refusal has none; a key left unknown has at most
// one; no answer but 202, 409, 429 and 503 (or none) was given; no more
// orders than stock; reconcile finds no difference. It returns every
// violation, each with its key's history.
func (s *Stack) CheckHistory(ctx context.Context, h *History, v, stock int64) []string {
	live, err := s.DB.LiveOrders(ctx, v)
	if err != nil {
		return []string{"read orders: " + err.Error()}
	}
	perUser := map[string]int{}
	for _, o := range live {
		perUser[o.UserID]++
	}
	var bad []string
	blame := func(key, why string) {
		h.mu.Lock()
		var lines []string
		for _, a := range h.byKey[key] {
			lines = append(lines, "    "+a.String())
		}
		h.mu.Unlock()
		bad = append(bad, fmt.Sprintf("%s: %s\n%s", key, why, strings.Join(lines, "\n")))
	}
	h.mu.Lock()
	keys := append([]string(nil), h.order...)
	h.mu.Unlock()
	sort.Strings(keys)
	for _, key := range keys {
		h.mu.Lock()
		as := h.byKey[key]
		h.mu.Unlock()
		user, ids := as[0].User, map[string]bool{}
		for _, a := range as {
			switch a.Status {
			case 0, 202, 409, 429, 503:
			default:
				blame(key, fmt.Sprintf("answered %d %s", a.Status, a.Code))
			}
			if a.Status == 202 {
				ids[a.OrderID] = true
			}
		}
		last := as[len(as)-1]
		switch {
		case len(ids) > 1:
			blame(key, "202s named different orders")
		case len(ids) == 1:
			if perUser[user] != 1 {
				blame(key, fmt.Sprintf("answered 202, and its user holds %d orders", perUser[user]))
				continue
			}
			for id := range ids {
				n, err := strconv.ParseInt(id, 10, 64)
				if err != nil {
					blame(key, "202 without an order id")
					continue
				}
				o, err := s.DB.Order(ctx, n)
				if err != nil || o.UserID != user || o.VoucherID != v {
					blame(key, fmt.Sprintf("its order %s is not its user's live order of voucher %d (%v)", id, v, err))
				}
			}
		case last.Unknown():
			if perUser[user] > 1 {
				blame(key, fmt.Sprintf("unknown outcome, and its user holds %d orders", perUser[user]))
			}
		default:
			if perUser[user] != 0 {
				blame(key, fmt.Sprintf("refused (%d %s), and its user holds %d orders", last.Status, last.Code, perUser[user]))
			}
		}
	}
	if int64(len(live)) > stock {
		bad = append(bad, fmt.Sprintf("oversold: %d live orders of %d units", len(live), stock))
	}
	checks, err := reaper.Reconcile(ctx, s.RDB, s.DB, time.Now(), false)
	if err != nil {
		bad = append(bad, "reconcile: "+err.Error())
	}
	for _, c := range checks {
		if c.VoucherID == v && len(c.Differences) > 0 {
			bad = append(bad, fmt.Sprintf("reconcile: voucher %d differs: %+v", v, c.Differences))
		}
	}
	return bad
}
