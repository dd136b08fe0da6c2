package harness

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/HdrHistogram/hdrhistogram-go"

	"github.com/flashsale/flashsale/pkg/gateway"
	"github.com/flashsale/flashsale/pkg/room"
)

// Client talks to a gateway.
type Client struct {
	URL  string
	HTTP *http.Client
	// slots holds one token a connection: a request takes one before
	// HTTP.Timeout starts, so that its timeout counts the gateway's time,
	// not the time the load generator's own callers queued for one of its
	// connections (20,000 people sharing 256 on a busy machine waited
	// longer than a minute: a failure of the generator counted as the
	// system's).
	slots chan struct{}
}

// NewClient returns a Client keeping up to conns connections open.
func NewClient(url string, conns int) *Client {
	return &Client{URL: url, slots: make(chan struct{}, conns), HTTP: &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{
		MaxIdleConns: conns, MaxIdleConnsPerHost: conns, MaxConnsPerHost: conns, IdleConnTimeout: time.Minute,
	}}}
}

// Do sends a request and decodes a JSON answer into out (if not nil);
// header holds extra headers, name then value ("" values are not sent).
func (c *Client) Do(ctx context.Context, method, path, token string, body any, out any, header ...string) (int, error) {
	var rd io.Reader
	if body != nil {
		b, err := json.Marshal(body)
		if err != nil {
			return 0, err
		}
		rd = bytes.NewReader(b)
	}
	select {
	case c.slots <- struct{}{}:
		defer func() { <-c.slots }()
	case <-ctx.Done():
		return 0, ctx.Err()
	}
	req, err := http.NewRequestWithContext(ctx, method, c.URL+path, rd)
	if err != nil {
		return 0, err
	}
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	for i := 0; i+1 < len(header); i += 2 {
		if header[i+1] != "" {
			req.Header.Set(header[i], header[i+1])
		}
	}
	res, err := c.HTTP.Do(req)
	if err != nil {
		return 0, err
	}
	defer res.Body.Close()
	b, err := io.ReadAll(res.Body)
	if err != nil {
		return res.StatusCode, err
	}
	if out != nil {
		if err := json.Unmarshal(b, out); err != nil {
			return res.StatusCode, fmt.Errorf("%s %s: %d %q: %w", method, path, res.StatusCode, b, err)
		}
	}
	return res.StatusCode, nil
}

// VoucherSpec is the body of POST /admin/v1/vouchers.
type VoucherSpec struct {
	Name                  string `json:"name"`
	Kind                  string `json:"kind,omitempty"`
	Stock                 int64  `json:"stock,omitempty"`
	PerUserLimit          int64  `json:"per_user_limit"`
	PerUserDailyLimit     int64  `json:"per_user_daily_limit,omitempty"`
	PaymentTimeoutSeconds int64  `json:"payment_timeout_seconds,omitempty"`
	StartsAt              string `json:"starts_at,omitempty"`
	EndsAt                string `json:"ends_at,omitempty"`
	// Envelopes.
	TotalAmount int64 `json:"total_amount,omitempty"`
	Count       int64 `json:"count,omitempty"`
	MinAmount   int64 `json:"min_amount,omitempty"`
	// Codes.
	Codes []string `json:"codes,omitempty"`
	// StockBuckets spreads a hot voucher over Redis buckets.
	StockBuckets int `json:"stock_buckets,omitempty"`
	// Allocation: first_come (default) or draw.
	Allocation string `json:"allocation,omitempty"`
	// WaitingRoom puts a waiting room in front of the claims.
	WaitingRoom *room.Config `json:"waiting_room,omitempty"`
}

// Codes returns n distinct codes.
func Codes(n int) []string {
	out := make([]string, n)
	for i := range out {
		out[i] = "CODE-" + strconv.Itoa(i)
	}
	return out
}

// CreateVoucher creates a voucher through the admin API and returns its id.
func (s *Stack) CreateVoucher(ctx context.Context, spec VoucherSpec) (int64, error) {
	var out struct {
		ID string `json:"id"`
	}
	status, err := NewClient(s.URL, 1).Do(ctx, "POST", "/admin/v1/vouchers", s.AdminToken, spec, &out)
	if err != nil {
		return 0, err
	}
	if status != http.StatusCreated {
		return 0, fmt.Errorf("create voucher: status %d", status)
	}
	return strconv.ParseInt(out.ID, 10, 64)
}

