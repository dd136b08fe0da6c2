package event

import (
	"cmp"
	"encoding/base64"
	"fmt"
	"net"
	"net/url"
	"os"
	"slices"
	"strconv"
	"strings"
	"time"
)

// Config of the sinks the reaper relays order events to (docs/EVENTS.md,
// "Sinks"), each optional: webhook endpoints, Kafka. The events API needs
// none of it.
type Config struct {
	// Source is the events' source. Default "flashsale".
	Source string `envconfig:"FLASHSALE_EVENTS_SOURCE" default:"flashsale"`
	// WebhookURLs: the endpoints each event is POSTed to, each a sink of
	// its own.
	WebhookURLs []string `envconfig:"FLASHSALE_EVENTS_WEBHOOK_URLS"`
	// WebhookSecret signs the deliveries (Standard Webhooks): "whsec_" and
	// the base64 of 24 to 64 random bytes.
	WebhookSecret string `envconfig:"FLASHSALE_EVENTS_WEBHOOK_SECRET"`
	// WebhookTimeout bounds one delivery. Default 10s.
	WebhookTimeout time.Duration `envconfig:"FLASHSALE_EVENTS_WEBHOOK_TIMEOUT" default:"10s"`
	// WebhookRetryFor: an event an endpoint has not taken this long after
	// its first attempt is recorded failed for it. Default 72h.
	WebhookRetryFor time.Duration `envconfig:"FLASHSALE_EVENTS_WEBHOOK_RETRY_FOR" default:"72h"`
	// KafkaBrokers: the seed brokers; none, no Kafka sink.
	KafkaBrokers []string `envconfig:"FLASHSALE_EVENTS_KAFKA_BROKERS"`
	// KafkaTopic: the topic events are produced to. Default
	// "flashsale.events" when brokers are set.
	KafkaTopic string `envconfig:"FLASHSALE_EVENTS_KAFKA_TOPIC"`
	// KafkaCompression: the codec of the record batches: none (the
	// default: every Kafka client reads it, and it costs the relay no
	// CPU), gzip (every client reads it too), snappy, lz4 or zstd (some
	// clients need a codec added: kafkajs reads only gzip without one).
	KafkaCompression string `envconfig:"FLASHSALE_EVENTS_KAFKA_COMPRESSION" default:"none"`
	// KafkaTLS: connect to the brokers with TLS; KafkaTLSCAFile: the CA
	// bundle that signs their certificates (default: the system's).
	KafkaTLS       bool   `envconfig:"FLASHSALE_EVENTS_KAFKA_TLS"`
	KafkaTLSCAFile string `envconfig:"FLASHSALE_EVENTS_KAFKA_TLS_CA_FILE"`
	// KafkaSASLMechanism: PLAIN, SCRAM-SHA-256 or SCRAM-SHA-512 (empty:
	// no SASL), with KafkaSASLUser and KafkaSASLPassword.
	KafkaSASLMechanism string `envconfig:"FLASHSALE_EVENTS_KAFKA_SASL_MECHANISM"`
	KafkaSASLUser      string `envconfig:"FLASHSALE_EVENTS_KAFKA_SASL_USER"`
	KafkaSASLPassword  string `envconfig:"FLASHSALE_EVENTS_KAFKA_SASL_PASSWORD"`
	// RelayParts: each sink is relayed in this many parts, each order's
	// events in one, each part under a lease of its own, the parts shared
	// among the reapers relaying (docs/EVENTS.md, "Relaying in parts").
	// The same on every reaper. Default 1.
	RelayParts int `envconfig:"FLASHSALE_EVENTS_RELAY_PARTS" default:"1"`
	// RelayLease: a part's lease. A reaper gone, the others relay its
	// parts within about this long; at least three webhook timeouts are
	// taken. Default 30s.
	RelayLease time.Duration `envconfig:"FLASHSALE_EVENTS_RELAY_LEASE" default:"30s"`
}

// Defaults of Config.
const (
	WebhookTimeoutDefault  = 10 * time.Second
	WebhookRetryForDefault = 72 * time.Hour
	KafkaTopicDefault      = "flashsale.events"
	KafkaCompressionNone   = "none"
	RelayLeaseDefault      = 30 * time.Second
	// RelayPartsMax bounds FLASHSALE_EVENTS_RELAY_PARTS: a reaper runs a
	// loop a part of each sink, each with its own connections.
	RelayPartsMax = 64
)

