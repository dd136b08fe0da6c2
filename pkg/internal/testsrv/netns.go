package testsrv

// Network namespaces: a host of its own on this machine, with its own
// address, joined to the test's namespace by a veth pair, so a test can cut
// a server off the network the way a partition does (packets dropped both
// ways, connections left open, nobody told) and heal it. Linux only, and
// root only: tests skip where they cannot make one, and say why.

import (
	"fmt"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync/atomic"
)

// Netns is a network namespace holding one host: IP is its address,
// reached from the test's namespace through a veth pair (Gateway on this
// side).
type Netns struct {
	Name    string
	IP      string
	Gateway string
	ipPath  string
	outside string // the veth's end in the test's namespace
	inside  string
}

var netnsSeq atomic.Int32

// NetnsUnavailable says why this process cannot make network namespaces
// and cut them (not root, no ip or iptables), or is "" when it can.
func NetnsUnavailable() string {
	if os.Geteuid() != 0 {
		return "network namespaces need root (CI runs as root)"
	}
	for _, bin := range []string{"ip", "iptables"} {
		if _, err := LookPath(bin); err != nil {
			return bin + " not found; install it with: apt-get install -y iproute2 iptables"
		}
	}
	return ""
}

// NewNetns makes a network namespace with one host. Close removes it.
func NewNetns(name string) (*Netns, error) {
	if why := NetnsUnavailable(); why != "" {
		return nil, fmt.Errorf("netns: %s", why)
	}
	ipPath, _ := LookPath("ip")
	// Names and subnets unique on the machine: test processes run side by side.
	seq := int(netnsSeq.Add(1))
	id := os.Getpid()%4000*16 + seq%16
	n := &Netns{
		Name: fmt.Sprintf("fs%d-%s", id, name), ipPath: ipPath,
		outside: fmt.Sprintf("fso%d", id), inside: fmt.Sprintf("fsi%d", id),
	}
	// A /30 per pair inside the /24: .4k+1 this side, .4k+2 the host.
	base := seq % 16 * 4
	n.Gateway = fmt.Sprintf("10.%d.%d.%d", 100+id/4096, id/16%256, base+1)
	n.IP = fmt.Sprintf("10.%d.%d.%d", 100+id/4096, id/16%256, base+2)
	// One left by a process that died with the same id is removed first.
	_ = n.Close()
	steps := [][]string{
		{"netns", "add", n.Name},
		{"link", "add", n.outside, "type", "veth", "peer", "name", n.inside},
		{"link", "set", n.inside, "netns", n.Name},
		{"addr", "add", n.Gateway + "/30", "dev", n.outside},
		{"link", "set", n.outside, "up"},
		{"netns", "exec", n.Name, ipPath, "addr", "add", n.IP + "/30", "dev", n.inside},
		{"netns", "exec", n.Name, ipPath, "link", "set", n.inside, "up"},
		{"netns", "exec", n.Name, ipPath, "link", "set", "lo", "up"},
	}
	for _, args := range steps {
		if err := n.ip(args...); err != nil {
			_ = n.Close()
			return nil, err
		}
	}
	return n, nil
}

func (n *Netns) ip(args ...string) error {
	if out, err := exec.Command(n.ipPath, args...).CombinedOutput(); err != nil {
		return fmt.Errorf("ip %s: %v: %s", strings.Join(args, " "), err, out)
	}
	return nil
}

// wrap is the arguments of ip that run bin with args inside n (ip execs
// it: the process keeps its pid).
func (n *Netns) wrap(bin string, args []string) []string {
	return append([]string{"netns", "exec", n.Name, bin}, args...)
}

// Command is the program and arguments that run bin with args inside n.
func (n *Netns) Command(bin string, args ...string) (string, []string) {
	return n.ipPath, n.wrap(bin, args)
}

// CutExceptPort is Cut but for TCP connections to port inside (a server
// the test still talks to on the cut-off side).
func (n *Netns) CutExceptPort(port int) error {
	p := strconv.Itoa(port)
	for _, r := range [][]string{
		{"-A", "INPUT", "-i", n.inside, "-p", "tcp", "--dport", p, "-j", "ACCEPT"},
		{"-A", "OUTPUT", "-o", n.inside, "-p", "tcp", "--sport", p, "-j", "ACCEPT"},
	} {
		if err := n.ip(append([]string{"netns", "exec", n.Name, "iptables"}, r...)...); err != nil {
			return err
		}
	}
	return n.Cut()
}

