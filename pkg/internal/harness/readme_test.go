package harness_test

import (
	"context"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/flashsale/flashsale/pkg/internal/harness"
)

// example is one curl command of the README and the answers documented
// under it ("# 202 {...}").
type example struct {
	line    int
	command string
	answers []answer
}

type answer struct {
	status int
	body   string // as documented: JSON, often with "..." for the rest
}

// readmeExamples reads every curl command in the README's sh blocks, in
// order, with the answers documented under it.
func readmeExamples(t *testing.T, readme string) []example {
	t.Helper()
	var out []example
	lines := strings.Split(readme, "\n")
	inSh := false
	doc := regexp.MustCompile(`^# (\d{3}) (.*)$`)
	for i := 0; i < len(lines); i++ {
		l := lines[i]
		switch {
		case strings.HasPrefix(l, "```sh"):
			inSh = true
			continue
		case strings.HasPrefix(l, "```"):
			inSh = false
			continue
		}
		if !inSh || !strings.HasPrefix(l, "curl ") {
			continue
		}
		ex := example{line: i + 1}
		for strings.HasSuffix(l, "\\") { // continuation lines
			ex.command += strings.TrimSuffix(l, "\\")
			i++
			l = lines[i]
		}
		ex.command += l
		for i+1 < len(lines) && strings.HasPrefix(lines[i+1], "#") {
			i++
			if m := doc.FindStringSubmatch(lines[i]); m != nil {
				st, _ := strconv.Atoi(m[1])
				ex.answers = append(ex.answers, answer{st, m[2]})
			}
		}
		require.NotEmpty(t, ex.answers, "line %d: a curl example without its documented answer", ex.line)
		out = append(out, ex)
	}
	return out
}

// The examples of the README and of docs/API.md run as written, in order,
// against a real stack (as make dev starts one; each file on its own), and
// each answers what its document says: its
// status and, for an error, its code; for a success, the fields shown. The
// ids the README shows are read as the ones the answers gave; the dates
// in it, as times to come. A command documented with several answers is
// the README's "ask again": it is repeated until it gets the last one;
// an order not yet persisted is asked again, as the API says to.
func TestTheDocsExamplesRunAsWritten(t *testing.T) {
	if testing.Short() {
		t.Skip("runs the binaries")
	}
	if _, err := exec.LookPath("curl"); err != nil {
		t.Skip("no curl: apt-get install -y curl (make test installs it)")
	}
	root, err := harness.ModuleRoot()
	require.NoError(t, err)
	ctx := context.Background()
	s := startStack(t, ctx)
	for file, least := range map[string]int{"README.md": 5, "docs/API.md": 15} {
		raw, err := os.ReadFile(filepath.Join(root, file))
		require.NoError(t, err)
		examples := readmeExamples(t, string(raw))
		require.GreaterOrEqual(t, len(examples), least, "%s's examples", file)
		// Each file's examples from a user of their own: a user's limits
		// are the examples' story.
		runExamples(t, s, file, examples, s.Token("user-of-"+strings.ReplaceAll(file, "/", "-")))
	}
	requireKeysDocumented(t, ctx, s, root)
}

// requireKeysDocumented holds every key in the stack's Redis to the key
// layout written in pkg/rdb/keys.go: each must match one of its lines.
func requireKeysDocumented(t *testing.T, ctx context.Context, s *harness.Stack, root string) {
	t.Helper()
	src, err := os.ReadFile(filepath.Join(root, "pkg", "rdb", "keys.go"))
	require.NoError(t, err)
	var layout []*regexp.Regexp
	for _, l := range strings.Split(string(src), "\n") {
		f := strings.Fields(strings.TrimPrefix(l, "//"))
		if !strings.HasPrefix(l, "//\tflashsale:") || len(f) == 0 {
			continue
		}
		p := regexp.QuoteMeta(f[0])
		for from, to := range map[string]string{`\{pP\}`: `\{p\d+\}`, `:v:V`: `:v:\d+(:b\d+)?`, `YYYYMMDD`: `\d{8}`,
			`:idem:U:K`: `:idem:[^:]+:.+`, `:proof:S`: `:proof:.+`, `:alive:C`: `:alive:.+`} {
			p = strings.ReplaceAll(p, from, to)
		}
		layout = append(layout, regexp.MustCompile("^"+p+"$"))
	}
	require.GreaterOrEqual(t, len(layout), 10, "pkg/rdb/keys.go's layout")
	keys, err := s.RDB.Client().Keys(ctx, "*").Result()
	require.NoError(t, err)
	require.NotEmpty(t, keys)
	for _, k := range keys {
		if !slices.ContainsFunc(layout, func(re *regexp.Regexp) bool { return re.MatchString(k) }) {
			t.Errorf("Redis holds %s, which pkg/rdb/keys.go's key layout does not describe", k)
		}
	}
}

