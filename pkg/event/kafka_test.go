package event_test

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/binary"
	"encoding/pem"
	"io"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/sasl/scram"

	"github.com/flashsale/flashsale/pkg/db"
	"github.com/flashsale/flashsale/pkg/event"
	"github.com/flashsale/flashsale/pkg/internal/testsink"
)

// selfSigned is a TLS certificate for 127.0.0.1 and the PEM of its CA
// (itself).
func selfSigned(t *testing.T) (tls.Certificate, []byte) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	require.NoError(t, err)
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "kfake"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour), IPAddresses: []net.IP{net.ParseIP("127.0.0.1")},
		IsCA: true, BasicConstraintsValid: true, KeyUsage: x509.KeyUsageDigitalSignature | x509.KeyUsageCertSign,
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	require.NoError(t, err)
	return tls.Certificate{Certificate: [][]byte{der}, PrivateKey: key}, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der})
}

// The Kafka sink speaks TLS (verifying the broker against
// FLASHSALE_EVENTS_KAFKA_TLS_CA_FILE) and SASL SCRAM to a broker that
// demands both, and its records carry the event.
func TestKafkaOverTLSWithSCRAM(t *testing.T) {
	cert, caPEM := selfSigned(t)
	ca := filepath.Join(t.TempDir(), "ca.pem")
	require.NoError(t, os.WriteFile(ca, caPEM, 0o600))
	c, err := kfake.NewCluster(kfake.NumBrokers(1), kfake.SeedTopics(1, "orders"), kfake.EnableSASL(),
		kfake.Superuser("SCRAM-SHA-512", "flashsale", "s3cret"), kfake.TLS(&tls.Config{Certificates: []tls.Certificate{cert}}))
	require.NoError(t, err)
	defer c.Close()

	cfg := event.Config{KafkaBrokers: c.ListenAddrs(), KafkaTopic: "orders", KafkaTLSCAFile: ca,
		KafkaSASLMechanism: "SCRAM-SHA-512", KafkaSASLUser: "flashsale", KafkaSASLPassword: "s3cret"}
	cfg.SetDefaults()
	require.NoError(t, cfg.Validate())
	k, err := event.NewKafka(cfg)
	require.NoError(t, err)
	defer k.Close()
	now := time.Now().UTC()
	m := event.Of("shop", db.OutboxEvent{Snapshot: db.Snapshot{OrderID: 42, VoucherID: 7, UserID: "ann", Status: "paid",
		Quantity: 1, CreatedAt: now, ExpiresAt: now, PaidAt: &now}, Row: 3, K: 0, Sequence: 9, OccurredAt: now})
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	n, err := k.Send(ctx, []event.Event{m})
	require.NoError(t, err)
	require.Equal(t, 1, n)

	pool := x509.NewCertPool()
	require.True(t, pool.AppendCertsFromPEM(caPEM))
	r, err := kgo.NewClient(kgo.SeedBrokers(c.ListenAddrs()...), kgo.ConsumeTopics("orders"), kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()),
		kgo.DialTLSConfig(&tls.Config{RootCAs: pool}), kgo.SASL(scram.Auth{User: "flashsale", Pass: "s3cret"}.AsSha512Mechanism()))
	require.NoError(t, err)
	defer r.Close()
	fs := r.PollFetches(ctx)
	require.NoError(t, fs.Err())
	recs := fs.Records()
	require.Len(t, recs, 1)
	require.Equal(t, "42", string(recs[0].Key))
	require.Equal(t, m.JSON(), recs[0].Value)

	// A wrong password is refused: the sink fails, it does not hang.
	cfg.KafkaSASLPassword = "wrong"
	bad, err := event.NewKafka(cfg)
	require.NoError(t, err)
	defer bad.Close()
	sctx, scancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer scancel()
	_, err = bad.Send(sctx, []event.Event{m})
	require.Error(t, err)
}

