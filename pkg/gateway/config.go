package gateway

import (
	"cmp"
	"errors"
	"fmt"
	"math"
	"net"
	"net/netip"
	"net/url"
	"strconv"
	"strings"
	"time"

	"github.com/flashsale/flashsale/pkg/event"
	"github.com/flashsale/flashsale/pkg/ratelimit"
	"github.com/flashsale/flashsale/pkg/rdb"
	"github.com/flashsale/flashsale/pkg/room"
	"github.com/flashsale/flashsale/pkg/token"
	"github.com/flashsale/flashsale/pkg/voucher"
)

// Config of the gateway.
type Config struct {
	// HTTPAddr is the listen address. Default ":8080".
	HTTPAddr string `envconfig:"FLASHSALE_HTTP_ADDR" default:":8080"`
	// Tracing wraps the handlers in otelhttp (set by the binary when
	// FLASHSALE_TRACING_ENDPOINT is; not a variable of its own).
	Tracing bool `ignored:"true"`
	// PaymentWebhookSecret keys the HMAC-SHA256 a payment provider signs
	// POST /v1/payments/webhook with; empty: the webhook answers 404.
	PaymentWebhookSecret string `envconfig:"FLASHSALE_PAYMENT_WEBHOOK_SECRET"`
	// PaymentWebhookTolerance is how far a webhook's signed time (t=) may
	// be from the gateway's clock, either way. Default 5m.
	PaymentWebhookTolerance time.Duration `envconfig:"FLASHSALE_PAYMENT_WEBHOOK_TOLERANCE" default:"5m"`
	// PaymentWebhookLegacy also accepts the old signature over the body
	// alone (sha256=<hex>, no time), for a provider's migration; each such
	// request is counted. Default false.
	PaymentWebhookLegacy bool `envconfig:"FLASHSALE_PAYMENT_WEBHOOK_LEGACY" default:"false"`
	// BuyerPay opens POST /v1/orders/{id}/pay, where a buyer marks their
	// own order paid with no payment at all: for demos and tests only.
	// Off by default; refused together with PaymentWebhookSecret (a real
	// payment provider confirms payments then).
	BuyerPay bool `envconfig:"FLASHSALE_BUYER_PAY" default:"false"`
	// AdminAddr, when set, serves the admin API on this address only; the
	// public listener then answers 404 for /admin/….
	AdminAddr string `envconfig:"FLASHSALE_ADMIN_ADDR"`
	// AdminToken guards /admin; at least 32 bytes (required).
	AdminToken string `envconfig:"FLASHSALE_ADMIN_TOKEN"`
	// EventsReadToken, when set, reads GET /admin/v1/events and
	// /admin/v1/events/sinks and nothing else (403 elsewhere): for an
	// events consumer that must not create or pause sales. At least 32
	// bytes, not the admin token.
	EventsReadToken string `envconfig:"FLASHSALE_EVENTS_READ_TOKEN"`
	// JWTSecret verifies the users' HS256 tokens; at least 32 bytes.
	// Required unless JWTJWKSFile is set.
	JWTSecret string `envconfig:"FLASHSALE_JWT_SECRET"`
	// JWTPreviousSecret is also accepted for HS256 during a rollover.
	JWTPreviousSecret string `envconfig:"FLASHSALE_JWT_PREVIOUS_SECRET"`
	// JWTJWKSFile is a JSON Web Key Set of an identity provider's public
	// keys (RS256, ES256, EdDSA), chosen by the token's kid.
	JWTJWKSFile string `envconfig:"FLASHSALE_JWT_JWKS_FILE"`
	// JWTIssuer and JWTAudience, when set, must be the token's iss and one
	// of its aud.
	JWTIssuer   string `envconfig:"FLASHSALE_JWT_ISSUER"`
	JWTAudience string `envconfig:"FLASHSALE_JWT_AUDIENCE"`
	// JWTMaxLifetime refuses a token whose lifetime (exp - iat, or exp -
	// now without iat) exceeds it. Default 24h.
	JWTMaxLifetime time.Duration `envconfig:"FLASHSALE_JWT_MAX_LIFETIME" default:"24h"`
	// TimeZone is where a "day" of the per-day limit starts. Default "UTC".
	TimeZone string `envconfig:"FLASHSALE_TIMEZONE" default:"UTC"`
	// ClaimTimeout bounds a claim's wait to be sent to Redis; a claim not
	// sent by then is answered 503 unavailable (the script never ran for
	// it). Default 300ms.
	ClaimTimeout time.Duration `envconfig:"FLASHSALE_CLAIM_TIMEOUT" default:"300ms"`
	// ClaimReplyTimeout bounds a sent claim's wait for the script's reply,
	// from its arrival: its answer is the script's decision if the reply
	// comes by then, else 503 outcome_unknown with a claim_id to ask
	// about. At least ClaimTimeout (a smaller value is raised to it).
	// Default 1s.
	ClaimReplyTimeout time.Duration `envconfig:"FLASHSALE_CLAIM_REPLY_TIMEOUT" default:"1s"`
	// ClaimOutcomeTimeout bounds how long the gateway listens for a sent
	// claim's reply, to record the outcome of a claim answered
	// outcome_unknown: the read timeout of its admission connections. It
	// is also a claim's horizon: this long after the claim, rounded up
	// to a second, Redis refuses the claim's call, and a claim with no
	// order is told refused a second later by Redis's clock
	// (outcome.go). At least ClaimReplyTimeout (a smaller value is
	// raised to it); at most 10m. Default 30s.
	ClaimOutcomeTimeout time.Duration `envconfig:"FLASHSALE_CLAIM_OUTCOME_TIMEOUT" default:"30s"`
	// IdempotencyTTL is how long an Idempotency-Key is remembered. Default 24h.
	IdempotencyTTL time.Duration `envconfig:"FLASHSALE_IDEMPOTENCY_TTL" default:"24h"`
	// ShutdownTimeout bounds the shutdown once it begins: in-flight
	// requests finish, then the admissions' round trips and the late
	// outcomes' records, all by then (Close). Default 15s.
	ShutdownTimeout time.Duration `envconfig:"FLASHSALE_SHUTDOWN_TIMEOUT" default:"15s"`
	// PipelineWorkers is the most pipelines in flight to Redis at once:
	// concurrent claims are coalesced into them (auto-pipelining; the
	// batcher's policy is in pkg/rdb/admission/batcher.go). The claims of one
	// voucher bucket in a pipeline share one call of the admission
	// script. Off (FLASHSALE_…=0; in a Config, negative) sends each claim
	// alone. Default 4.
	PipelineWorkers int `envconfig:"FLASHSALE_REDIS_PIPELINE_WORKERS" default:"4"`
	// PipelineMaxBatch bounds the claims in one pipeline. Default 128.
	PipelineMaxBatch int `envconfig:"FLASHSALE_REDIS_PIPELINE_MAX_BATCH" default:"128"`
	// MySQLTimeout bounds the MySQL work of one request that reads or
	// writes MySQL (orders, payments, admin); past it the request answers
	// 503. Default 2s.
	MySQLTimeout time.Duration `envconfig:"FLASHSALE_MYSQL_REQUEST_TIMEOUT" default:"2s"`
	// MySQLMaxInflight bounds the requests waiting on MySQL at once; one
	// more answers 503 at once instead of queueing. Default 64.
	MySQLMaxInflight int `envconfig:"FLASHSALE_MYSQL_MAX_INFLIGHT" default:"64"`
	// UserRate limits each user (the token's sub) on the user API, in
	// requests per second, before the admission script runs. Off:
	// FLASHSALE_USER_RATE=0; in a Config, negative. Default 10.
	UserRate float64 `envconfig:"FLASHSALE_USER_RATE" default:"10"`
	// UserBurst is the requests a user may make at once. Default 20.
	UserBurst int `envconfig:"FLASHSALE_USER_BURST" default:"20"`
	// IPRate limits each client address, requests per second; 0 = off
	// (the default).
	IPRate float64 `envconfig:"FLASHSALE_IP_RATE" default:"0"`
	// IPBurst is the requests an address may make at once. Default: twice
	// IPRate, at least 1.
	IPBurst int `envconfig:"FLASHSALE_IP_BURST" default:"0"`
	// QueuePageRate limits the queue page (GET /queue/{id}, which needs no
	// login) per client address, pages per second, burst twice that. Off:
	// FLASHSALE_QUEUE_PAGE_RATE=0; in a Config, negative. Behind a proxy,
	// FLASHSALE_TRUSTED_PROXIES names it, or every buyer shares its
	// address. Default 10.
	QueuePageRate float64 `envconfig:"FLASHSALE_QUEUE_PAGE_RATE" default:"10"`
	// QueueEmbedOrigins are the origins ("https://shop.example") that may
	// embed the queue page (GET /queue/{id}) in a frame and give it the
	// buyer's token by postMessage; none by default: the page is opened
	// on its own, the token in its URL's fragment.
	QueueEmbedOrigins []string `envconfig:"FLASHSALE_QUEUE_EMBED_ORIGINS"`
	// EventsSource is the source of the order events the events API
	// answers (CloudEvents' source, a URI-reference). Default "flashsale".
	EventsSource string `envconfig:"FLASHSALE_EVENTS_SOURCE" default:"flashsale"`
	// TrustedProxies are the CIDRs (or addresses) of the proxies whose
	// X-Forwarded-For is believed; from anyone else it is ignored.
	TrustedProxies []string `envconfig:"FLASHSALE_TRUSTED_PROXIES"`
	// IPv6Prefix is how many leading bits of an IPv6 address the
	// per-address limits count as one client (a client holds a whole /64:
	// by the full address it would have a bucket per address); 128 counts
	// each address. Default 64.
	IPv6Prefix int `envconfig:"FLASHSALE_IPV6_PREFIX" default:"64"`
	// MaxInflight bounds the requests in flight in this gateway; one more
	// is answered 503 overloaded at once, never queued. Default 4096.
	MaxInflight int `envconfig:"FLASHSALE_MAX_INFLIGHT" default:"4096"`
	// SoldOutRefresh is how long the gateway answers sold_out itself, for a
	// voucher Redis said is sold out, before asking Redis again: a unit
	// given back is sold again within it. Off (every claim runs the
	// script): FLASHSALE_SOLD_OUT_REFRESH=0; in a Config, negative.
	// Default 200ms.
	SoldOutRefresh time.Duration `envconfig:"FLASHSALE_SOLD_OUT_REFRESH" default:"200ms"`
	// RedisDurability is what an admission, and an operator's write of
	// stock or pause, must reach before it is answered: "none" (the
	// master has it), "replica" (RedisMinReplicas replicas have it: WAIT,
	// once per pipeline flush to each master) or "replica_aof" (their AOF
	// has it too: WAITAOF, Redis 7.2+). Not reached within
	// RedisWaitTimeout: 503 unavailable. Default "none".
	RedisDurability string `envconfig:"FLASHSALE_REDIS_DURABILITY" default:"none"`
	// RedisMinReplicas is how many replicas must have a write. Default 1.
	RedisMinReplicas int `envconfig:"FLASHSALE_REDIS_MIN_REPLICAS" default:"1"`
	// RedisWaitTimeout bounds the wait for them. Default 100ms.
	RedisWaitTimeout time.Duration `envconfig:"FLASHSALE_REDIS_WAIT_TIMEOUT" default:"100ms"`
	// PowKey keys the HMAC of proof-of-work challenges (GET /v1/challenge);
	// at least 32 bytes, the same on every replica. Default: derived from
	// FLASHSALE_ADMIN_TOKEN (one-way: the key tells nothing of the token).
	PowKey string `envconfig:"FLASHSALE_POW_KEY"`
	// PowTTL is how long a challenge may be solved and used. Default 2m.
	PowTTL time.Duration `envconfig:"FLASHSALE_POW_TTL" default:"2m"`
	// PowMaxNumber is the difficulty of a challenge for a voucher without
	// a gate (one with a gate takes the gate's). Default 20000.
	PowMaxNumber int64 `envconfig:"FLASHSALE_POW_MAX_NUMBER" default:"20000"`
	// AccessKey keys the HMAC of access codes (pkg/access); at least 32
	// bytes, the same on every replica and wherever codes are issued
	// (gateway access-codes). Default: derived from FLASHSALE_ADMIN_TOKEN
	// (one-way). Changing it voids every code issued.
	AccessKey string `envconfig:"FLASHSALE_ACCESS_KEY"`
	// RoomMaxWaiters is the most places one waiting room gives; a join
	// past them is answered 409 queue_full. Default 1000000 (about 56 MB
	// of Redis).
	RoomMaxWaiters int64 `envconfig:"FLASHSALE_ROOM_MAX_WAITERS" default:"1000000"`
	// valid is what Validate parsed (time zone, trusted proxies, the key
	// set's keys), kept so New neither checks nor reads anything twice;
	// nil until Validate succeeds.
	valid *validConfig
	// envRefused is a negative value ZeroIsOff read from the environment,
	// for Validate to refuse.
	envRefused error
}

