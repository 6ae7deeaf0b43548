package main

import (
	"bytes"
	"errors"
	"fmt"
	"sort"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/rangealloc/rangealloc/api/client"
	"github.com/rangealloc/rangealloc/api/types"
	"github.com/rangealloc/rangealloc/service/kube"
	"github.com/spf13/cobra"
)

func newReconcileCmd(g *globals) *cobra.Command {
	var file string
	var fence uint64
	var repair bool
	cmd := &cobra.Command{
		Use:   "reconcile",
		Short: "Compare Services with the pools: leaks, missing, duplicate, out-of-range and mismatched values",
		Long: `Compares a list of Services with what the pools hold, as Kubernetes' repair
controllers do, and prints each finding: leak (held by no listed Service),
missing (a Service names a value the pool does not hold for it), duplicate,
outOfRange and mismatch, with Kubernetes' reason.

Without --services it reconciles the cluster's own Service records; the
revision their list was read at is the fence. With --services FILE
(kubectl get services -A -o json) it reconciles those. The fence is the
revision read before the Services were listed: a value allocated after it
is never a leak, as its Service may be missing from the list only because
the list is older. --repair releases leaks and records missing values; with
--services it needs --fence, read before the listing (rangealloc cluster
shows the commit index), else a value allocated after the caller listed
its Services could be released while its Service still uses it.

Exit status: 0 when there is no finding (or every one was repaired), 3 when
findings remain, 1 on any error.`,
		Example: `  rangealloc reconcile
  rangealloc reconcile --repair
  kubectl get services -A -o json > svcs.json   # after reading the fence: rangealloc cluster -o json
  rangealloc reconcile --services svcs.json --fence 1234 --repair -o json`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			fenceSet := cmd.Flags().Changed("fence")
			if file == "" && fenceSet {
				return errors.New("--fence goes with --services: without it the fence is the revision of the cluster's own Service list")
			}
			if file != "" && repair && !fenceSet {
				return errors.New("--repair with --services needs --fence, a revision read before the Services were listed: " +
					"a value allocated after the listing must not be released as a leak")
			}
			req := types.ReconcileRequest{Fence: fence, Mode: types.ReconcileModeReport}
			if repair {
				req.Mode = types.ReconcileModeRepair
			}
			if file != "" {
				svcs, err := readServices(cmd, "--services", file)
				if err != nil {
					return err
				}
				req.Services = svcs
			}
			ctx, cancel := ctxOf(cmd)
			defer cancel()
			start := time.Now()
			if file == "" || !fenceSet {
				// The list's revision: the fence of the cluster's own
				// Services, and "now" for a report on a caller's list.
				l, err := g.client().ListServices(ctx, "", client.Options{})
				if err != nil {
					return err
				}
				req.Fence = l.Revision
				if file == "" {
					req.Services = l.Services
				}
			}
			if req.Services == nil {
				req.Services = []types.Service{}
			}
			rep, err := g.client().Reconcile(ctx, req, client.Options{})
			if err != nil {
				return err
			}
			return reportFindings(cmd, g, req, rep, time.Since(start))
		},
	}
	cmd.Flags().StringVar(&file, "services", "", "reconcile these Services (kubectl get services -A -o json; - for standard input) instead of the cluster's own")
	cmd.Flags().Uint64Var(&fence, "fence", 0, "revision read before the --services were listed (needed for --repair; default for a report: now)")
	cmd.Flags().BoolVar(&repair, "repair", false, "release leaks and record missing values")
	return cmd
}

// reportFindings prints the report and a summary, and returns the exit
// status error when findings remain.
func reportFindings(cmd *cobra.Command, g *globals, req types.ReconcileRequest, rep types.ReconcileReport, took time.Duration) error {
	if rep.Findings == nil {
		rep.Findings = []types.Finding{}
	}
	counts := map[string]int{}
	remain := 0
	for _, f := range rep.Findings {
		counts[f.Type]++
		if !f.Repaired {
			remain++
		}
	}
	summary := fmt.Sprintf("%s%s in %s, fence %d, revision %d, %s, in %s", plural(len(rep.Findings), "finding"),
		countsText(counts), plural(len(req.Services), "service"), req.Fence, rep.Revision, rep.Mode, took.Round(time.Millisecond))
	if req.Mode == types.ReconcileModeRepair {
		summary += fmt.Sprintf("; %d repaired", len(rep.Findings)-remain)
	}
	err := g.print(cmd.OutOrStdout(), rep, func(tw *tabwriter.Writer) {
		if len(rep.Findings) > 0 {
			findingTable(tw, rep.Findings)
			fmt.Fprintln(tw)
		}
		fmt.Fprintln(tw, summary)
	})
	if err != nil {
		return err
	}
	if remain > 0 {
		msg := fmt.Sprintf("%d findings remain", remain)
		if remain == 1 {
			msg = "1 finding remains"
		}
		return &exitError{code: exitFindings, msg: msg}
	}
	return nil
}