// FLASHSALE_EVENTS_KAFKA_COMPRESSION: each codec's batches are written
// with it and read back whole by a consumer; none is the default.
func TestKafkaCompressionIsTheOneConfigured(t *testing.T) {
	c, err := kfake.NewCluster(kfake.NumBrokers(1), kfake.SeedTopics(1, "orders"))
	require.NoError(t, err)
	defer c.Close()
	codes := map[string]uint8{"none": 0, "gzip": 1, "snappy": 2, "lz4": 3, "zstd": 4}
	require.Len(t, codes, len(event.KafkaCompressions))
	now := time.Now().UTC()
	var sent int64
	for _, name := range append([]string{""}, event.KafkaCompressions...) {
		cfg := event.Config{KafkaBrokers: c.ListenAddrs(), KafkaTopic: "orders", KafkaCompression: name}
		cfg.SetDefaults()
		require.NoError(t, cfg.Validate(), name)
		want, ok := codes[cfg.KafkaCompression]
		require.True(t, ok, "%q defaults to %q", name, cfg.KafkaCompression)
		k, err := event.NewKafka(cfg)
		require.NoError(t, err)
		msgs := make([]event.Event, 20)
		for i := range msgs {
			sent++
			msgs[i] = event.Of("shop", db.OutboxEvent{Snapshot: db.Snapshot{OrderID: sent, VoucherID: 7, UserID: "ann", Status: "created",
				Quantity: 1, CreatedAt: now, ExpiresAt: now}, Row: sent, Sequence: sent, OccurredAt: now})
		}
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		n, err := k.Send(ctx, msgs)
		cancel()
		k.Close()
		require.NoError(t, err, name)
		require.Equal(t, len(msgs), n)

		r, err := kgo.NewClient(kgo.SeedBrokers(c.ListenAddrs()...), kgo.ConsumeTopics("orders"),
			kgo.ConsumeResetOffset(kgo.NewOffset().At(sent-int64(len(msgs)))))
		require.NoError(t, err)
		var got []*kgo.Record
		ctx, cancel = context.WithTimeout(context.Background(), 30*time.Second)
		for len(got) < len(msgs) && ctx.Err() == nil {
			fs := r.PollFetches(ctx)
			got = append(got, fs.Records()...)
		}
		cancel()
		r.Close()
		require.Len(t, got, len(msgs), name)
		for i, rec := range got {
			require.Equal(t, msgs[i].JSON(), rec.Value, "%s: record %d read back whole", name, i)
			require.Equal(t, want, rec.Attrs.CompressionType(), "%s: record %d's batch codec", name, i)
		}
	}
}

// The brokers are host:port; the codec is one of the five, and needs
// brokers; the relay's parts are 1 to 64, its lease at least a second.
func TestKafkaConfigIsRefusedWithItsVariable(t *testing.T) {
	for _, c := range []struct {
		cfg  event.Config
		want string
	}{
		{event.Config{KafkaBrokers: []string{"localhost"}}, "FLASHSALE_EVENTS_KAFKA_BROKERS"},
		{event.Config{KafkaBrokers: []string{"localhost:0"}}, "FLASHSALE_EVENTS_KAFKA_BROKERS"},
		{event.Config{KafkaBrokers: []string{"localhost:99999"}}, "FLASHSALE_EVENTS_KAFKA_BROKERS"},
		{event.Config{KafkaBrokers: []string{":9092"}}, "FLASHSALE_EVENTS_KAFKA_BROKERS"},
		{event.Config{KafkaBrokers: []string{"kafka:9092"}, KafkaCompression: "brotli"}, "FLASHSALE_EVENTS_KAFKA_COMPRESSION"},
		{event.Config{KafkaCompression: "gzip"}, "FLASHSALE_EVENTS_KAFKA_COMPRESSION"},
		{event.Config{RelayParts: -1}, "FLASHSALE_EVENTS_RELAY_PARTS"},
		{event.Config{RelayParts: event.RelayPartsMax + 1}, "FLASHSALE_EVENTS_RELAY_PARTS"},
		{event.Config{RelayLease: time.Millisecond}, "FLASHSALE_EVENTS_RELAY_LEASE"},
	} {
		c.cfg.SetDefaults()
		err := c.cfg.Validate()
		require.Error(t, err, "%+v", c.cfg)
		require.Contains(t, err.Error(), c.want)
	}
	ok := event.Config{KafkaBrokers: []string{"kafka-0.kafka:9092", "[::1]:9093", "10.0.0.1:9094"}, KafkaCompression: "zstd"}
	ok.SetDefaults()
	require.NoError(t, ok.Validate())
}