// runExamples runs examples in order, as TOKEN, and checks each answer.
func runExamples(t *testing.T, s *harness.Stack, file string, examples []example, userToken string) {
	t.Helper()
	env := append(os.Environ(), "ADMIN="+s.AdminToken, "TOKEN="+userToken)
	// What the README shows -> what this run's answers gave, replaced in
	// one pass (the README's 2 may be this run's 3 while its 3 is 4).
	seen := map[string]string{}
	idField := regexp.MustCompile(`"(id|order_id|entry_id|queue_token)":"([^"]+)"`)
	date := regexp.MustCompile(`20\d\d-\d\d-\d\dT\d\d:\d\d:\d\dZ`)
	later := time.Now().Add(24 * time.Hour).UTC().Format(time.RFC3339)
	run := func(ex example) (int, string) {
		cmd := strings.ReplaceAll(ex.command, "http://127.0.0.1:8080", s.URL)
		cmd = date.ReplaceAllString(cmd, later)
		if len(seen) > 0 {
			var alts []string
			for doc := range seen {
				alts = append(alts, regexp.QuoteMeta(doc))
			}
			ids := regexp.MustCompile(`(/|=|: )(` + strings.Join(alts, "|") + `)(/|'|"| |$)`)
			cmd = ids.ReplaceAllStringFunc(cmd, func(m string) string {
				p := ids.FindStringSubmatch(m)
				return p[1] + seen[p[2]] + p[3]
			})
		}
		c := exec.Command("bash", "-c", cmd+` -s -w '\n%{http_code}'`)
		c.Env = env
		out, err := c.CombinedOutput()
		require.NoError(t, err, "%s line %d: %s\n%s", file, ex.line, cmd, out)
		i := strings.LastIndex(string(out), "\n")
		require.Positive(t, i, "%s line %d: %s", file, ex.line, out)
		status, err := strconv.Atoi(strings.TrimSpace(string(out[i+1:])))
		require.NoError(t, err, "%s line %d: %s", file, ex.line, out)
		return status, strings.TrimSpace(string(out[:i]))
	}
	for _, ex := range examples {
		want := ex.answers[len(ex.answers)-1]
		var status int
		var body string
		deadline := time.Now().Add(30 * time.Second)
		for {
			status, body = run(ex)
			again := (len(ex.answers) > 1 && !matches(want, status, body)) ||
				(status == 409 && strings.Contains(body, `"order_pending"`))
			if !again || time.Now().After(deadline) {
				break
			}
			time.Sleep(100 * time.Millisecond)
		}
		require.True(t, matches(want, status, body), "%s line %d: %s\ndocumented %d %s\nanswered   %d %s",
			file, ex.line, ex.command, want.status, want.body, status, body)
		gotIDs := map[string]string{}
		for _, g := range idField.FindAllStringSubmatch(body, -1) {
			gotIDs[g[1]] = g[2]
		}
		for _, a := range ex.answers { // learn the ids the README shows
			for _, d := range idField.FindAllStringSubmatch(a.body, -1) {
				if got, ok := gotIDs[d[1]]; ok && d[2] != "…" {
					seen[d[2]] = got
				}
			}
		}
	}
}

// matches reports whether an answer is the documented one: the status,
// and every top-level field the documentation shows by name (its value
// too for "error", "state", "status" and "kind").
func matches(doc answer, status int, body string) bool {
	if status != doc.status {
		return false
	}
	var got map[string]any
	if json.Unmarshal([]byte(body), &got) != nil {
		return false
	}
	for key, val := range topLevelFields(doc.body) {
		v, ok := got[key]
		if !ok {
			return false
		}
		if slices.Contains([]string{"error", "state", "status", "kind"}, key) {
			if s, _ := v.(string); `"`+s+`"` != val {
				return false
			}
		}
	}
	return true
}

// topLevelFields reads the fields of a documented answer's outermost
// object ("name": value, as written), skipping nested objects and the
// "..." that stand for the rest.
func topLevelFields(doc string) map[string]string {
	out := map[string]string{}
	field := regexp.MustCompile(`^"([a-z_]+)":\s*("[^"]*"|[^,}\]]*)`)
	depth := 0
	for i := 0; i < len(doc); i++ {
		switch doc[i] {
		case '{', '[':
			depth++
		case '}', ']':
			depth--
		case '"':
			if depth == 1 {
				if m := field.FindStringSubmatch(doc[i:]); m != nil {
					out[m[1]] = m[2]
					i += len(m[1]) + 2 // past the name; the value is read as the loop goes on
					continue
				}
			}
			if j := strings.IndexByte(doc[i+1:], '"'); j >= 0 { // past a string
				i += j + 1
			}
		}
	}
	return out
}
