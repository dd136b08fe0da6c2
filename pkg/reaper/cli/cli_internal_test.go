package cli

import (
	"os"
	"strings"
	"testing"
)

// Two reapers started alike on one host get two names: the default is
// unique per process (and per start), beginning reaper-<host>-.
func TestTheDefaultReaperNameIsUniquePerProcess(t *testing.T) {
	host, err := os.Hostname()
	if err != nil {
		t.Skip(err)
	}
	var a, b config
	if err := consumerName(&a); err != nil {
		t.Fatal(err)
	}
	if err := consumerName(&b); err != nil {
		t.Fatal(err)
	}
	if a.Consumer == b.Consumer {
		t.Fatalf("two reapers both named %s", a.Consumer)
	}
	for _, n := range []string{a.Consumer, b.Consumer} {
		if !strings.HasPrefix(n, "reaper-"+host+"-") {
			t.Errorf("default name %q does not begin reaper-%s-", n, host)
		}
	}
	named := config{}
	named.Consumer = "given"
	if err := consumerName(&named); err != nil || named.Consumer != "given" {
		t.Errorf("FLASHSALE_CONSUMER_NAME=given became %q (%v)", named.Consumer, err)
	}
}
