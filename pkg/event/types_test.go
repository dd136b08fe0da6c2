package event_test

import (
	"os"
	"regexp"
	"slices"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/flashsale/flashsale/pkg/event"
)

// The types the events API filters by are the ones docs/EVENTS.md's
// table lists, and the ones api/openapi.yaml's type filter takes.
func TestTheEventTypesAreTheDocumentedOnes(t *testing.T) {
	doc, err := os.ReadFile("../../docs/EVENTS.md")
	require.NoError(t, err)
	var listed []string
	for _, m := range regexp.MustCompile("(?m)^\\| `((?:order|voucher)\\.[a-z]+)` \\|").FindAllStringSubmatch(string(doc), -1) {
		listed = append(listed, m[1])
	}
	want := event.Types()
	slices.Sort(listed)
	slices.Sort(want)
	require.Equal(t, want, listed)
	spec, err := os.ReadFile("../../api/openapi.yaml")
	require.NoError(t, err)
	enum := regexp.MustCompile(`enum: \[(order\.[a-z]+(?:, (?:order|voucher)\.[a-z]+)*)\]`).FindSubmatch(spec)
	require.NotNil(t, enum)
	fromSpec := regexp.MustCompile(`(?:order|voucher)\.[a-z]+`).FindAllString(string(enum[1]), -1)
	slices.Sort(fromSpec)
	require.Equal(t, want, fromSpec)
}
