package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"strconv"
	"text/tabwriter"
	"time"

	"github.com/rangealloc/rangealloc/api"
	"github.com/rangealloc/rangealloc/api/client"
	"github.com/rangealloc/rangealloc/internal/durable"
	"github.com/rangealloc/rangealloc/internal/human"
	"github.com/spf13/cobra"
)

func ctxOf(cmd *cobra.Command) (context.Context, context.CancelFunc) {
	return context.WithTimeout(cmd.Context(), 60*time.Second)
}

// print writes v as JSON with -o json, else calls table.
func (g *globals) print(w io.Writer, v any, table func(tw *tabwriter.Writer)) error {
	if g.output == "json" {
		enc := json.NewEncoder(w)
		enc.SetIndent("", "  ")
		return enc.Encode(v)
	}
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	table(tw)
	return tw.Flush()
}

func poolTable(tw *tabwriter.Writer, pools ...api.Pool) {
	fmt.Fprintln(tw, "NAME\tKIND\tRANGE\tSIZE\tUSED\tFREE\tSTATIC (USED/SIZE)\tDYNAMIC (USED/SIZE)")
	for _, p := range pools {
		fmt.Fprintf(tw, "%s\t%s\t%s\t%d\t%d\t%d\t%d/%d\t%d/%d\n", p.Name, p.Kind, p.Range, p.Size, p.Used, p.Free,
			p.Static.Used, p.Static.Size, p.Dynamic.Used, p.Dynamic.Size)
	}
}

func allocTable(tw *tabwriter.Writer, allocs ...api.Allocation) {
	fmt.Fprintln(tw, "POOL\tVALUE\tOWNER\tBAND\tMODE\tREVISION")
	for _, a := range allocs {
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%d\n", a.Pool, a.Value, a.Owner, a.Band, a.Mode, a.Revision)
	}
}

func newPoolsCmd(g *globals) *cobra.Command {
	cmd := &cobra.Command{
		Use:   "pools",
		Short: "List, show, create and delete pools",
		Example: `  rangealloc pools
  rangealloc pools get nodeport
  rangealloc pools create clusterip-ipv6 fd00:10:96::/108
  rangealloc pools delete clusterip-ipv6`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			ctx, cancel := ctxOf(cmd)
			defer cancel()
			pools, err := g.client().Pools(ctx, client.Options{})
			if err != nil {
				return err
			}
			return g.print(cmd.OutOrStdout(), api.PoolList{Pools: pools}, func(tw *tabwriter.Writer) { poolTable(tw, pools...) })
		},
	}
	cmd.AddCommand(&cobra.Command{
		Use: "list", Short: "List pools", Args: cobra.NoArgs,
		RunE: func(c *cobra.Command, args []string) error { return cmd.RunE(c, args) },
	}, &cobra.Command{
		Use: "get NAME", Short: "Show a pool", Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			ctx, cancel := ctxOf(cmd)
			defer cancel()
			p, err := g.client().Pool(ctx, args[0], client.Options{})
			if err != nil {
				return err
			}
			return g.print(cmd.OutOrStdout(), p, func(tw *tabwriter.Writer) { poolTable(tw, p) })
		},
	}, &cobra.Command{
		Use: "create NAME RANGE", Short: "Create a pool from a CIDR or a port range first-last", Args: cobra.ExactArgs(2),
		RunE: func(cmd *cobra.Command, args []string) error {
			ctx, cancel := ctxOf(cmd)
			defer cancel()
			p, _, err := g.client().CreatePool(ctx, args[0], args[1], client.Options{})
			if err != nil {
				return err
			}
			return g.print(cmd.OutOrStdout(), p, func(tw *tabwriter.Writer) { poolTable(tw, p) })
		},
	}, &cobra.Command{
		Use: "delete NAME", Short: "Delete an empty pool", Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			ctx, cancel := ctxOf(cmd)
			defer cancel()
			if err := g.client().DeletePool(ctx, args[0], client.Options{}); err != nil {
				return err
			}
			return g.print(cmd.OutOrStdout(), map[string]string{"deleted": args[0]}, func(tw *tabwriter.Writer) {
				fmt.Fprintf(tw, "deleted pool %s\n", args[0])
			})
		},
	})
	return cmd
}