// Token is user's token, valid for a day from its first signing: signed
// once a stack, as a sale's 20,000 buyers need theirs before it starts.
func (s *Stack) Token(user string) string {
	if tok, ok := s.tokens.Load(user); ok {
		return tok.(string)
	}
	tok, err := gateway.SignUserToken(s.JWTSecret, user, time.Now().Add(24*time.Hour))
	if err != nil {
		panic(err)
	}
	s.tokens.Store(user, tok)
	return tok
}

// Tokens signs the tokens of the users a sale of n users runs with, so
// that a sale started later spends no time on them.
func (s *Stack) Tokens(n int) {
	for u := range n {
		s.Token(userName(u))
	}
}

// SaleConfig shapes a simulated sale.
type SaleConfig struct {
	VoucherID int64
	Users     int // distinct users; each claims at least once (unless Duration is set)
	Requests  int // total claims; those beyond Users repeat random users
	// Duration, when set, makes the sale run that long instead: Requests is
	// ignored and every claim is by a random user.
	Duration time.Duration
	// Rate caps claims per second across all clients (0: as fast as they go).
	Rate        int
	Concurrency int // claims in flight at once (closed loop)
	Seed        uint64
	// MaxQuantity, above 1, makes each claim ask for 1 to MaxQuantity
	// units ({"quantity": N}); otherwise claims carry no body (1 unit).
	MaxQuantity int
	// OnProgress, if set, is called after every claim with the number done.
	OnProgress func(done int64)
	// OnAdmit, if set, is called for every 202 (from the claiming goroutine).
	OnAdmit func(orderID int64, user string)
}

// SaleResult is what the clients saw.
type SaleResult struct {
	Requests int64
	Admitted int64
	Rejected map[string]int64 // by error code
	Errors   int64            // transport errors and 5xx other than 503
	// Unavailable counts deliberate 503 "unavailable" answers: claims
	// the admission script never ran for.
	Unavailable int64
	// OutcomeUnknown counts 503 "outcome_unknown" answers: claims sent
	// whose reply was late, which may have been admitted.
	OutcomeUnknown int64
	// Orders maps every admitted order id (a draw's entry id) to its user.
	Orders map[int64]string
	// Amounts maps every admitted envelope grab to the amount its 202 said.
	Amounts  map[int64]int64
	Duration time.Duration
	Latency  *hdrhistogram.Histogram // microseconds
	// LastAdmit is when the last 202 arrived.
	LastAdmit time.Time
	// AdmittedAfterSoldOut counts the 202s to claims sent after a sold_out
	// had been answered: units that were left when a claim was told the
	// voucher was sold out (with no units given back, 0 means none was
	// stranded in another bucket).
	AdmittedAfterSoldOut int64
}

