package event

import (
	"context"
	"errors"
)

// Sink delivers events somewhere: Kafka, one webhook endpoint.
type Sink interface {
	// Name names the sink in metrics, the events CLI and event_sinks:
	// "kafka", "webhook:https://host/path".
	Name() string
	// Send delivers events (in sequence order) and returns how many of
	// them, from the first, were delivered; when that is not all, the
	// error (a *Failure) is events[n]'s. Events after events[n] may have
	// been delivered too: they are delivered again (at least once).
	Send(ctx context.Context, events []Event) (int, error)
	// Close releases the sink's connections.
	Close()
}

// Laned is a sink whose deliveries go over lanes of their own (a webhook
// endpoint): one order's events on one lane, in order. The relay keeps a
// state a lane (lanes.go): a failure holds back its own lane, and a
// lane's delivered events are never sent again for another's failure.
type Laned interface {
	Sink
	// Lanes is how many lanes there are; Lane is e's, from 0.
	Lanes() int
	Lane(e Event) int
	// SendLane delivers events, one order's in order, and says which
	// were delivered, and the first failure's error (a *Failure) when not
	// all were. When it returns, nothing it was given is still on its way:
	// an event not delivered cannot arrive after the relay sends it again.
	SendLane(ctx context.Context, events []Event) ([]bool, error)
}

// Failure is why a delivery failed: Cause is a metric's label, one of
// Causes.
type Failure struct {
	Cause string
	// Gone: the endpoint answered 410 Gone; it takes nothing more until
	// an operator starts it again.
	Gone bool
	Err  error
}

func (f *Failure) Error() string { return f.Cause + ": " + f.Err.Error() }
func (f *Failure) Unwrap() error { return f.Err }

// CauseOf is err's cause label ("other" when it is not a *Failure).
func CauseOf(err error) string {
	if f, ok := errors.AsType[*Failure](err); ok {
		return f.Cause
	}
	return "other"
}

// Causes are every cause a failure may give, for the metrics to start at 0.
var Causes = []string{"http_3xx", "http_4xx", "http_5xx", "gone", "timeout", "refused", "connection", "kafka", "other"}

// Sinks builds the sinks cfg configures: a webhook endpoint each, Kafka.
func Sinks(cfg Config) ([]Sink, error) {
	var out []Sink
	for _, u := range cfg.WebhookURLs {
		w, err := NewWebhook(u, cfg.WebhookSecret, cfg.WebhookTimeout)
		if err != nil {
			return nil, err
		}
		out = append(out, w)
	}
	if len(cfg.KafkaBrokers) > 0 {
		k, err := NewKafka(cfg)
		if err != nil {
			return nil, err
		}
		out = append(out, k)
	}
	return out, nil
}