func newAllocateCmd(g *globals) *cobra.Command {
	var owner, key string
	var count int
	cmd := &cobra.Command{
		Use:   "allocate POOL [VALUE]",
		Short: "Allocate a value: the named one, or one chosen in the dynamic band",
		Example: `  rangealloc allocate clusterip-ipv4 --owner default/web
  rangealloc allocate clusterip-ipv4 10.96.0.10 --owner kube-system/kube-dns
  rangealloc allocate nodeport --count 10 --owner batch
  rangealloc allocate nodeport --owner default/web --idempotency-key web-np   # safe to retry`,
		Args: cobra.RangeArgs(1, 2),
		RunE: func(cmd *cobra.Command, args []string) error {
			ctx, cancel := ctxOf(cmd)
			defer cancel()
			o := client.Options{IdempotencyKey: key}
			if cmd.Flags().Changed("count") {
				if len(args) == 2 {
					return fmt.Errorf("--count is for dynamic allocations: leave VALUE out")
				}
				allocs, _, err := g.client().AllocateCount(ctx, args[0], owner, count, o)
				if err != nil {
					return err
				}
				return g.print(cmd.OutOrStdout(), api.AllocationList{Allocations: allocs}, func(tw *tabwriter.Writer) { allocTable(tw, allocs...) })
			}
			value := ""
			if len(args) == 2 {
				value = args[1]
			}
			a, _, err := g.client().Allocate(ctx, args[0], value, owner, o)
			if err != nil {
				return err
			}
			return g.print(cmd.OutOrStdout(), a, func(tw *tabwriter.Writer) { allocTable(tw, a) })
		},
	}
	cmd.Flags().StringVar(&owner, "owner", "", "owner recorded with the allocation, e.g. default/web")
	cmd.Flags().IntVar(&count, "count", 1, "allocate this many dynamic values at once (1-4096)")
	cmd.Flags().StringVar(&key, "idempotency-key", "", "a retry with the same key returns the first answer")
	return cmd
}

func newReleaseCmd(g *globals) *cobra.Command {
	var owner, key string
	cmd := &cobra.Command{
		Use:     "release POOL VALUE",
		Short:   "Release a value (with --owner: only if that owner holds it)",
		Example: `  rangealloc release nodeport 30080 --owner default/web`,
		Args:    cobra.ExactArgs(2),
		RunE: func(cmd *cobra.Command, args []string) error {
			ctx, cancel := ctxOf(cmd)
			defer cancel()
			if _, err := g.client().Release(ctx, args[0], args[1], owner, client.Options{IdempotencyKey: key}); err != nil {
				return err
			}
			return g.print(cmd.OutOrStdout(), map[string]string{"pool": args[0], "released": args[1]}, func(tw *tabwriter.Writer) {
				fmt.Fprintf(tw, "released %s from %s\n", args[1], args[0])
			})
		},
	}
	cmd.Flags().StringVar(&owner, "owner", "", "release only if held by this owner")
	cmd.Flags().StringVar(&key, "idempotency-key", "", "a retry with the same key returns the first answer")
	return cmd
}

func consistencyFlag(cmd *cobra.Command, v *string) {
	cmd.Flags().StringVar(v, "consistency", "linearizable", "linearizable, leader or stale")
}

func newGetCmd(g *globals) *cobra.Command {
	var cons string
	cmd := &cobra.Command{
		Use:     "get POOL VALUE",
		Short:   "Show who holds a value",
		Example: `  rangealloc get clusterip-ipv4 10.96.0.10`,
		Args:    cobra.ExactArgs(2),
		RunE: func(cmd *cobra.Command, args []string) error {
			ctx, cancel := ctxOf(cmd)
			defer cancel()
			a, _, err := g.client().Get(ctx, args[0], args[1], client.Options{Consistency: cons})
			if err != nil {
				return err
			}
			return g.print(cmd.OutOrStdout(), a, func(tw *tabwriter.Writer) { allocTable(tw, a) })
		},
	}
	consistencyFlag(cmd, &cons)
	return cmd
}

func newListCmd(g *globals) *cobra.Command {
	var owner, cons string
	cmd := &cobra.Command{
		Use:     "list POOL",
		Short:   "List a pool's allocations in ascending order",
		Example: `  rangealloc list nodeport --owner default/web`,
		Args:    cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			ctx, cancel := ctxOf(cmd)
			defer cancel()
			allocs, err := g.client().ListAll(ctx, args[0], owner, client.Options{Consistency: cons})
			if err != nil {
				return err
			}
			if allocs == nil {
				allocs = []api.Allocation{}
			}
			return g.print(cmd.OutOrStdout(), api.AllocationList{Allocations: allocs}, func(tw *tabwriter.Writer) { allocTable(tw, allocs...) })
		},
	}
	cmd.Flags().StringVar(&owner, "owner", "", "only allocations held by this owner")
	consistencyFlag(cmd, &cons)
	return cmd
}