// KafkaCompressions are the values FLASHSALE_EVENTS_KAFKA_COMPRESSION takes.
var KafkaCompressions = []string{"none", "gzip", "snappy", "lz4", "zstd"}

// SetDefaults fills the zero fields with the defaults.
func (c *Config) SetDefaults() {
	c.Source = cmp.Or(c.Source, DefaultSource)
	c.WebhookTimeout = cmp.Or(c.WebhookTimeout, WebhookTimeoutDefault)
	c.WebhookRetryFor = cmp.Or(c.WebhookRetryFor, WebhookRetryForDefault)
	c.KafkaCompression = cmp.Or(c.KafkaCompression, KafkaCompressionNone)
	c.RelayParts = cmp.Or(c.RelayParts, 1)
	c.RelayLease = cmp.Or(c.RelayLease, RelayLeaseDefault)
	if len(c.KafkaBrokers) > 0 {
		c.KafkaTopic = cmp.Or(c.KafkaTopic, KafkaTopicDefault)
	}
}

// Validate reports the first wrong value, naming its variable. Call it
// after SetDefaults.
func (c *Config) Validate() error {
	if !ValidSource(c.Source) {
		return fmt.Errorf("FLASHSALE_EVENTS_SOURCE must be 1-255 printable characters without spaces (a URI-reference), got %q", c.Source)
	}
	seen := map[string]bool{}
	for _, u := range c.WebhookURLs {
		name, err := WebhookName(u)
		if err != nil {
			return fmt.Errorf("FLASHSALE_EVENTS_WEBHOOK_URLS: %w", err)
		}
		if seen[name] {
			return fmt.Errorf("FLASHSALE_EVENTS_WEBHOOK_URLS names %s twice", name)
		}
		seen[name] = true
	}
	if len(c.WebhookURLs) > 0 || c.WebhookSecret != "" {
		if _, err := SecretKey(c.WebhookSecret); err != nil {
			return fmt.Errorf("FLASHSALE_EVENTS_WEBHOOK_SECRET %w", err)
		}
	}
	switch {
	case c.WebhookTimeout < time.Millisecond:
		return fmt.Errorf("FLASHSALE_EVENTS_WEBHOOK_TIMEOUT must be at least 1ms, got %s", c.WebhookTimeout)
	case c.WebhookRetryFor < 0:
		return fmt.Errorf("FLASHSALE_EVENTS_WEBHOOK_RETRY_FOR must not be negative, got %s", c.WebhookRetryFor)
	case c.RelayParts < 1 || c.RelayParts > RelayPartsMax:
		return fmt.Errorf("FLASHSALE_EVENTS_RELAY_PARTS must be 1 to %d, got %d", RelayPartsMax, c.RelayParts)
	case c.RelayLease < time.Second:
		return fmt.Errorf("FLASHSALE_EVENTS_RELAY_LEASE must be at least 1s, got %s", c.RelayLease)
	}
	for _, b := range c.KafkaBrokers {
		if !hostPort(b) {
			return fmt.Errorf("FLASHSALE_EVENTS_KAFKA_BROKERS: %q is not host:port (a port of 1-65535)", b)
		}
	}
	if !slices.Contains(KafkaCompressions, c.KafkaCompression) {
		return fmt.Errorf("FLASHSALE_EVENTS_KAFKA_COMPRESSION must be one of %s, got %q", strings.Join(KafkaCompressions, ", "), c.KafkaCompression)
	}
	kafka := len(c.KafkaBrokers) > 0
	switch {
	case !kafka && c.KafkaTopic != "":
		return fmt.Errorf("FLASHSALE_EVENTS_KAFKA_TOPIC is %q but FLASHSALE_EVENTS_KAFKA_BROKERS is empty", c.KafkaTopic)
	case !kafka && (c.KafkaTLS || c.KafkaTLSCAFile != "" || c.KafkaSASLMechanism != ""):
		return fmt.Errorf("FLASHSALE_EVENTS_KAFKA_TLS, _TLS_CA_FILE and _SASL_MECHANISM need FLASHSALE_EVENTS_KAFKA_BROKERS")
	case !kafka && c.KafkaCompression != KafkaCompressionNone:
		return fmt.Errorf("FLASHSALE_EVENTS_KAFKA_COMPRESSION is %q but FLASHSALE_EVENTS_KAFKA_BROKERS is empty", c.KafkaCompression)
	case strings.ContainsAny(c.KafkaTopic, " /,"):
		return fmt.Errorf("FLASHSALE_EVENTS_KAFKA_TOPIC %q is not a topic name", c.KafkaTopic)
	}
	if c.KafkaTLSCAFile != "" {
		if _, err := os.ReadFile(c.KafkaTLSCAFile); err != nil {
			return fmt.Errorf("FLASHSALE_EVENTS_KAFKA_TLS_CA_FILE: %w", err)
		}
	}
	switch c.KafkaSASLMechanism {
	case "":
	case "PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512":
		if c.KafkaSASLUser == "" || c.KafkaSASLPassword == "" {
			return fmt.Errorf("FLASHSALE_EVENTS_KAFKA_SASL_MECHANISM %s needs FLASHSALE_EVENTS_KAFKA_SASL_USER and FLASHSALE_EVENTS_KAFKA_SASL_PASSWORD", c.KafkaSASLMechanism)
		}
	default:
		return fmt.Errorf("FLASHSALE_EVENTS_KAFKA_SASL_MECHANISM must be PLAIN, SCRAM-SHA-256 or SCRAM-SHA-512, got %q", c.KafkaSASLMechanism)
	}
	return nil
}