// Defaults of Config: one constant per field, used when the field is
// zero, by a library's Config and the binary's alike (the envconfig tags
// say the same, as a test checks).
const (
	PipelineWorkersDefault     = 4
	UserRateDefault            = 10.0
	QueuePageRateDefault       = 10.0
	SoldOutRefreshDefault      = 200 * time.Millisecond
	HTTPAddrDefault            = ":8080"
	TimeZoneDefault            = "UTC"
	ClaimTimeoutDefault        = 300 * time.Millisecond
	ClaimReplyTimeoutDefault   = time.Second
	IPv6PrefixDefault          = 64
	ClaimOutcomeTimeoutDefault = 30 * time.Second
	IdempotencyTTLDefault      = 24 * time.Hour
	ShutdownTimeoutDefault     = 15 * time.Second
	PipelineMaxBatchDefault    = 128
	MySQLTimeoutDefault        = 2 * time.Second
	MySQLMaxInflightDefault    = 64
	UserBurstDefault           = 20
	MaxInflightDefault         = 4096
	JWTMaxLifetimeDefault      = 24 * time.Hour
	RedisWaitTimeoutDefault    = rdb.WaitTimeoutDefault
	WebhookToleranceDefault    = 5 * time.Minute
	PowTTLDefault              = 2 * time.Minute
	PowMaxNumberDefault        = 20_000
	minJWTSecret               = 32
	minAdminToken              = 32
)