func clusterTable(tw *tabwriter.Writer, st api.ClusterStatus) {
	cluster := st.ClusterID
	if cluster == "" {
		cluster = "(not named yet)"
	}
	fmt.Fprintf(tw, "cluster %s; answered by %s (release %s); leader %s (%s); term %d; commit %d; applied %d; feature level %d\n\n",
		cluster, st.ID, st.Version, st.Leader.ID, st.Leader.APIAddr, st.Term, st.CommitIndex, st.AppliedIndex, st.FeatureLevel)
	fmt.Fprintln(tw, "ID\tRAFT\tAPI\tROLE\tHEALTH\tLAST CONTACT\tMATCH\tLAG\tRELEASE\tLEVEL\tDISK FREE")
	upgradable := len(st.Members) > 0
	for _, m := range st.Members {
		role := "non-voter"
		switch {
		case m.Leader:
			role = "leader"
		case m.Voter:
			role = "voter"
		}
		if !m.HealthKnown {
			upgradable = false
			fmt.Fprintf(tw, "%s\t%s\t%s\t%s\tunknown (no leader to ask)\t-\t-\t-\t-\t-\t-\n", m.ID, m.RaftAddr, m.APIAddr, role)
			continue
		}
		health := "healthy"
		switch {
		case !m.Reachable:
			health = "UNREACHABLE"
		case !m.Healthy:
			health = "catching up"
		}
		contact := "never"
		if m.LastContactMs >= 0 {
			contact = (time.Duration(m.LastContactMs) * time.Millisecond).String() + " ago"
		}
		disk := "-"
		if m.DiskFreeBytes > 0 {
			disk = human.Bytes(m.DiskFreeBytes)
			if m.DiskLow {
				disk += " LOW"
			}
		}
		level := "-"
		if m.FeatureLevel > 0 {
			level = strconv.Itoa(m.FeatureLevel)
		}
		upgradable = upgradable && m.FeatureLevel > st.FeatureLevel
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\t%d\t%d\t%s\t%s\t%s\n", m.ID, m.RaftAddr, m.APIAddr, role, health, contact,
			m.MatchIndex, m.Lag, orDash(m.Version), level, disk)
	}
	if upgradable {
		fmt.Fprintf(tw, "\nevery member supports a higher feature level than the cluster's %d: once no member needs rolling back, "+
			"run rangealloc cluster finalize-upgrade\n", st.FeatureLevel)
	}
}

func orDash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}

func newClusterCmd(g *globals) *cobra.Command {
	status := func(cmd *cobra.Command, _ []string) error {
		ctx, cancel := ctxOf(cmd)
		defer cancel()
		st, err := g.client().Cluster(ctx)
		if err != nil {
			return err
		}
		return g.print(cmd.OutOrStdout(), st, func(tw *tabwriter.Writer) { clusterTable(tw, st) })
	}
	cmd := &cobra.Command{
		Use:   "cluster",
		Short: "Show and change the cluster's members",
		Example: `  rangealloc cluster
  rangealloc cluster join n4 127.0.0.1:7087 127.0.0.1:7086
  rangealloc cluster join n5 127.0.0.1:7089 127.0.0.1:7088 --voter=false
  rangealloc cluster remove n4
  rangealloc cluster transfer-leader n2
  rangealloc cluster finalize-upgrade`,
		Args: cobra.NoArgs,
		RunE: status,
	}
	cmd.AddCommand(&cobra.Command{Use: "status", Short: "Show the cluster", Args: cobra.NoArgs, RunE: status},
		newJoinCmd(g), newRemoveMemberCmd(g), &cobra.Command{
			Use: "transfer-leader [ID]", Short: "Hand leadership to ID, or to any follower", Args: cobra.MaximumNArgs(1),
			RunE: func(cmd *cobra.Command, args []string) error {
				ctx, cancel := ctxOf(cmd)
				defer cancel()
				id := ""
				if len(args) == 1 {
					id = args[0]
				}
				st, err := g.client().TransferLeadership(ctx, id)
				if err != nil {
					return err
				}
				return g.print(cmd.OutOrStdout(), st, func(tw *tabwriter.Writer) { clusterTable(tw, st) })
			},
		}, &cobra.Command{
			Use:   "finalize-upgrade",
			Short: "Raise the cluster's feature level to what every member's release supports (no rolling back after it)",
			Long: `Raise the cluster's feature level to the highest every member's binary supports.

During a rolling upgrade the cluster keeps the feature level of its oldest
member, so that any node may still be rolled back to the previous release.
Once every member runs the new release and none will be rolled back, this
command lets the cluster use what the new release adds. It is refused
(VersionMismatch) while a member runs an older release or does not answer,
and names it. Afterwards no member can return to an older release: it
would stop at the first entry it cannot read.`,
			Args: cobra.NoArgs,
			RunE: func(cmd *cobra.Command, _ []string) error {
				ctx, cancel := ctxOf(cmd)
				defer cancel()
				st, err := g.client().FinalizeUpgrade(ctx)
				if err != nil {
					return err
				}
				return g.print(cmd.OutOrStdout(), st, func(tw *tabwriter.Writer) { clusterTable(tw, st) })
			},
		})
	return cmd
}

