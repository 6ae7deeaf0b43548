package main

import (
	"errors"
	"fmt"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/rangealloc/rangealloc/node"
	"github.com/spf13/cobra"
)

func newRecoverCmd(g *globals) *cobra.Command {
	var dataDir, members, logLevel string
	var dryRun bool
	cmd := &cobra.Command{
		Use:   "recover",
		Short: "Last resort after losing a quorum for good: make a stopped node the first voter of a new configuration",
		Long: `Rewrite the Raft configuration of a stopped node so that the members given
are the cluster's voters, keeping every entry the node holds. Use it only when
a majority of the voters is lost for good (two of three): a cluster that lost
a minority, or whose lost nodes can come back, needs no recover.

Run it on one survivor, with the node stopped, naming that node (and its Raft
address) alone; start it again with its usual flags, and it leads a cluster of
one voter. Then add new nodes with --join: each joins as a non-voter and becomes
a voter once it has caught up.

The risk: a lost node that comes back with its old data still holds the old
configuration. Two of them are a quorum of it: they would elect a leader and
hand out values this cluster hands out too. Empty the data directory of every
lost node before it runs again. Entries this node held that the cluster had
not committed are kept too, as committed (they cannot be told apart any more).

See docs/OPERATIONS.md, "Losing two of three nodes".`,
		Example: `  rangealloc snapshot save survivor.snap --consistency stale --addr http://10.0.0.1:7080
  systemctl stop rangealloc
  rangealloc recover --data-dir /var/lib/rangealloc --members n1=10.0.0.1:7081=10.0.0.1:7080
  systemctl start rangealloc`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if dataDir == "" {
				return errors.New("--data-dir is required: the stopped node's data directory")
			}
			peers, err := parseMembers(members)
			if err != nil {
				return err
			}
			level := hclog.LevelFromString(logLevel)
			if level == hclog.NoLevel {
				return fmt.Errorf("--log-level %q: want trace, debug, info, warn or error", logLevel)
			}
			logger := hclog.New(&hclog.LoggerOptions{Name: "rangealloc", Level: level, Output: cmd.ErrOrStderr()})
			res, err := node.Recover(node.RecoverConfig{DataDir: dataDir, Members: peers, DryRun: dryRun, Logger: logger})
			if err != nil {
				return err
			}
			return g.print(cmd.OutOrStdout(), recoverJSON(dataDir, res), func(tw *tabwriter.Writer) { recoverTable(tw, dataDir, res) })
		},
	}
	fl := cmd.Flags()
	fl.StringVar(&dataDir, "data-dir", "", "the stopped node's data directory")
	fl.StringVar(&members, "members", "", "the voters of the new configuration, id=raftAddr=httpAddr,… (this node among them; usually it alone)")
	fl.BoolVar(&dryRun, "dry-run", false, "check, and show the old configuration, the new one and the last entry kept; change nothing")
	fl.StringVar(&logLevel, "log-level", "warn", "trace, debug, info, warn or error")
	return cmd
}

// parseMembers parses --members, in --peers' form.
func parseMembers(s string) ([]node.Peer, error) {
	peers, err := parsePeers(s)
	if err != nil {
		return nil, fmt.Errorf("--members: %w", err)
	}
	if len(peers) == 0 {
		return nil, errors.New("--members is required: the voters of the new configuration, id=raftAddr=httpAddr,… with this node among them")
	}
	return peers, nil
}

// recoverOut is recover's answer with -o json.
type recoverOut struct {
	DataDir   string              `json:"dataDir"`
	ID        string              `json:"id"`
	DryRun    bool                `json:"dryRun"`
	Old       []node.ConfigServer `json:"oldConfiguration"`
	New       []node.ConfigServer `json:"newConfiguration"`
	LastIndex uint64              `json:"lastIndex"`
	LastTerm  uint64              `json:"lastTerm"`
	Dropped   []string            `json:"dropped"`
	Warnings  []string            `json:"warnings"`
	Took      string              `json:"took"`
}

func recoverJSON(dir string, r node.RecoverResult) recoverOut {
	return recoverOut{DataDir: dir, ID: r.ID, DryRun: r.DryRun, Old: r.Old, New: r.New, LastIndex: r.LastIndex, LastTerm: r.LastTerm,
		Dropped: r.Dropped, Warnings: r.Warnings, Took: r.Took.Round(time.Millisecond).String()}
}

func recoverTable(tw *tabwriter.Writer, dir string, r node.RecoverResult) {
	verb := "recovered"
	if r.DryRun {
		verb = "dry run, nothing changed: would recover"
	}
	fmt.Fprintf(tw, "%s node %s in %s (%s)\n\n", verb, r.ID, dir, r.Took.Round(time.Millisecond))
	for _, c := range []struct {
		name    string
		servers []node.ConfigServer
	}{{"old configuration", r.Old}, {"new configuration", r.New}} {
		fmt.Fprintf(tw, "%s:\n", c.name)
		fmt.Fprintln(tw, "  ID\tRAFT\tVOTER")
		for _, s := range c.servers {
			fmt.Fprintf(tw, "  %s\t%s\t%t\n", s.ID, s.RaftAddr, s.Voter)
		}
	}
	fmt.Fprintf(tw, "\nlast entry kept: index %d, term %d\n", r.LastIndex, r.LastTerm)
	for _, w := range r.Warnings {
		fmt.Fprintf(tw, "warning: %s\n", w)
	}
	if len(r.Dropped) > 0 {
		fmt.Fprintf(tw, "left out: %s. Empty their data directories before they run again, and add them back with --join:\n"+
			"two of them started with their old data would form a quorum of the old configuration and hand out values again.\n",
			strings.Join(r.Dropped, ", "))
	}
	if !r.DryRun {
		fmt.Fprintf(tw, "next: start node %s with its usual flags; it leads a cluster of %d voter(s).\n", r.ID, len(r.New))
	}
}
