package main

import (
	"crypto/x509"
	"encoding/pem"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"text/tabwriter"
	"time"
	"unicode"

	"github.com/rangealloc/rangealloc/certs"
	"github.com/rangealloc/rangealloc/internal/durable"
	"github.com/spf13/cobra"
)

const (
	caValidityYears = 10
	defaultNodeDays = 825 // the longest validity clients such as browsers accept
	maxNodeDays     = 36500
)

type certsInitFlags struct {
	dir   string
	nodes []string
	days  int
	force bool
}

func newCertsCmd(g *globals) *cobra.Command {
	cmd := &cobra.Command{
		Use:     "certs",
		Short:   "Make the CA and node certificates for TLS, for installs without a PKI",
		Example: `  rangealloc certs init --dir tls --node n1=10.0.0.1 --node n2=10.0.0.2 --node n3=10.0.0.3`,
		Args:    cobra.NoArgs,
	}
	cmd.AddCommand(newCertsInitCmd(g))
	return cmd
}

func newCertsInitCmd(g *globals) *cobra.Command {
	f := &certsInitFlags{}
	cmd := &cobra.Command{
		Use:   "init --node ID=HOST[,HOST...] [--node ...]",
		Short: "Write a CA, and a certificate and key for each node",
		Long: `Write a CA (ca.crt, and ca.key readable by the owner only) and, for each
--node, ID.crt and ID.key into --dir. A node certificate's Common Name is
the node's ID, its subject alternative names are the HOSTs (IP addresses and
DNS names the node is dialed at: include 127.0.0.1 or localhost if local
clients use those), and it serves both as the node's server certificate and
as its client certificate towards other nodes.

If --dir already holds ca.crt and ca.key, that CA is used, so nodes can be
added later; the CA files are never overwritten. An existing ID.crt or
ID.key is replaced only with --force (to renew a certificate, or change its
hosts). Every file is written to a temporary file and renamed into place.

The CA is valid for 10 years, node certificates for --days. Keep ca.key
away from the nodes: whoever holds it can make certificates they all accept.`,
		Example: `  # a CA and three nodes
  rangealloc certs init --dir /etc/rangealloc/tls \
    --node n1=10.0.0.1,node1.example --node n2=10.0.0.2,node2.example --node n3=10.0.0.3,node3.example

  # later, a fourth node from the same CA
  rangealloc certs init --dir /etc/rangealloc/tls --node n4=10.0.0.4,node4.example

  # renew n1's certificate
  rangealloc certs init --dir /etc/rangealloc/tls --node n1=10.0.0.1,node1.example --force`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error { return runCertsInit(cmd.OutOrStdout(), g, f) },
	}
	fl := cmd.Flags()
	fl.StringVar(&f.dir, "dir", "./tls", "directory to write the files into (created if missing)")
	fl.StringArrayVar(&f.nodes, "node", nil, "a node as ID=HOST[,HOST...], such as n1=10.0.0.1,node1.example (repeat for each node)")
	fl.IntVar(&f.days, "days", defaultNodeDays, "days the node certificates are valid (at most until the CA expires)")
	fl.BoolVar(&f.force, "force", false, "replace existing node certificates and keys (never the CA)")
	return cmd
}

// nodeSpec is one --node: the node's ID and the hosts its certificate names.
type nodeSpec struct {
	id    string
	hosts []string
}

// parseNodeFlag parses ID=HOST[,HOST...].
func parseNodeFlag(v string) (nodeSpec, error) {
	id, list, ok := strings.Cut(v, "=")
	if !ok {
		return nodeSpec{}, fmt.Errorf("--node %q: want ID=HOST[,HOST...], such as n1=10.0.0.1,node1.example", v)
	}
	if err := checkNodeID(id); err != nil {
		return nodeSpec{}, fmt.Errorf("--node %q: %v", v, err)
	}
	if strings.TrimSpace(list) == "" {
		return nodeSpec{}, fmt.Errorf("--node %q: no hosts after '=': name the IP addresses and DNS names node %s is dialed at", v, id)
	}
	var hosts []string
	for _, h := range strings.Split(list, ",") {
		if h = strings.TrimSpace(h); h == "" {
			return nodeSpec{}, fmt.Errorf("--node %q: an empty host in the list", v)
		}
		hosts = append(hosts, h)
	}
	if _, _, err := certs.SplitHosts(hosts); err != nil {
		return nodeSpec{}, fmt.Errorf("--node %q: %v", v, err)
	}
	return nodeSpec{id: id, hosts: hosts}, nil
}

