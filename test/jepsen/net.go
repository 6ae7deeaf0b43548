package jepsen

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
)

// Names of everything a run creates. Link names are at most 15 bytes.
const (
	nsPrefix    = "rjepsen-" // rjepsen-<pid>-<R>-n<i>
	bridgeFmt   = "rjb%d"    // the bridge in the root namespace
	vethHostFmt = "rjv%dn%d" // the root side of node i's veth pair
	vethNodeFmt = "rjp%dn%d" // the namespace side
	aliasPrefix = "rangealloc-jepsen pid="
	tempPrefix  = "rangealloc-jepsen-tmp-" // data dirs and the built binary: <prefix><pid>-*
	subnetFmt   = "10.77.%d.%d"
	hostOctet   = 254 // the clients' address on the bridge
)

// ErrNoNetns means this machine cannot run the suite: not root, or ip or
// iptables missing, or namespaces refused.
var ErrNoNetns = errors.New("network namespaces unavailable")

// Lab is the network of one run: a bridge in the root namespace and one
// namespace per node, each joined to the bridge by a veth pair. The
// cluster's nodes come first; AddNode appends the others.
type Lab struct {
	Octet  int      // R in 10.77.R.0/24
	Bridge string   // bridge name
	HostIP string   // the clients' address, 10.77.R.254
	NS     []string // namespace of node i
	IPs    []string // address of node i, 10.77.R.(i+1)
}

// Preflight reports ErrNoNetns, with the reason, when the suite cannot run.
func Preflight() error {
	if os.Geteuid() != 0 {
		return fmt.Errorf("%w: the suite needs root (network namespaces, iptables)", ErrNoNetns)
	}
	for _, tool := range []string{"ip", "iptables", "nsenter"} {
		if _, err := exec.LookPath(tool); err != nil {
			return fmt.Errorf("%w: %s not found (apt-get install iproute2 iptables util-linux)", ErrNoNetns, tool)
		}
	}
	return nil
}

// run runs a command and returns its combined output in the error.
func run(name string, args ...string) error {
	out, err := exec.Command(name, args...).CombinedOutput()
	if err != nil {
		return fmt.Errorf("%s %s: %v: %s", name, strings.Join(args, " "), err, bytes.TrimSpace(out))
	}
	return nil
}

// netnsPath is the file that names network namespace ns (ip netns add
// makes it).
func netnsPath(ns string) string { return "/run/netns/" + ns }

// inNS runs a command inside namespace ns.
func inNS(ns string, args ...string) error {
	return run("ip", append([]string{"netns", "exec", ns}, args...)...)
}

// NewLab claims a free octet, starting at one derived from hint, and
// builds the network for n nodes. On error it removes what it built.
func NewLab(n int, hint uint64) (*Lab, error) {
	if err := Preflight(); err != nil {
		return nil, err
	}
	pid := os.Getpid()
	start := int((hint + uint64(pid)*7919) % 250)
	var l *Lab
	var lastErr error
	for k := 0; k < 250 && l == nil; k++ {
		octet := 1 + (start+k)%250
		if subnetInUse(octet) {
			continue
		}
		bridge := fmt.Sprintf(bridgeFmt, octet)
		// Creating the bridge claims the octet: a concurrent run that
		// picked it too fails here and moves on.
		if err := run("ip", "link", "add", bridge, "type", "bridge"); err != nil {
			lastErr = err
			continue
		}
		l = &Lab{Octet: octet, Bridge: bridge, HostIP: fmt.Sprintf(subnetFmt, octet, hostOctet)}
	}
	if l == nil {
		return nil, fmt.Errorf("%w: no free 10.77.R.0/24: %v", ErrNoNetns, lastErr)
	}
	if err := l.build(n, pid); err != nil {
		l.Close()
		return nil, err
	}
	return l, nil
}