// Cut drops every packet between the host and the rest, both ways, as a
// partition does: connections stay open and nobody is told.
func (n *Netns) Cut() error {
	for _, chain := range [][]string{{"INPUT", "-i"}, {"OUTPUT", "-o"}} {
		if err := n.ip("netns", "exec", n.Name, "iptables", "-A", chain[0], chain[1], n.inside, "-j", "DROP"); err != nil {
			return err
		}
	}
	return nil
}

// CutAnswers drops every packet leaving the host and lets those coming in
// through: a request sent to a server inside is received and done, and its
// answer never arrives (a COMMIT committed whose client never hears).
func (n *Netns) CutAnswers() error {
	return n.ip("netns", "exec", n.Name, "iptables", "-A", "OUTPUT", "-o", n.inside, "-j", "DROP")
}

// MySQLCommit is the bytes of a MySQL client's COMMIT: a packet of
// length 7, sequence 0, COM_QUERY, "COMMIT" (not a "READ COMMITTED"
// inside another statement).
var MySQLCommit = append([]byte{7, 0, 0, 0, 3}, "COMMIT"...)

// CutAnswersAfter lets packets through until one coming in holds request
// (e.g. MySQLCommit) on a connection that carried the text onConnectionOf
// before ("": any connection), then drops every packet leaving for its
// sender: that request is received and done, and neither its answer nor
// any later one arrives. Seen reports whether it has come.
func (n *Netns) CutAnswersAfter(request []byte, onConnectionOf string) error {
	hex := fmt.Sprintf("|%x|", request)
	trigger := []string{"-A", "INPUT", "-i", n.inside, "-p", "tcp", "-m", "string", "--hex-string", hex, "--algo", "bm"}
	var rules [][]string
	if onConnectionOf != "" {
		rules = append(rules, []string{"-A", "INPUT", "-i", n.inside, "-p", "tcp", "-m", "string", "--string", onConnectionOf, "--algo", "bm",
			"-j", "CONNMARK", "--set-mark", "1"})
		trigger = append(trigger, "-m", "connmark", "--mark", "1")
	}
	// The drop first: a trigger in place before it would let the answer
	// of the request that set it through.
	rules = append([][]string{{"-A", "OUTPUT", "-o", n.inside, "-m", "recent", "--rcheck", "--rdest", "--name", "cut", "-j", "DROP"}},
		append(rules, append(trigger, "-m", "recent", "--set", "--name", "cut"))...)
	for _, r := range rules {
		if err := n.ip(append([]string{"netns", "exec", n.Name, "iptables"}, r...)...); err != nil {
			return err
		}
	}
	// The marks live in conntrack, which the namespace runs only while a
	// rule needs it: a connection older than the rules (a pool's, from
	// before an earlier cut and its Heal) is picked up mid-stream, and a
	// packet conntrack finds out of the window it last saw would be
	// classed invalid and carry no mark. Liberal tracking classes no
	// in-window doubt invalid. (Suspected, not shown, of a cut that never
	// saw its COMMIT; Rules shows the counters when one waits in vain.)
	// The sysctl exists once the rules above have started conntrack.
	_ = n.ip("netns", "exec", n.Name, "sh", "-c", "echo 1 > /proc/sys/net/netfilter/nf_conntrack_tcp_be_liberal")
	return nil
}

// Seen reports whether CutAnswersAfter's text has come in (and the cut
// begun).
func (n *Netns) Seen() (bool, error) {
	out, err := exec.Command(n.ipPath, "netns", "exec", n.Name, "cat", "/proc/net/xt_recent/cut").CombinedOutput()
	if err != nil {
		return false, nil // no list: no CutAnswersAfter yet
	}
	return strings.TrimSpace(string(out)) != "", nil
}

// Rules lists the rules n's faults put in place with their packet
// counters (iptables -L -v), for a test that waited on one in vain.
func (n *Netns) Rules() string {
	out, err := exec.Command(n.ipPath, "netns", "exec", n.Name, "iptables", "-L", "-v", "-n", "-x").CombinedOutput()
	if err != nil {
		return fmt.Sprintf("iptables -L: %v: %s", err, out)
	}
	return string(out)
}

// Heal lets packets through again.
func (n *Netns) Heal() error {
	for _, chain := range []string{"INPUT", "OUTPUT"} {
		if err := n.ip("netns", "exec", n.Name, "iptables", "-F", chain); err != nil {
			return err
		}
	}
	return nil
}

// Close removes the namespace and its veth pair (processes still in it
// keep running: stop them first).
func (n *Netns) Close() error {
	_ = n.ip("link", "del", n.outside)
	return n.ip("netns", "del", n.Name)
}