// SetDefaults fills the zero fields with the defaults. A negative
// PipelineWorkers, UserRate, QueuePageRate or SoldOutRefresh stays: it turns the feature
// off.
func (c *Config) SetDefaults() {
	c.PipelineWorkers = cmp.Or(c.PipelineWorkers, PipelineWorkersDefault)
	c.UserRate = cmp.Or(c.UserRate, UserRateDefault)
	c.QueuePageRate = cmp.Or(c.QueuePageRate, QueuePageRateDefault)
	c.SoldOutRefresh = cmp.Or(c.SoldOutRefresh, SoldOutRefreshDefault)
	c.HTTPAddr = cmp.Or(c.HTTPAddr, HTTPAddrDefault)
	c.TimeZone = cmp.Or(c.TimeZone, TimeZoneDefault)
	c.ClaimTimeout = cmp.Or(c.ClaimTimeout, ClaimTimeoutDefault)
	c.IPv6Prefix = cmp.Or(c.IPv6Prefix, IPv6PrefixDefault)
	// A sent claim waits for its reply at least as long as for its send,
	// and its outcome is listened for at least as long.
	// (A negative one stays, for Validate to refuse.)
	if c.ClaimReplyTimeout = cmp.Or(c.ClaimReplyTimeout, ClaimReplyTimeoutDefault); c.ClaimReplyTimeout > 0 {
		c.ClaimReplyTimeout = max(c.ClaimReplyTimeout, c.ClaimTimeout)
	}
	if c.ClaimOutcomeTimeout = cmp.Or(c.ClaimOutcomeTimeout, ClaimOutcomeTimeoutDefault); c.ClaimOutcomeTimeout > 0 {
		c.ClaimOutcomeTimeout = max(c.ClaimOutcomeTimeout, c.ClaimReplyTimeout)
	}
	c.EventsSource = cmp.Or(c.EventsSource, event.DefaultSource)
	c.IdempotencyTTL = cmp.Or(c.IdempotencyTTL, IdempotencyTTLDefault)
	c.ShutdownTimeout = cmp.Or(c.ShutdownTimeout, ShutdownTimeoutDefault)
	c.PipelineMaxBatch = cmp.Or(c.PipelineMaxBatch, PipelineMaxBatchDefault)
	c.MySQLTimeout = cmp.Or(c.MySQLTimeout, MySQLTimeoutDefault)
	c.MySQLMaxInflight = cmp.Or(c.MySQLMaxInflight, MySQLMaxInflightDefault)
	c.UserBurst = cmp.Or(c.UserBurst, UserBurstDefault)
	c.IPBurst = cmp.Or(c.IPBurst, max(1, int(math.Ceil(2*c.IPRate))))
	c.MaxInflight = cmp.Or(c.MaxInflight, MaxInflightDefault)
	c.JWTMaxLifetime = cmp.Or(c.JWTMaxLifetime, JWTMaxLifetimeDefault)
	c.PaymentWebhookTolerance = cmp.Or(c.PaymentWebhookTolerance, WebhookToleranceDefault)
	c.PowTTL = cmp.Or(c.PowTTL, PowTTLDefault)
	c.PowMaxNumber = cmp.Or(c.PowMaxNumber, PowMaxNumberDefault)
	c.RoomMaxWaiters = cmp.Or(c.RoomMaxWaiters, room.DefaultMaxWaiters)
	c.RedisDurability = cmp.Or(c.RedisDurability, rdb.DurabilityNone)
	c.RedisMinReplicas = cmp.Or(c.RedisMinReplicas, rdb.MinReplicasDefault)
	c.RedisWaitTimeout = cmp.Or(c.RedisWaitTimeout, RedisWaitTimeoutDefault)
}