// hostPort reports whether s is host:port with a host and a port of 1-65535.
func hostPort(s string) bool {
	host, port, err := net.SplitHostPort(s)
	if err != nil || host == "" || strings.ContainsAny(host, " /") {
		return false
	}
	p, err := strconv.Atoi(port)
	return err == nil && p >= 1 && p <= 65535
}

// WebhookName is the sink name of a webhook endpoint: "webhook:" and its
// URL without credentials, query or fragment (what an operator passes to
// "reaper events redeliver --sink"). An URL that is not http(s) with a
// host is an error, which names it as the sink would be named.
func WebhookName(raw string) (string, error) {
	u, err := url.Parse(strings.TrimSpace(raw))
	if err != nil {
		return "", fmt.Errorf("%q is not a URL", Redact(raw))
	}
	if (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return "", fmt.Errorf("%q is not an http(s) URL with a host", Redact(raw))
	}
	name := "webhook:" + u.Scheme + "://" + u.Host + u.EscapedPath()
	if len(name) > 255 {
		return "", fmt.Errorf("%q is longer than 240 characters", Redact(raw))
	}
	return name, nil
}

// Redact is a URL as flashsale shows it: without credentials, query or
// fragment (what cannot be parsed, as far as a scheme and host go).
func Redact(raw string) string {
	raw = strings.TrimSpace(raw)
	if i := strings.IndexAny(raw, "?#"); i >= 0 {
		raw = raw[:i]
	}
	if scheme, rest, ok := strings.Cut(raw, "://"); ok {
		authority := rest
		if slash := strings.IndexByte(rest, '/'); slash >= 0 {
			authority = rest[:slash]
		}
		if at := strings.LastIndexByte(authority, '@'); at >= 0 {
			rest = rest[at+1:]
		}
		return scheme + "://" + rest
	}
	return raw
}

// SecretKey is the signing key of a Standard Webhooks secret: "whsec_"
// and the base64 of 24 to 64 bytes.
func SecretKey(secret string) ([]byte, error) {
	b64, ok := strings.CutPrefix(secret, "whsec_")
	if !ok {
		return nil, fmt.Errorf("must begin with whsec_ (Standard Webhooks)")
	}
	key, err := base64.StdEncoding.DecodeString(b64)
	if err != nil {
		return nil, fmt.Errorf("must be whsec_ and base64: %v", err)
	}
	if len(key) < 24 || len(key) > 64 {
		return nil, fmt.Errorf("must hold 24 to 64 bytes after whsec_, holds %d", len(key))
	}
	return key, nil
}