// countsText is " (2 leak, 1 missing)", types sorted, or "".
func countsText(counts map[string]int) string {
	if len(counts) == 0 {
		return ""
	}
	parts := make([]string, 0, len(counts))
	for t, n := range counts {
		parts = append(parts, fmt.Sprintf("%d %s", n, t))
	}
	sort.Strings(parts)
	return " (" + strings.Join(parts, ", ") + ")"
}

// plural is "1 service", "2 services".
func plural(n int, noun string) string {
	if n == 1 {
		return "1 " + noun
	}
	return fmt.Sprintf("%d %ss", n, noun)
}

func findingTable(tw *tabwriter.Writer, fs []types.Finding) {
	fmt.Fprintln(tw, "TYPE\tPOOL\tVALUE\tSERVICE\tOWNER\tREASON\tREPAIRED")
	for _, f := range fs {
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\t%t\n", f.Type, f.Pool, f.Value, orNone(f.Service), orNone(f.Owner), f.Reason, f.Repaired)
	}
}

func newImportCmd(g *globals) *cobra.Command {
	var svcFile, raFile, key string
	cmd := &cobra.Command{
		Use:   "import --services FILE [--rangeallocations FILE]",
		Short: "Create the Service records of an existing Kubernetes cluster with their current values, in one step (admin)",
		Long: `Reads 'kubectl get services -A -o json' of an existing cluster, and
optionally its RangeAllocation objects (one, a List or a JSON array), and
creates every Service record with its ClusterIPs and nodePorts in one
restore-like step. Values the RangeAllocations hold that no Service names
are held by the owner "import". Afterwards each pool's RangeAllocation
bytes equal the imported ones. Both files are checked before anything is
sent.`,
		Example: `  kubectl get services -A -o json > services.json
  rangealloc import --services services.json
  rangealloc import --services services.json --rangeallocations ranges.json --idempotency-key import-1`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			svcs, err := readServices(cmd, "--services", svcFile)
			if err != nil {
				return err
			}
			req := types.ImportRequest{Services: svcs}
			if raFile != "" {
				data, err := readFile(cmd, "--rangeallocations", raFile)
				if err != nil {
					return err
				}
				if req.RangeAllocations, err = kube.RangeAllocations(bytes.NewReader(data)); err != nil {
					return fmt.Errorf("--rangeallocations %s: %w", raFile, err)
				}
			}
			if len(req.Services) == 0 && len(req.RangeAllocations) == 0 {
				return fmt.Errorf("--services %s: no Services to import", svcFile)
			}
			ctx, cancel := ctxOf(cmd)
			defer cancel()
			start := time.Now()
			res, err := g.client().Import(ctx, req, client.Options{IdempotencyKey: key})
			if err != nil {
				return err
			}
			return g.print(cmd.OutOrStdout(), res, func(tw *tabwriter.Writer) {
				fmt.Fprintf(tw, "imported %d services and %d values (%d RangeAllocations) at revision %d in %s\n",
					res.Services, res.Values, len(req.RangeAllocations), res.Revision, time.Since(start).Round(time.Millisecond))
			})
		},
	}
	cmd.Flags().StringVar(&svcFile, "services", "", "kubectl get services -A -o json output; - for standard input")
	cmd.Flags().StringVar(&raFile, "rangeallocations", "", "the cluster's RangeAllocation objects in JSON")
	cmd.Flags().StringVar(&key, "idempotency-key", "", "a retry with the same key returns the first answer")
	_ = cmd.MarkFlagRequired("services")
	return cmd
}
