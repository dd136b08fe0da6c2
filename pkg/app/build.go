package app

import (
	"cmp"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"runtime/debug"
	"slices"
	"text/tabwriter"
	"text/template"

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

// PrintHelp writes the binary's commands, by task, and how to list its
// variables (PrintConfig). It needs no secret and reads no variable.
func PrintHelp[C Config](w io.Writer, commands []Command[C]) {
	bin := filepath.Base(os.Args[0])
	fmt.Fprintf(w, "%s\n\nUsage: %s [COMMAND]; without one it runs the role.\n", ReadBuild(), bin)
	var tasks []string
	for _, c := range commands {
		if !slices.Contains(tasks, c.Task) {
			tasks = append(tasks, c.Task)
		}
	}
	ctw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	for _, task := range tasks {
		fmt.Fprintf(ctw, "\n%s:\n", cmp.Or(task, "Commands"))
		for _, c := range commands {
			if c.Task == task {
				listCommand(ctw, c.Name, c)
			}
		}
	}
	fmt.Fprintf(ctw, "\nThis text and the build:\n  help\tthis text\n  help config\tevery FLASHSALE_* variable it reads, with its default\n  version\tthe build's version and commit\n")
	ctw.Flush()
	fmt.Fprintf(w, "\n%s COMMAND -h shows a command's usage and flags. Exit status of a command: 0 done, 2 failed or misused (and 1 where a command says what it means); the role itself exits 1 on a failure, with one JSON log line. All configuration comes from FLASHSALE_* variables: %s help config lists them.\n", bin, bin)
}

// PrintConfig writes every variable the binary reads, with its default
// and the first clause of its meaning (docs/CONFIGURATION.md's). It needs
// no secret and reads no variable.
func PrintConfig[C Config](w io.Writer, cfg C) {
	fmt.Fprintf(w, "Configuration, all from the environment (docs/CONFIGURATION.md describes each):\n\n")
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "VARIABLE\tDEFAULT\tMEANING")
	tmpl := `{{range .}}{{.Key}}	{{with .Tags.Get "default"}}{{.}}{{else}}-{{end}}	{{meaning .Key}}
{{end}}`
	funcs := template.FuncMap{"meaning": func(v string) string { return variableMeanings[v] }}
	if err := envconfig.Usaget("", cfg, tw, template.Must(template.New("help").Funcs(funcs).Parse(tmpl))); err != nil {
		fmt.Fprintln(tw, "(cannot list the variables:", err, ")")
	}
	tw.Flush()
}

// listCommand writes c (named path) and, under it, its subcommands.
func listCommand[C any](w io.Writer, path string, c Command[C]) {
	if c.Run != nil {
		fmt.Fprintf(w, "  %s %s\t%s\n", path, c.Args, c.Summary)
	}
	for _, s := range c.Sub {
		listCommand(w, path+" "+s.Name, s)
	}
}
