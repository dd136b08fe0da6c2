// Package doccheck holds the tests that keep the prose of docs/ true to
// the code: the tables of metrics, Redis keys, migrations and the
// reaper's services are read from the documents and compared with what
// the code registers, builds, embeds and runs. (The configuration table
// is checked against the binaries' own help, in pkg/internal/harness.)
package doccheck
