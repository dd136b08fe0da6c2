package doccheck

import (
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// docs/OPERATIONS.md names the alerts the chart ships, every one, and no
// other (RUNBOOK.md's sections are held to them by the chart's test).
func TestTheAlertsListIsTheChartsRules(t *testing.T) {
	rules, err := os.ReadFile(filepath.Join("..", "..", "..", "helm", "flashsale", "templates", "prometheusrule.yaml"))
	require.NoError(t, err)
	var shipped []string
	for _, m := range regexp.MustCompile(`alert: (Flashsale\w+)`).FindAllStringSubmatch(string(rules), -1) {
		shipped = append(shipped, m[1])
	}
	require.NotEmpty(t, shipped)
	doc := read(t, "OPERATIONS.md")
	_, after, ok := strings.Cut(doc, "ships ")
	require.True(t, ok)
	para, _, _ := strings.Cut(after, "\n\n")
	var named []string
	for _, m := range regexp.MustCompile("`(Flashsale\\w+)`").FindAllStringSubmatch(para, -1) {
		named = append(named, m[1])
	}
	slices.Sort(shipped)
	slices.Sort(named)
	require.Equal(t, shipped, named, "docs/OPERATIONS.md's alerts against the chart's rules")
}