// RunSale fires cfg.Requests claims from cfg.Users distinct users.
func (s *Stack) RunSale(ctx context.Context, cfg SaleConfig) (*SaleResult, error) {
	if cfg.Users <= 0 || (cfg.Duration == 0 && cfg.Requests < cfg.Users) || cfg.Concurrency <= 0 {
		return nil, fmt.Errorf("sale needs users > 0, requests >= users (or a duration), concurrency > 0")
	}
	rng := rand.New(rand.NewPCG(cfg.Seed, 7))
	if cfg.Duration > 0 {
		cfg.Requests = 0
	}
	plan := make([]int, cfg.Requests)
	for i := range plan {
		if i < cfg.Users {
			plan[i] = i
		} else {
			plan[i] = rng.IntN(cfg.Users)
		}
	}
	rng.Shuffle(len(plan), func(i, j int) { plan[i], plan[j] = plan[j], plan[i] })
	tokens := make([]string, cfg.Users)
	for u := range tokens {
		tokens[u] = s.Token(userName(u))
	}

	client := NewClient(s.URL, cfg.Concurrency)
	path := "/v1/vouchers/" + strconv.FormatInt(cfg.VoucherID, 10) + "/orders"
	res := &SaleResult{Rejected: map[string]int64{}, Orders: map[int64]string{}, Amounts: map[int64]int64{}}
	var (
		mu   sync.Mutex
		next atomic.Int64
		done atomic.Int64
		// firstSoldOut is when the first sold_out arrived, ns since start
		// (0: none yet).
		firstSoldOut atomic.Int64
		wg           sync.WaitGroup
	)
	var pace <-chan time.Time
	if cfg.Rate > 0 {
		t := time.NewTicker(time.Second / time.Duration(cfg.Rate))
		defer t.Stop()
		pace = t.C
	}
	start := time.Now()
	end := start.Add(cfg.Duration)
	for g := range cfg.Concurrency {
		wg.Add(1)
		go func() {
			defer wg.Done()
			grng := rand.New(rand.NewPCG(cfg.Seed, uint64(g)+100))
			hist := hdrhistogram.New(1, 60_000_000, 3)
			local := map[string]int64{}
			var admitted, errs, unavailable, outcomeUnknown, afterSoldOut int64
			orders := map[int64]string{}
			amounts := map[int64]int64{}
			var lastAdmit time.Time
			for {
				if pace != nil {
					select {
					case <-pace:
					case <-ctx.Done():
					}
				}
				i := int(next.Add(1) - 1)
				var u int
				if cfg.Duration > 0 {
					if time.Now().After(end) || ctx.Err() != nil {
						break
					}
					u = grng.IntN(cfg.Users)
				} else {
					if i >= len(plan) || ctx.Err() != nil {
						break
					}
					u = plan[i]
				}
				var body struct {
					OrderID string `json:"order_id"`
					EntryID string `json:"entry_id"` // a draw's
					Amount  int64  `json:"amount"`
					Error   string `json:"error"`
				}
				var claim any
				if cfg.MaxQuantity > 1 {
					claim = map[string]int{"quantity": 1 + grng.IntN(cfg.MaxQuantity)}
				}
				t0 := time.Now()
				soldOutBefore := firstSoldOut.Load() != 0
				status, err := client.Do(ctx, "POST", path, tokens[u], claim, &body)
				_ = hist.RecordValue(time.Since(t0).Microseconds())
				switch {
				case err == nil && status == http.StatusServiceUnavailable && body.Error == "unavailable":
					unavailable++
				case err == nil && status == http.StatusServiceUnavailable && body.Error == "outcome_unknown":
					outcomeUnknown++
				case err != nil || status >= 500:
					errs++
				case status == http.StatusAccepted:
					id, perr := strconv.ParseInt(body.OrderID+body.EntryID, 10, 64)
					if perr != nil {
						errs++
						break
					}
					admitted++
					if soldOutBefore {
						afterSoldOut++
					}
					orders[id] = userName(u)
					if body.Amount > 0 {
						amounts[id] = body.Amount
					}
					lastAdmit = time.Now()
					if cfg.OnAdmit != nil {
						cfg.OnAdmit(id, userName(u))
					}
				default:
					local[body.Error]++
					if body.Error == "sold_out" {
						firstSoldOut.CompareAndSwap(0, max(1, int64(time.Since(start))))
					}
				}
				if cfg.OnProgress != nil {
					cfg.OnProgress(done.Add(1))
				}
			}
			mu.Lock()
			defer mu.Unlock()
			if res.Latency == nil {
				res.Latency = hist
			} else {
				res.Latency.Merge(hist)
			}
			for k, v := range local {
				res.Rejected[k] += v
			}
			for id, u := range orders {
				if _, dup := res.Orders[id]; dup {
					errs++ // the same order id answered twice: counted as an error
				}
				res.Orders[id] = u
			}
			for id, a := range amounts {
				res.Amounts[id] = a
			}
			res.Admitted += admitted
			res.Errors += errs
			res.Unavailable += unavailable
			res.OutcomeUnknown += outcomeUnknown
			res.AdmittedAfterSoldOut += afterSoldOut
			if lastAdmit.After(res.LastAdmit) {
				res.LastAdmit = lastAdmit
			}
		}()
	}
	wg.Wait()
	res.Duration = time.Since(start)
	res.Requests = next.Load() - int64(cfg.Concurrency) // each goroutine took one index it did not send
	return res, ctx.Err()
}

func userName(u int) string { return "user-" + strconv.Itoa(u) }

// Pay pays order id as user: it returns the HTTP status and error code.
func (c *Client) Pay(ctx context.Context, id int64, token string) (int, string, error) {
	var body struct {
		Status string `json:"status"`
		Error  string `json:"error"`
	}
	status, err := c.Do(ctx, "POST", "/v1/orders/"+strconv.FormatInt(id, 10)+"/pay", token, nil, &body)
	return status, body.Error, err
}