// subnetInUse reports whether the root namespace has an address in
// 10.77.octet.0/24 already.
func subnetInUse(octet int) bool {
	out, err := exec.Command("ip", "-o", "addr", "show", "to", fmt.Sprintf("10.77.%d.0/24", octet)).Output()
	return err != nil || len(bytes.TrimSpace(out)) > 0
}

func (l *Lab) build(n, pid int) error {
	alias := aliasPrefix + strconv.Itoa(pid)
	steps := [][]string{
		{"ip", "link", "set", l.Bridge, "alias", alias},
		{"ip", "addr", "add", l.HostIP + "/24", "dev", l.Bridge},
		{"ip", "link", "set", l.Bridge, "up"},
	}
	for _, s := range steps {
		if err := run(s[0], s[1:]...); err != nil {
			return err
		}
	}
	for i := 0; i < n; i++ {
		if err := l.addNS(i, pid); err != nil {
			return err
		}
	}
	return nil
}

// AddNode adds one more namespace on the bridge, for a node that is not
// one of the cluster's (the fourth node of mistaken-join), and returns its
// index in NS and IPs. Close removes it with the others.
func (l *Lab) AddNode() (int, error) {
	i := len(l.NS)
	return i, l.addNS(i, os.Getpid())
}

// addNS creates node i's namespace, its veth pair and its address.
func (l *Lab) addNS(i, pid int) error {
	alias := aliasPrefix + strconv.Itoa(pid)
	ns := fmt.Sprintf("%s%d-%d-n%d", nsPrefix, pid, l.Octet, i+1)
	ip := fmt.Sprintf(subnetFmt, l.Octet, i+1)
	host, peer := fmt.Sprintf(vethHostFmt, l.Octet, i+1), fmt.Sprintf(vethNodeFmt, l.Octet, i+1)
	if err := run("ip", "netns", "add", ns); err != nil {
		return fmt.Errorf("%w: %v", ErrNoNetns, err)
	}
	l.NS = append(l.NS, ns)
	l.IPs = append(l.IPs, ip)
	steps := [][]string{
		{"ip", "link", "add", host, "type", "veth", "peer", "name", peer},
		{"ip", "link", "set", host, "alias", alias},
		{"ip", "link", "set", peer, "netns", ns},
		{"ip", "link", "set", host, "master", l.Bridge, "up"},
		{"ip", "netns", "exec", ns, "ip", "addr", "add", ip + "/24", "dev", peer},
		{"ip", "netns", "exec", ns, "ip", "link", "set", peer, "up"},
		{"ip", "netns", "exec", ns, "ip", "link", "set", "lo", "up"},
	}
	for _, s := range steps {
		if err := run(s[0], s[1:]...); err != nil {
			return err
		}
	}
	return nil
}

// Close kills any process left in the namespaces and deletes them, the
// veth pairs and the bridge. It is safe to call more than once.
func (l *Lab) Close() error {
	var errs []error
	for i, ns := range l.NS {
		killNS(ns)
		if err := run("ip", "netns", "del", ns); err != nil && !strings.Contains(err.Error(), "No such file") {
			errs = append(errs, err)
		}
		// Deleting the namespace deletes the pair, but not at once.
		_ = run("ip", "link", "del", fmt.Sprintf(vethHostFmt, l.Octet, i+1))
	}
	l.NS = nil
	if l.Bridge != "" {
		if err := run("ip", "link", "del", l.Bridge); err != nil && !strings.Contains(err.Error(), "Cannot find") {
			errs = append(errs, err)
		}
		l.Bridge = ""
	}
	return errors.Join(errs...)
}

// killNS sends SIGKILL to every process in namespace ns (SIGCONT first,
// in case it was paused).
func killNS(ns string) {
	out, err := exec.Command("ip", "netns", "pids", ns).Output()
	if err != nil {
		return
	}
	for _, f := range strings.Fields(string(out)) {
		if pid, err := strconv.Atoi(f); err == nil && pid > 1 && pid != os.Getpid() {
			_ = syscall.Kill(pid, syscall.SIGCONT)
			_ = syscall.Kill(pid, syscall.SIGKILL)
		}
	}
}