// ZeroIsOff reads c as the environment says it: there 0 turns pipelining,
// the user rate and sold-out pruning off, which a Config says with a
// negative value (its 0 is the default). The binary calls it on what it
// read, before SetDefaults.
//
// A negative value is no word of the environment's: Validate refuses it,
// naming the variable.
func (c *Config) ZeroIsOff() {
	switch {
	case c.PipelineWorkers < 0:
		c.envRefused = fmt.Errorf("FLASHSALE_REDIS_PIPELINE_WORKERS must be 0 (off) to 1024, got %d", c.PipelineWorkers)
	case c.UserRate < 0:
		c.envRefused = fmt.Errorf("FLASHSALE_USER_RATE must be 0 (off) or a positive rate, got %v", c.UserRate)
	case c.SoldOutRefresh < 0:
		c.envRefused = fmt.Errorf("FLASHSALE_SOLD_OUT_REFRESH must be 0 (off) to 1m, got %s", c.SoldOutRefresh)
	case c.QueuePageRate < 0:
		c.envRefused = fmt.Errorf("FLASHSALE_QUEUE_PAGE_RATE must be 0 (off) or a positive rate, got %v", c.QueuePageRate)
	}
	if c.PipelineWorkers == 0 {
		c.PipelineWorkers = -1
	}
	if c.UserRate == 0 {
		c.UserRate = -1
	}
	if c.SoldOutRefresh == 0 {
		c.SoldOutRefresh = -1
	}
	if c.QueuePageRate == 0 {
		c.QueuePageRate = -1
	}
}