// checkNodeID checks a node ID, which names the node's files in --dir and
// is its certificate's Common Name.
func checkNodeID(id string) error {
	switch {
	case id == "":
		return errors.New("empty ID before '='")
	case len(id) > 64:
		return fmt.Errorf("ID %q is longer than 64 bytes, the most a certificate's Common Name holds", id)
	case strings.EqualFold(id, "ca"):
		return fmt.Errorf("ID %q would overwrite the CA's files", id)
	case id[0] == '.' || id[0] == '-':
		return fmt.Errorf("ID %q starts with %q", id, id[0])
	}
	for _, r := range id {
		switch {
		case r == '/' || r == '\\':
			return fmt.Errorf("ID %q contains %q; it names the node's files in --dir", id, r)
		case unicode.IsSpace(r):
			return fmt.Errorf("ID %q contains a space", id)
		case !(r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || r == '.' || r == '-' || r == '_'):
			return fmt.Errorf("ID %q contains %q; use letters, digits, '.', '-' and '_'", id, r)
		}
	}
	return nil
}

// certsReport is what certs init wrote.
type certsReport struct {
	Dir      string        `json:"dir"`
	CA       string        `json:"ca"`
	CAReused bool          `json:"ca_reused"`
	Files    []writtenFile `json:"files"`
	caNote   string
}

type writtenFile struct {
	Path  string    `json:"path"`
	Node  string    `json:"node,omitempty"` // "" for the CA's files
	Kind  string    `json:"kind"`           // "certificate" or "key"
	Mode  string    `json:"mode"`
	Hosts []string  `json:"hosts,omitempty"`
	Until time.Time `json:"not_after,omitzero"`
	note  string
}

// pending is a file to write.
type pending struct {
	writtenFile
	data []byte
	perm fs.FileMode
}

func runCertsInit(w io.Writer, g *globals, f *certsInitFlags) error {
	if f.dir == "" {
		return errors.New("--dir: empty; name the directory to write the files into")
	}
	if f.days <= 0 || f.days > maxNodeDays {
		return fmt.Errorf("--days %d: want 1 to %d", f.days, maxNodeDays)
	}
	nodes, err := parseNodeFlags(f.nodes)
	if err != nil {
		return err
	}
	caCrt, caKey := filepath.Join(f.dir, "ca.crt"), filepath.Join(f.dir, "ca.key")
	haveCA, err := checkCertFiles(f, caCrt, caKey, nodes)
	if err != nil {
		return err
	}
	rep := certsReport{Dir: f.dir, CA: caCrt, CAReused: haveCA}
	ca, todo, err := openCA(caCrt, caKey, haveCA, &rep)
	if err != nil {
		return err
	}
	for _, n := range nodes {
		certPEM, keyPEM, err := ca.Issue(n.id, n.hosts, time.Duration(f.days)*24*time.Hour)
		if err != nil {
			return fmt.Errorf("--node %s: %v", n.id, err)
		}
		until, err := notAfter(certPEM)
		if err != nil {
			return err
		}
		todo = append(todo,
			pending{writtenFile{Path: filepath.Join(f.dir, n.id+".key"), Node: n.id, Kind: "key", Mode: "0600",
				note: "key of " + n.id}, keyPEM, 0o600},
			pending{writtenFile{Path: filepath.Join(f.dir, n.id+".crt"), Node: n.id, Kind: "certificate", Mode: "0644",
				Hosts: n.hosts, Until: until, note: n.id + ": " + strings.Join(n.hosts, ", ")}, certPEM, 0o644})
	}

	if err := durable.MkdirAll(f.dir, 0o700); err != nil {
		return fmt.Errorf("--dir: %v", err)
	}
	for _, p := range todo {
		if err = writeFileAtomic(p.Path, p.data, p.perm); err != nil {
			break
		}
		rep.Files = append(rep.Files, p.writtenFile)
	}
	complete := err == nil
	if perr := g.print(w, rep, func(tw *tabwriter.Writer) { certsTable(tw, rep, nodes, complete) }); err == nil {
		err = perr
	}
	return err
}

// parseNodeFlags parses the --node values, refusing a node given twice.
func parseNodeFlags(values []string) ([]nodeSpec, error) {
	var nodes []nodeSpec
	seen := map[string]bool{}
	for _, v := range values {
		n, err := parseNodeFlag(v)
		if err != nil {
			return nil, err
		}
		if seen[strings.ToLower(n.id)] {
			return nil, fmt.Errorf("--node %q: node %s is given twice", v, n.id)
		}
		seen[strings.ToLower(n.id)] = true
		nodes = append(nodes, n)
	}
	return nodes, nil
}