// Direction selects which of a node's packets a rule drops.
type Direction int

// Directions.
const (
	Both     Direction = iota // to and from the peers
	Inbound                   // from the peers only
	Outbound                  // to the peers only
)

func (d Direction) String() string { return [...]string{"both", "inbound", "outbound"}[d] }

// Drop makes the packets between node i and the given peers (indexes into
// IPs) vanish: with Inbound those from the peers to i, with Outbound
// those from i to the peers, with Both all of them. Client traffic from
// the bridge is never dropped.
//
// Every rule sits in the receiver's INPUT chain, as loss in the path looks
// to TCP. A rule in the sender's OUTPUT chain would fail the transmission
// locally, and Linux then retries every 500 ms without backing off, which
// hides what a real partition does to a connection: retransmissions that
// back off exponentially, so that bytes sent during a long cut wait for
// the next one well after the heal.
func (l *Lab) Drop(i int, dir Direction, peers ...int) error {
	// drop has node to discard the packets that arrive from node from.
	drop := func(to, from int) error {
		return inNS(l.NS[to], "iptables", "-w", "-A", "INPUT", "-s", l.IPs[from], "-j", "DROP")
	}
	for _, p := range peers {
		if dir != Outbound {
			if err := drop(i, p); err != nil {
				return err
			}
		}
		if dir != Inbound {
			if err := drop(p, i); err != nil {
				return err
			}
		}
	}
	return nil
}

// Heal removes every DROP rule of every node (all are in INPUT chains).
func (l *Lab) Heal() error {
	var errs []error
	for _, ns := range l.NS {
		errs = append(errs, inNS(ns, "iptables", "-w", "-F", "INPUT"))
	}
	return errors.Join(errs...)
}

// Sweep removes what earlier runs left behind: namespaces, links and
// temporary directories named by this package whose test process is gone. Runs of live processes
// (other engineers' tests on the same machine) are left alone.
func Sweep() (removed []string) {
	if out, err := exec.Command("ip", "netns", "list").Output(); err == nil {
		for _, line := range strings.Split(string(out), "\n") {
			f := strings.Fields(line)
			if len(f) == 0 || !strings.HasPrefix(f[0], nsPrefix) {
				continue
			}
			ns := f[0]
			pid, _ := strconv.Atoi(strings.SplitN(strings.TrimPrefix(ns, nsPrefix), "-", 2)[0])
			if alive(pid) {
				continue
			}
			killNS(ns)
			if run("ip", "netns", "del", ns) == nil {
				removed = append(removed, "netns "+ns)
			}
		}
	}
	tmps, _ := filepath.Glob(filepath.Join(os.TempDir(), tempPrefix+"*"))
	for _, dir := range tmps {
		pid, _ := strconv.Atoi(strings.SplitN(strings.TrimPrefix(filepath.Base(dir), tempPrefix), "-", 2)[0])
		if !alive(pid) && os.RemoveAll(dir) == nil {
			removed = append(removed, "dir "+dir)
		}
	}
	links, _ := os.ReadDir("/sys/class/net")
	for _, e := range links {
		name := e.Name()
		if !strings.HasPrefix(name, "rjb") && !strings.HasPrefix(name, "rjv") {
			continue
		}
		alias, err := os.ReadFile("/sys/class/net/" + name + "/ifalias")
		if err != nil || !strings.HasPrefix(string(alias), aliasPrefix) {
			continue
		}
		pid, _ := strconv.Atoi(strings.TrimSpace(strings.TrimPrefix(string(alias), aliasPrefix)))
		if alive(pid) {
			continue
		}
		if run("ip", "link", "del", name) == nil {
			removed = append(removed, "link "+name)
		}
	}
	return removed
}

// alive reports whether process pid exists.
func alive(pid int) bool {
	if pid <= 0 {
		return false
	}
	err := syscall.Kill(pid, 0)
	return err == nil || errors.Is(err, syscall.EPERM)
}
