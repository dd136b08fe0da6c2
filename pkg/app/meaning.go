package app

import (
	"regexp"
	"strings"

	"github.com/flashsale/flashsale/docs"
)

// meaningWidth is where help cuts a variable's meaning.
const meaningWidth = 90

var (
	docVariable = regexp.MustCompile("`(FLASHSALE_[A-Z0-9_]+)`")
	docLink     = regexp.MustCompile(`\[([^\]]*)\]\([^)]*\)`)
)

// meanings reads the variables' table of docs/CONFIGURATION.md (rows of
// variable | role | default | meaning) into each variable's meaning, cut
// to its first clause and to meaningWidth, markdown removed.
func meanings(doc string) map[string]string {
	out := map[string]string{}
	for _, row := range strings.Split(doc, "\n") {
		cells := strings.Split(row, " | ")
		if len(cells) < 4 || !strings.HasPrefix(cells[0], "| `FLASHSALE_") {
			continue
		}
		m := strings.TrimSuffix(strings.TrimSpace(strings.Join(cells[3:], " | ")), " |")
		m = strings.ReplaceAll(docLink.ReplaceAllString(m, "$1"), "`", "")
		m = strings.ReplaceAll(strings.ReplaceAll(m, "*", ""), "\\|", "|")
		for _, stop := range []string{". ", "; "} {
			if i := strings.Index(m, stop); i > 0 {
				m = m[:i]
			}
		}
		if len(m) > meaningWidth {
			cut := strings.LastIndex(m[:meaningWidth], " ")
			m = m[:max(cut, meaningWidth/2)] + " …"
		}
		for _, v := range docVariable.FindAllStringSubmatch(cells[0], -1) {
			out[v[1]] = m
		}
	}
	return out
}

// variableMeanings are CONFIGURATION.md's, read once.
var variableMeanings = meanings(docs.Configuration)