// checkCertFiles looks at what --dir holds before anything is written:
// the CA's two files, both or neither, and no node's files unless
// --force. It reports whether the CA exists.
func checkCertFiles(f *certsInitFlags, caCrt, caKey string, nodes []nodeSpec) (haveCA bool, err error) {
	haveCrt, err := exists(caCrt)
	if err != nil {
		return false, err
	}
	haveKey, err := exists(caKey)
	if err != nil {
		return false, err
	}
	switch {
	case haveCrt != haveKey:
		have, lack := caCrt, caKey
		if haveKey {
			have, lack = caKey, caCrt
		}
		return false, fmt.Errorf("%s exists but %s does not: both are needed to issue certificates from that CA "+
			"(restore %s, or move %s away to make a new CA, which existing certificates will not chain to)", have, lack, lack, have)
	case haveCrt && len(nodes) == 0:
		return false, fmt.Errorf("--node: none given, and the CA in %s exists: nothing to write", f.dir)
	}
	for _, n := range nodes {
		for _, p := range []string{filepath.Join(f.dir, n.id+".crt"), filepath.Join(f.dir, n.id+".key")} {
			found, err := exists(p)
			if err != nil {
				return false, err
			}
			if found && !f.force {
				return false, fmt.Errorf("refusing to overwrite %s (node %s): it exists; give --force to replace it", p, n.id)
			}
		}
	}
	return haveCrt, nil
}

// openCA loads the CA of --dir when it exists, or makes a new one, whose
// two files are the first to write (todo). It notes the CA in rep.
func openCA(caCrt, caKey string, have bool, rep *certsReport) (*certs.CA, []pending, error) {
	if have {
		ca, err := certs.LoadCA(caCrt, caKey)
		if err != nil {
			return nil, nil, err
		}
		c := ca.Certificate()
		rep.caNote = fmt.Sprintf("%q, expires %s", c.Subject.CommonName, c.NotAfter.UTC().Format("2006-01-02"))
		return ca, nil, nil
	}
	now := time.Now()
	name := "rangealloc CA " + now.UTC().Format("2006-01-02T15:04:05Z")
	ca, err := certs.NewCA(name, now.AddDate(caValidityYears, 0, 0).Sub(now))
	if err != nil {
		return nil, nil, err
	}
	key, err := ca.KeyPEM()
	if err != nil {
		return nil, nil, err
	}
	return ca, []pending{
		{writtenFile{Path: caKey, Kind: "key", Mode: "0600", note: "CA key"}, key, 0o600},
		{writtenFile{Path: caCrt, Kind: "certificate", Mode: "0644", Until: ca.Certificate().NotAfter,
			note: fmt.Sprintf("CA %q", name)}, ca.CertPEM(), 0o644},
	}, nil
}

// certsTable prints one line per file written, then the flags that use them.
func certsTable(tw *tabwriter.Writer, rep certsReport, nodes []nodeSpec, complete bool) {
	if rep.CAReused {
		fmt.Fprintf(tw, "using the existing CA in %s (%s)\n", rep.CA, rep.caNote)
	}
	for _, f := range rep.Files {
		note := f.note
		if !f.Until.IsZero() {
			note += ", expires " + f.Until.UTC().Format("2006-01-02")
		}
		fmt.Fprintf(tw, "wrote %s\t%s\t%s\n", f.Path, f.Mode, note)
	}
	if !complete {
		return // the error follows
	}
	if len(nodes) == 0 {
		fmt.Fprintf(tw, "\nAdd nodes with: rangealloc certs init --dir %s --node ID=HOST[,HOST...]\n", rep.Dir)
		return
	}
	fmt.Fprintf(tw, "\nStart each node with its own files (copy them and %s to it; keep %s elsewhere):\n", rep.CA,
		filepath.Join(rep.Dir, "ca.key"))
	for _, n := range nodes {
		crt, key := filepath.Join(rep.Dir, n.id+".crt"), filepath.Join(rep.Dir, n.id+".key")
		fmt.Fprintf(tw, "  rangealloc server --id %s --tls-cert %s --tls-key %s --tls-ca %s\n", n.id, crt, key, rep.CA)
	}
	fmt.Fprintf(tw, "The same files serve the HTTPS API: --api-tls-cert %s --api-tls-key %s.\n",
		filepath.Join(rep.Dir, "ID.crt"), filepath.Join(rep.Dir, "ID.key"))
	fmt.Fprintf(tw, "Clients verify it with --cacert %s.\n", rep.CA)
}

// notAfter returns the expiry of the certificate in certPEM.
func notAfter(certPEM []byte) (time.Time, error) {
	b, _ := pem.Decode(certPEM)
	if b == nil {
		return time.Time{}, errors.New("issued certificate is not PEM")
	}
	c, err := x509.ParseCertificate(b.Bytes)
	if err != nil {
		return time.Time{}, err
	}
	return c.NotAfter, nil
}

// exists reports whether path exists; an error other than its absence
// (such as a directory that cannot be read) is returned.
func exists(path string) (bool, error) {
	_, err := os.Lstat(path)
	switch {
	case err == nil:
		return true, nil
	case errors.Is(err, fs.ErrNotExist):
		return false, nil
	default:
		return false, err
	}
}

// writeFileAtomic writes data to path with perm, durably and atomically
// (durable.WriteFile), so that a crash or a power cut leaves the old file
// or the new one and never half a key.
func writeFileAtomic(path string, data []byte, perm fs.FileMode) error {
	if err := durable.WriteFile(path, data, perm); err != nil {
		return fmt.Errorf("writing %s: %v", path, err)
	}
	return nil
}
