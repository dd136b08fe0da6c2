package event

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"hash/maphash"
	"os"
	"sync"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/sasl/plain"
	"github.com/twmb/franz-go/pkg/sasl/scram"
)

// Kafka is the Kafka sink: a record per event, keyed by its order id (one
// order's events land in one partition, in order), the event's JSON its
// value, the CloudEvents attributes beside it as ce_ headers. franz-go's
// producer is idempotent: a retry inside the client is not a duplicate.
type Kafka struct {
	client *kgo.Client
	topic  string
	seed   maphash.Seed
}

// NewKafka is the Kafka sink of cfg (KafkaBrokers set). It does not dial:
// the first Send does, and waits for brokers that are not there yet.
func NewKafka(cfg Config) (*Kafka, error) {
	opts := []kgo.Opt{
		kgo.SeedBrokers(cfg.KafkaBrokers...),
		kgo.DefaultProduceTopic(cfg.KafkaTopic),
		kgo.ProducerLinger(time.Millisecond),
		kgo.ClientID("flashsale-reaper"),
		kgo.ProducerBatchCompression(compressionOf(cfg.KafkaCompression)),
		// A record the client has tried to send for this long is failed,
		// not retried later. (A record it could not even try, its broker
		// gone, waits in its buffer: SendLane settles those.)
		kgo.RecordDeliveryTimeout(KafkaDeliveryTimeout),
		// The relay fetches nothing: a broker's answers (metadata,
		// produce acknowledgements) are small, and a hostile or spoofed
		// broker's frame is refused past this, not allocated.
		kgo.BrokerMaxReadBytes(KafkaMaxReadBytes),
		kgo.FetchMaxBytes(KafkaMaxReadBytes / 2), kgo.FetchMaxPartitionBytes(KafkaMaxReadBytes / 2), // the client's check; nothing is fetched
	}
	if cfg.KafkaTLS || cfg.KafkaTLSCAFile != "" {
		tc := &tls.Config{MinVersion: tls.VersionTLS12}
		if cfg.KafkaTLSCAFile != "" {
			pem, err := os.ReadFile(cfg.KafkaTLSCAFile)
			if err != nil {
				return nil, fmt.Errorf("FLASHSALE_EVENTS_KAFKA_TLS_CA_FILE: %w", err)
			}
			tc.RootCAs = x509.NewCertPool()
			if !tc.RootCAs.AppendCertsFromPEM(pem) {
				return nil, fmt.Errorf("FLASHSALE_EVENTS_KAFKA_TLS_CA_FILE %s holds no PEM certificate", cfg.KafkaTLSCAFile)
			}
		}
		opts = append(opts, kgo.DialTLSConfig(tc))
	}
	switch cfg.KafkaSASLMechanism {
	case "PLAIN":
		opts = append(opts, kgo.SASL(plain.Auth{User: cfg.KafkaSASLUser, Pass: cfg.KafkaSASLPassword}.AsMechanism()))
	case "SCRAM-SHA-256":
		opts = append(opts, kgo.SASL(scram.Auth{User: cfg.KafkaSASLUser, Pass: cfg.KafkaSASLPassword}.AsSha256Mechanism()))
	case "SCRAM-SHA-512":
		opts = append(opts, kgo.SASL(scram.Auth{User: cfg.KafkaSASLUser, Pass: cfg.KafkaSASLPassword}.AsSha512Mechanism()))
	}
	client, err := kgo.NewClient(opts...)
	if err != nil {
		return nil, fmt.Errorf("FLASHSALE_EVENTS_KAFKA_BROKERS: %w", err)
	}
	return &Kafka{client: client, topic: cfg.KafkaTopic, seed: maphash.MakeSeed()}, nil
}

// KafkaDeliveryTimeout bounds a record's life in the client.
const KafkaDeliveryTimeout = 10 * time.Second

// KafkaMaxReadBytes bounds one answer read from a broker.
const KafkaMaxReadBytes = 1 << 20

// compressionOf is the codec FLASHSALE_EVENTS_KAFKA_COMPRESSION names.
func compressionOf(name string) kgo.CompressionCodec {
	switch name {
	case "gzip":
		return kgo.GzipCompression()
	case "snappy":
		return kgo.SnappyCompression()
	case "lz4":
		return kgo.Lz4Compression()
	case "zstd":
		return kgo.ZstdCompression()
	}
	return kgo.NoCompression()
}

// Name is "kafka".
func (k *Kafka) Name() string { return "kafka" }

// Close closes the client, waiting at most 5 s for it: records already
// sent to a broker that went away cannot be failed by an idempotent
// producer, and a reaper shutting down does not wait for the broker.
func (k *Kafka) Close() {
	done := make(chan struct{})
	go func() { k.client.Close(); close(done) }()
	select {
	case <-done:
	case <-time.After(5 * time.Second):
	}
}

