package app

import (
	"fmt"
	"io"
	"os"
	"path/filepath"
	"runtime/debug"
	"strings"
	"text/tabwriter"

	"github.com/kelseyhightower/envconfig"
	"github.com/prometheus/client_golang/prometheus"
)

// Version and Commit name the build; make and the image set them with
// -ldflags "-X github.com/flashsale/flashsale/pkg/app.Version=v1.2.3 -X
// .../app.Commit=<sha>". Empty: what Go recorded (module version, VCS
// revision), else "devel" and "unknown".
var Version, Commit string

// Build is what the binary knows of its own build.
type Build struct {
	Version, Commit, GoVersion string
	Modified                   bool // built from a work tree with uncommitted changes
}

// ReadBuild reads the build information Go embedded in the binary.
func ReadBuild() Build {
	b := Build{Version: Version, Commit: cmpOr(Commit, "unknown"), GoVersion: "unknown"}
	info, ok := debug.ReadBuildInfo()
	if !ok {
		return b
	}
	b.GoVersion = info.GoVersion
	if b.Version == "" && info.Main.Version != "" && info.Main.Version != "(devel)" {
		b.Version = info.Main.Version
	}
	for _, s := range info.Settings {
		switch s.Key {
		case "vcs.revision":
			if Commit == "" {
				b.Commit = s.Value
			}
		case "vcs.modified":
			b.Modified = s.Value == "true"
		}
	}
	if b.Version == "" {
		b.Version = "devel"
	}
	return b
}

func cmpOr(s, def string) string {
	if s == "" {
		return def
	}
	return s
}

func (b Build) String() string {
	commit := b.Commit
	if b.Modified {
		commit += " (modified)"
	}
	return fmt.Sprintf("flashsale %s commit %s %s", b.Version, commit, b.GoVersion)
}

// Collector is the flashsale_build_info gauge: 1, with the build as labels.
func (b Build) Collector() prometheus.Collector {
	g := prometheus.NewGauge(prometheus.GaugeOpts{
		Name: "flashsale_build_info", Help: "The running build: always 1, labelled with version, commit and Go version.",
		ConstLabels: prometheus.Labels{"version": b.Version, "commit": b.Commit, "goversion": b.GoVersion},
	})
	g.Set(1)
	return g
}

// PrintHelp writes the binary's commands and every variable it reads, with
// its default. It needs no secret and reads no variable.
func PrintHelp[C Config](w io.Writer, cfg C, commands []Command[C]) {
	bin := filepath.Base(os.Args[0])
	fmt.Fprintf(w, "%s\n\nUsage: %s [COMMAND]; without one it runs the role.\n\nCommands:\n", ReadBuild(), bin)
	ctw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintf(ctw, "  migrate\tapply the database migrations (idempotent; the chart's init containers run it)\n")
	fmt.Fprintf(ctw, "  help\tthis text\n")
	fmt.Fprintf(ctw, "  version\tthe build's version and commit\n")
	for _, c := range commands {
		fmt.Fprintf(ctw, "  %s %s\t%s\n", c.Name, strings.SplitN(c.Usage, "\n", 2)[0], c.Summary)
	}
	ctw.Flush()
	fmt.Fprintf(w, "\n%s COMMAND -h shows a command's flags. Exit status of a command: 0 done, 1 done and the answer is no (reconcile: the stores differ), 2 failed or misused; the role itself exits 1 on a failure, with one JSON log line.\n\nConfiguration, all from the environment:\n\n", bin)
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "VARIABLE\tTYPE\tDEFAULT\tREQUIRED")
	tmpl := `{{range .}}{{usage_key .}}	{{usage_type .}}	{{usage_default .}}	{{usage_required .}}
{{end}}`
	if err := envconfig.Usagef("", cfg, tw, tmpl); err != nil {
		fmt.Fprintln(tw, "(cannot list the variables:", err, ")")
	}
	tw.Flush()
}