func newRemoveMemberCmd(g *globals) *cobra.Command {
	var key string
	cmd := &cobra.Command{
		Use: "remove ID", Short: "Remove a member", Args: cobra.ExactArgs(1),
		Example: `  rangealloc cluster remove n4 --idempotency-key remove-n4   # safe to retry`,
		RunE: func(cmd *cobra.Command, args []string) error {
			ctx, cancel := ctxOf(cmd)
			defer cancel()
			if err := g.client().RemoveMemberWith(ctx, args[0], client.Options{IdempotencyKey: key}); err != nil {
				return err
			}
			return g.print(cmd.OutOrStdout(), map[string]string{"removed": args[0]}, func(tw *tabwriter.Writer) {
				fmt.Fprintf(tw, "removed member %s\n", args[0])
			})
		},
	}
	cmd.Flags().StringVar(&key, "idempotency-key", "", "a retry with the same key answers as the first call did, though the member is gone by then")
	return cmd
}

func newJoinCmd(g *globals) *cobra.Command {
	voter := true
	cmd := &cobra.Command{
		Use:   "join ID RAFT_ADDR [HTTP_ADDR]",
		Short: "Add a running node without state: it joins as a non-voter and is promoted to voter once it has caught up",
		Args:  cobra.RangeArgs(2, 3),
		RunE: func(cmd *cobra.Command, args []string) error {
			ctx, cancel := ctxOf(cmd)
			defer cancel()
			m := api.MemberRequest{ID: args[0], RaftAddr: args[1]}
			if len(args) == 3 {
				m.APIAddr = args[2]
			}
			if !voter {
				m.Voter = &voter
			}
			st, err := g.client().AddMember(ctx, m)
			if err != nil {
				return err
			}
			return g.print(cmd.OutOrStdout(), st, func(tw *tabwriter.Writer) { clusterTable(tw, st) })
		},
	}
	cmd.Flags().BoolVar(&voter, "voter", true, "false keeps the member a non-voter: it replicates the log but never votes")
	return cmd
}

func newSnapshotCmd(g *globals) *cobra.Command {
	cmd := &cobra.Command{
		Use:   "snapshot",
		Short: "Save a backup of the whole state, or restore one",
		Example: `  rangealloc snapshot save backup.snap
  rangealloc snapshot save survivor.snap --consistency stale   # no leader needed
  rangealloc snapshot restore backup.snap`,
	}
	var cons string
	save := &cobra.Command{
		Use: "save FILE", Short: "Save a backup to FILE", Args: cobra.ExactArgs(1),
		Long: `Save a backup of the whole state to FILE. With --consistency stale, the
node at --addr saves its own applied state without asking a leader: the way
to save what a survivor holds when the cluster has lost its quorum.`,
		RunE: func(cmd *cobra.Command, args []string) error {
			ctx, cancel := ctxOf(cmd)
			defer cancel()
			start := time.Now()
			data, err := g.client().BackupWith(ctx, client.Options{Consistency: cons})
			if err != nil {
				return err
			}
			// Synced before "saved" is printed: the runbooks rely on this file.
			if err := durable.WriteFile(args[0], data, 0o600); err != nil {
				return fmt.Errorf("save %s: %w", args[0], err)
			}
			return g.print(cmd.OutOrStdout(), map[string]any{"file": args[0], "bytes": len(data)}, func(tw *tabwriter.Writer) {
				fmt.Fprintf(tw, "saved %d bytes to %s in %s\n", len(data), args[0], time.Since(start).Round(time.Millisecond))
			})
		},
	}
	consistencyFlag(save, &cons)
	var key string
	restore := &cobra.Command{
		Use: "restore FILE", Short: "Replace the whole cluster's state with the backup in FILE", Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			ctx, cancel := ctxOf(cmd)
			defer cancel()
			data, err := os.ReadFile(args[0])
			if err != nil {
				return err
			}
			start := time.Now()
			if err := g.client().RestoreWith(ctx, data, client.Options{IdempotencyKey: key}); err != nil {
				return err
			}
			return g.print(cmd.OutOrStdout(), map[string]any{"file": args[0], "bytes": len(data)}, func(tw *tabwriter.Writer) {
				fmt.Fprintf(tw, "restored %d bytes from %s in %s\n", len(data), args[0], time.Since(start).Round(time.Millisecond))
			})
		},
	}
	restore.Flags().StringVar(&key, "idempotency-key", "", "a retry with the same key and FILE answers what the first restore did, and restores nothing again")
	cmd.AddCommand(save, restore)
	return cmd
}