// Send produces events as SendLane does, and reports how many of them,
// from the first, were acknowledged.
func (k *Kafka) Send(ctx context.Context, events []Event) (int, error) {
	ok, err := k.SendLane(ctx, events)
	for i, delivered := range ok {
		if !delivered {
			return i, err
		}
	}
	return len(events), nil
}

// Lanes is how many lanes the relay sends Kafka's records over (one
// order's always on one, so in one partition, in order).
func (k *Kafka) Lanes() int { return WebhookLanes }

// Lane is e's lane: by its subject, the record's key.
func (k *Kafka) Lane(e Event) int { return int(maphash.String(k.seed, e.Subject) % WebhookLanes) }

// SendLane produces events and says which were acknowledged. It
// produces them for half of ctx's time, awaits those a broker took until
// a sixth is left, then fails every record of the client not
// acknowledged, so nothing of this call is still in the client when it
// returns: a record the relay produces again never arrives beside a
// first copy the client delivered late. One a broker had written and not
// yet acknowledged when it was aborted (the broker gone, or slower than
// the wait) is in the topic all the same, and arrives twice.
func (k *Kafka) SendLane(ctx context.Context, events []Event) ([]bool, error) {
	ok, errs := make([]bool, len(events)), make([]error, len(events))
	pctx, cancel := produceContext(ctx)
	defer cancel()
	var wg sync.WaitGroup
	wg.Add(len(events))
	for i, e := range events {
		k.client.Produce(pctx, Record(e), func(_ *kgo.Record, err error) {
			errs[i] = err
			wg.Done()
		})
	}
	done := make(chan struct{})
	go func() { wg.Wait(); close(done) }()
	select {
	case <-done:
	case <-pctx.Done():
		// A record not sent yet is failed by its context now; one a broker
		// took is awaited a while more: a slow broker's acknowledgement
		// comes late, and the record aborted would arrive twice.
		await, stop := awaitContext(ctx)
		defer stop()
		select {
		case <-done:
		case <-await.Done():
			// Every record not acknowledged is failed now, whatever state
			// its partition is in (AbortBufferedRecords waited for a broker
			// that was gone, past the send's end: the records stayed
			// buffered, and arrived beside their second copies). Without
			// transactions the client bumps its producer epoch if it
			// abandons a record it had sent, so no sequence number is used
			// twice.
			k.client.UnsafeAbortBufferedRecords()
			select {
			case <-done:
			case <-ctx.Done():
				return ok, &Failure{Cause: "timeout", Err: fmt.Errorf("kafka: records left unsettled: %w", ctx.Err())}
			}
		}
	}
	var first error
	for i, err := range errs {
		if err == nil {
			ok[i] = true
			continue
		}
		if first == nil {
			cause := "kafka"
			if errors.Is(err, context.DeadlineExceeded) || errors.Is(err, kgo.ErrAborting) {
				cause = "timeout"
			}
			first = &Failure{Cause: cause, Err: err}
		}
	}
	return ok, first
}

// produceContext is ctx ending when half its time is left (ctx without
// a deadline: as ctx): records are produced until then. awaitContext,
// asked then, ends when a sixth of the whole is left: the records a
// broker took are awaited until then, and the last sixth settles those
// aborted.
func produceContext(ctx context.Context) (context.Context, context.CancelFunc) {
	return leaving(ctx, 2)
}

func awaitContext(ctx context.Context) (context.Context, context.CancelFunc) {
	return leaving(ctx, 3)
}

// leaving is ctx ending when 1/n of the time until its deadline is
// left.
func leaving(ctx context.Context, n time.Duration) (context.Context, context.CancelFunc) {
	end, ok := ctx.Deadline()
	if !ok {
		return context.WithCancel(ctx)
	}
	return context.WithDeadline(ctx, end.Add(-time.Until(end)/n))
}

// Record is e as a Kafka record in the CloudEvents Kafka binding's
// structured mode: key the subject (the order id; a split's voucher id),
// value the whole event as JSON, and one header, content-type
// application/cloudevents+json, which says so. No ce_ headers: they are
// the binary mode's, whose value is the data alone, and a record in both
// modes at once is read differently by different SDKs.
func Record(e Event) *kgo.Record {
	return &kgo.Record{Key: []byte(e.Subject), Value: e.JSON(), Headers: recordHeaders}
}

// recordHeaders are every record's headers, one: the client only reads
// them, so records share them (full: an append copies).
var recordHeaders = []kgo.RecordHeader{{Key: "content-type", Value: []byte(ContentType)}}
