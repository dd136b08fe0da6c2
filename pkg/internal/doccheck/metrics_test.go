package doccheck

import (
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/stretchr/testify/require"

	"github.com/flashsale/flashsale/pkg/app"
	"github.com/flashsale/flashsale/pkg/gateway"
	"github.com/flashsale/flashsale/pkg/reaper"
	"github.com/flashsale/flashsale/pkg/worker"
)

// recorder is a Registerer that keeps the names of what is registered.
type recorder struct {
	prometheus.Registerer
	names *[]string
}

// newRecorder records into names, over a registry of its own (each role
// registers into its own process's registry).
func newRecorder(names *[]string) *recorder {
	return &recorder{Registerer: prometheus.NewRegistry(), names: names}
}

var fqName = regexp.MustCompile(`fqName: "([a-z_]+)"`)

func (r *recorder) Register(c prometheus.Collector) error {
	ch := make(chan *prometheus.Desc, 64)
	go func() { c.Describe(ch); close(ch) }()
	for d := range ch {
		if m := fqName.FindStringSubmatch(d.String()); m != nil {
			*r.names = append(*r.names, m[1])
		}
	}
	return r.Registerer.Register(c)
}

func (r *recorder) MustRegister(cs ...prometheus.Collector) {
	for _, c := range cs {
		if err := r.Register(c); err != nil {
			panic(err)
		}
	}
}

// read returns a document of docs/.
func read(t *testing.T, name string) string {
	t.Helper()
	b, err := os.ReadFile(filepath.Join("..", "..", "..", "docs", name))
	require.NoError(t, err)
	return string(b)
}

// expand writes out a name with one {a,b,c} group: the names it stands for.
func expand(name string) []string {
	open, closing := strings.Index(name, "{"), strings.Index(name, "}")
	if open < 0 || closing < open {
		return []string{name}
	}
	var out []string
	for _, alt := range strings.Split(name[open+1:closing], ",") {
		out = append(out, name[:open]+alt+name[closing+1:])
	}
	return out
}

// The metrics table of docs/OPERATIONS.md names exactly the flashsale_*
// metrics the three roles register (Go's and the process's own aside).
func TestTheMetricsTableIsTheRegisteredMetrics(t *testing.T) {
	var names []string
	newRecorder(&names).MustRegister(app.ReadBuild().Collector())
	gw, err := gateway.New(gateway.Config{AdminToken: strings.Repeat("a", 32), JWTSecret: strings.Repeat("s", 32)}, nil, nil, nil,
		gateway.WithRegistry(newRecorder(&names)))
	require.NoError(t, err)
	defer gw.Close()
	_, err = worker.New(worker.Config{Consumer: "w"}, nil, nil, nil, worker.WithRegistry(newRecorder(&names)))
	require.NoError(t, err)
	_, err = reaper.New(reaper.Config{Config: worker.Config{Consumer: "r"}, Interval: time.Second}, nil, nil, nil,
		reaper.WithRegistry(newRecorder(&names)))
	require.NoError(t, err)
	var registered []string
	for _, n := range names {
		if strings.HasPrefix(n, "flashsale_") && !slices.Contains(registered, n) {
			registered = append(registered, n)
		}
	}
	require.NotEmpty(t, registered)

	var documented []string
	name := regexp.MustCompile("`(flashsale_[a-z_{},]+)`")
	_, table, _ := strings.Cut(read(t, "OPERATIONS.md"), "| metric | from | labels |")
	for _, row := range strings.Split(table, "\n")[2:] {
		if !strings.HasPrefix(row, "|") {
			break
		}
		first := strings.Split(row, "|")[1]
		for _, m := range name.FindAllStringSubmatch(first, -1) {
			documented = append(documented, expand(m[1])...)
		}
	}
	slices.Sort(registered)
	slices.Sort(documented)
	for _, n := range registered {
		if !slices.Contains(documented, n) {
			t.Errorf("%s is registered; docs/OPERATIONS.md's metrics table does not name it", n)
		}
	}
	for _, n := range documented {
		if !slices.Contains(registered, n) {
			t.Errorf("docs/OPERATIONS.md's metrics table names %s, which no role registers", n)
		}
	}
}