// A refused webhook URL is named without its credentials or query.
func TestARefusedWebhookURLIsNamedWithoutItsSecrets(t *testing.T) {
	for _, raw := range []string{"ftp://u:PASS@host/x?k=SECRET", "http://u:PASS@/x?k=SECRET", "http://u:PASS@h/" + strings.Repeat("a", 300) + "?k=SECRET"} {
		cfg := event.Config{WebhookURLs: []string{raw}, WebhookSecret: testsink.Secret}
		cfg.SetDefaults()
		err := cfg.Validate()
		require.Error(t, err, raw)
		require.Contains(t, err.Error(), "FLASHSALE_EVENTS_WEBHOOK_URLS")
		require.NotContains(t, err.Error(), "PASS")
		require.NotContains(t, err.Error(), "SECRET")
	}
	require.Equal(t, "https://host:8443/a@b/c", event.Redact(" https://u:p@host:8443/a@b/c?x=1#y "))
}

// A hostile or spoofed broker answered the reaper's first request with a
// 95 MB frame: franz-go's default (100 MiB) read it, and the reaper went
// from 33 to 123 MiB on one connection. The relay fetches nothing, so an
// answer is read to event.KafkaMaxReadBytes: the client gives the frame up
// from its size alone and closes the connection, where the default kept it
// open waiting for the 95 MB.
func TestAHostileBrokersHugeAnswerIsRefusedFromItsSize(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	defer ln.Close()
	closed := make(chan time.Duration, 16)
	go func() {
		for {
			conn, err := ln.Accept()
			if err != nil {
				return
			}
			go func() {
				defer conn.Close()
				var size [4]byte
				if _, err := io.ReadFull(conn, size[:]); err != nil {
					return
				}
				req := make([]byte, binary.BigEndian.Uint32(size[:]))
				if _, err := io.ReadFull(conn, req); err != nil || len(req) < 8 {
					return
				}
				// A frame of 95 MB, the request's correlation id, then
				// nothing more: a client that reads it waits.
				head := binary.BigEndian.AppendUint32(nil, 95_000_000)
				head = append(head, req[4:8]...)
				if _, err := conn.Write(append(head, make([]byte, 1024)...)); err != nil {
					return
				}
				sent := time.Now()
				_ = conn.SetReadDeadline(time.Now().Add(time.Minute))
				_, _ = io.Copy(io.Discard, conn) // until the client closes it
				closed <- time.Since(sent)
			}()
		}
	}()
	cfg := event.Config{KafkaBrokers: []string{ln.Addr().String()}, KafkaTopic: "orders"}
	cfg.SetDefaults()
	require.NoError(t, cfg.Validate())
	k, err := event.NewKafka(cfg)
	require.NoError(t, err)
	defer k.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	go func() {
		now := time.Now().UTC()
		_, _ = k.Send(ctx, []event.Event{event.Of("shop", db.OutboxEvent{Snapshot: db.Snapshot{OrderID: 1, VoucherID: 7, UserID: "ann",
			Status: "created", Quantity: 1, CreatedAt: now, ExpiresAt: now}, Row: 1, Sequence: 1, OccurredAt: now})})
	}()
	select {
	case took := <-closed:
		t.Logf("the client closed the connection %s after the frame's size", took)
	case <-time.After(5 * time.Second):
		t.Fatal("the client kept the connection open, reading a 95 MB answer")
	}
}