// durability is the rdb form of the Redis durability settings.
func (c *Config) durability() rdb.Durability {
	return rdb.Durability{Mode: c.RedisDurability, MinReplicas: c.RedisMinReplicas, Timeout: c.RedisWaitTimeout}
}

// Validate reports the first wrong value, naming its variable, and keeps
// what it parsed for New. Call it after SetDefaults.
func (c *Config) Validate() error {
	if c.envRefused != nil {
		return c.envRefused
	}
	switch {
	case c.AdminToken == "":
		return errors.New("FLASHSALE_ADMIN_TOKEN is required")
	case len(c.AdminToken) < minAdminToken:
		return fmt.Errorf("FLASHSALE_ADMIN_TOKEN must be at least %d bytes (a random one: openssl rand -hex 32)", minAdminToken)
	case c.EventsReadToken != "" && len(c.EventsReadToken) < minAdminToken:
		return fmt.Errorf("FLASHSALE_EVENTS_READ_TOKEN must be at least %d bytes (a random one: openssl rand -hex 32)", minAdminToken)
	case c.EventsReadToken != "" && c.EventsReadToken == c.AdminToken:
		return errors.New("FLASHSALE_EVENTS_READ_TOKEN must not be FLASHSALE_ADMIN_TOKEN")
	case c.JWTSecret == "" && c.JWTJWKSFile == "":
		return errors.New("FLASHSALE_JWT_SECRET (or FLASHSALE_JWT_JWKS_FILE) is required")
	case c.JWTSecret != "" && len(c.JWTSecret) < minJWTSecret:
		return fmt.Errorf("FLASHSALE_JWT_SECRET must be at least %d bytes", minJWTSecret)
	case c.JWTPreviousSecret != "" && len(c.JWTPreviousSecret) < minJWTSecret:
		return fmt.Errorf("FLASHSALE_JWT_PREVIOUS_SECRET must be at least %d bytes", minJWTSecret)
	case c.JWTPreviousSecret != "" && c.JWTSecret == "":
		return errors.New("FLASHSALE_JWT_PREVIOUS_SECRET needs FLASHSALE_JWT_SECRET")
	case c.PaymentWebhookSecret != "" && len(c.PaymentWebhookSecret) < 32:
		return errors.New("FLASHSALE_PAYMENT_WEBHOOK_SECRET must be at least 32 bytes")
	case c.PaymentWebhookTolerance < time.Second || c.PaymentWebhookTolerance > time.Hour:
		return fmt.Errorf("FLASHSALE_PAYMENT_WEBHOOK_TOLERANCE must be 1s to 1h, got %s", c.PaymentWebhookTolerance)
	case c.BuyerPay && c.PaymentWebhookSecret != "":
		return errors.New("FLASHSALE_BUYER_PAY must not be true while FLASHSALE_PAYMENT_WEBHOOK_SECRET is set: buyers would pay without paying")
	case c.PowKey != "" && len(c.PowKey) < 32:
		return errors.New("FLASHSALE_POW_KEY must be at least 32 bytes")
	case c.AccessKey != "" && len(c.AccessKey) < 32:
		return errors.New("FLASHSALE_ACCESS_KEY must be at least 32 bytes")
	case !event.ValidSource(c.EventsSource):
		return fmt.Errorf("FLASHSALE_EVENTS_SOURCE must be 1-255 printable characters without spaces (a URI-reference), got %q", c.EventsSource)
	case badOrigin(c.QueueEmbedOrigins) != "":
		return fmt.Errorf("FLASHSALE_QUEUE_EMBED_ORIGINS: %q is not an exact origin (scheme://host[:port]: no wildcard, no path)", badOrigin(c.QueueEmbedOrigins))
	case c.RoomMaxWaiters < 1:
		return fmt.Errorf("FLASHSALE_ROOM_MAX_WAITERS must be at least 1, got %d", c.RoomMaxWaiters)
	case c.PowTTL < time.Second || c.PowTTL > time.Hour:
		return fmt.Errorf("FLASHSALE_POW_TTL must be 1s to 1h, got %s", c.PowTTL)
	case c.PowMaxNumber < 1 || c.PowMaxNumber > voucher.MaxPowNumber:
		return fmt.Errorf("FLASHSALE_POW_MAX_NUMBER must be 1 to %d, got %d", voucher.MaxPowNumber, c.PowMaxNumber)
	case c.JWTMaxLifetime < time.Minute:
		return fmt.Errorf("FLASHSALE_JWT_MAX_LIFETIME must be at least 1m, got %s", c.JWTMaxLifetime)
	case c.ClaimTimeout < 0:
		return fmt.Errorf("FLASHSALE_CLAIM_TIMEOUT must be positive, got %s", c.ClaimTimeout)
	case c.IPv6Prefix < 1 || c.IPv6Prefix > 128:
		return fmt.Errorf("FLASHSALE_IPV6_PREFIX must be 1 to 128 (bits of an IPv6 address counted as one client), got %d", c.IPv6Prefix)
	case c.ClaimReplyTimeout < 0:
		return fmt.Errorf("FLASHSALE_CLAIM_REPLY_TIMEOUT must be positive, got %s", c.ClaimReplyTimeout)
	case c.ClaimOutcomeTimeout < 0 || c.ClaimOutcomeTimeout > 10*time.Minute:
		return fmt.Errorf("FLASHSALE_CLAIM_OUTCOME_TIMEOUT must be positive, at most 10m, got %s", c.ClaimOutcomeTimeout)
	case c.IdempotencyTTL < time.Second:
		return fmt.Errorf("FLASHSALE_IDEMPOTENCY_TTL must be at least 1s, got %s", c.IdempotencyTTL)
	case c.ShutdownTimeout < 0:
		return fmt.Errorf("FLASHSALE_SHUTDOWN_TIMEOUT must be positive, got %s", c.ShutdownTimeout)
	case c.PipelineWorkers > 1024:
		return fmt.Errorf("FLASHSALE_REDIS_PIPELINE_WORKERS must be 0 (off) to 1024, got %d", c.PipelineWorkers)
	case c.PipelineMaxBatch < 1 || c.PipelineMaxBatch > 10_000:
		return fmt.Errorf("FLASHSALE_REDIS_PIPELINE_MAX_BATCH must be 1..10000, got %d", c.PipelineMaxBatch)
	case c.MySQLTimeout < 0:
		return fmt.Errorf("FLASHSALE_MYSQL_REQUEST_TIMEOUT must be positive, got %s", c.MySQLTimeout)
	case c.MySQLMaxInflight < 1:
		return fmt.Errorf("FLASHSALE_MYSQL_MAX_INFLIGHT must be at least 1, got %d", c.MySQLMaxInflight)
	case math.IsNaN(c.UserRate) || math.IsInf(c.UserRate, 0):
		return fmt.Errorf("FLASHSALE_USER_RATE must be 0 (off) or a positive rate, got %v", c.UserRate)
	case c.UserBurst < 1:
		return fmt.Errorf("FLASHSALE_USER_BURST must be at least 1, got %d", c.UserBurst)
	case c.IPRate < 0 || math.IsNaN(c.IPRate) || math.IsInf(c.IPRate, 0):
		return fmt.Errorf("FLASHSALE_IP_RATE must be 0 (off) or a positive rate, got %v", c.IPRate)
	case c.IPBurst < 1:
		return fmt.Errorf("FLASHSALE_IP_BURST must be at least 1, got %d", c.IPBurst)
	case math.IsNaN(c.QueuePageRate) || math.IsInf(c.QueuePageRate, 0):
		return fmt.Errorf("FLASHSALE_QUEUE_PAGE_RATE must be 0 (off) or a positive rate, got %v", c.QueuePageRate)
	case c.MaxInflight < 1:
		return fmt.Errorf("FLASHSALE_MAX_INFLIGHT must be at least 1, got %d", c.MaxInflight)
	case c.SoldOutRefresh > time.Minute:
		return fmt.Errorf("FLASHSALE_SOLD_OUT_REFRESH must be 0 (off) to 1m, got %s", c.SoldOutRefresh)
	case c.RedisDurability != rdb.DurabilityNone && c.RedisWaitTimeout >= c.ClaimTimeout:
		return fmt.Errorf("FLASHSALE_REDIS_WAIT_TIMEOUT (%s) must be shorter than FLASHSALE_CLAIM_TIMEOUT (%s): a claim waits for its replicas within its own time", c.RedisWaitTimeout, c.ClaimTimeout)
	}
	if err := c.durability().Validate(); err != nil {
		return err
	}
	var v validConfig
	var err error
	if c.JWTJWKSFile != "" {
		if v.jwks, err = token.LoadKeySet(c.JWTJWKSFile); err != nil {
			return fmt.Errorf("FLASHSALE_JWT_JWKS_FILE: %w", err)
		}
	}
	if v.trusted, err = ratelimit.ParsePrefixes(c.TrustedProxies); err != nil {
		return fmt.Errorf("FLASHSALE_TRUSTED_PROXIES: %w", err)
	}
	if v.loc, err = time.LoadLocation(c.TimeZone); err != nil {
		return fmt.Errorf("FLASHSALE_TIMEZONE: %w", err)
	}
	c.valid = &v
	return nil
}

