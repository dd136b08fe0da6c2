// Package crowd holds the end-to-end runs of a crowd against the real
// binaries: the chaos sales (every fault under load, on one Redis and on
// a Redis Cluster) and the waiting rooms. They are the harness's longest
// tests, in a package of their own so that go test runs them beside the
// harness's other tests instead of after them.
package crowd