// validConfig is what Validate parsed of a Config.
type validConfig struct {
	loc     *time.Location
	trusted []netip.Prefix
	jwks    token.KeySet
}

// badOrigin is the first of origins that is not exactly one origin
// (http or https, a host name or IP address, an optional port, nothing
// more: no wildcard, which a CSP's frame-ancestors would read as any
// subdomain), or "".
func badOrigin(origins []string) string {
	for _, o := range origins {
		u, err := url.Parse(o)
		if err != nil || (u.Scheme != "https" && u.Scheme != "http") || o != u.Scheme+"://"+u.Host || !validHost(u.Hostname()) ||
			!validPort(u.Port(), strings.HasSuffix(u.Host, ":")) {
			return o
		}
	}
	return ""
}

// validHost reports whether h is a DNS name (labels of letters, digits
// and hyphens) or an IP address.
func validHost(h string) bool {
	if net.ParseIP(h) != nil {
		return true
	}
	if h == "" || len(h) > 253 {
		return false
	}
	for label := range strings.SplitSeq(h, ".") {
		if label == "" || len(label) > 63 || label[0] == '-' || label[len(label)-1] == '-' {
			return false
		}
		for _, c := range label {
			if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '-') {
				return false
			}
		}
	}
	return true
}

// validPort reports whether p is empty (and no colon stood before it) or
// a port, 1-65535.
func validPort(p string, colon bool) bool {
	if p == "" {
		return !colon
	}
	n, err := strconv.Atoi(p)
	return err == nil && n >= 1 && n <= 65535 && p[0] != '0'
}
