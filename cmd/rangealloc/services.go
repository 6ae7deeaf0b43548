package main

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"reflect"
	"slices"
	"strconv"
	"strings"
	"text/tabwriter"

	"github.com/rangealloc/rangealloc/api/client"
	"github.com/rangealloc/rangealloc/api/types"
	"github.com/rangealloc/rangealloc/service/kube"
	"github.com/spf13/cobra"
)

// exitFindings is the exit status of reconcile when findings remain.
const exitFindings = 3

// exitError ends the command with an exit status other than 1; main
// prints msg (not as "Error:") and exits with code.
type exitError struct {
	code int
	msg  string
}

func (e *exitError) Error() string { return e.msg }

// splitService parses NAMESPACE/NAME.
func splitService(arg string) (namespace, name string, err error) {
	ns, name, ok := strings.Cut(arg, "/")
	if !ok || ns == "" || name == "" || strings.Contains(name, "/") {
		return "", "", fmt.Errorf("%q: want NAMESPACE/NAME, such as default/web", arg)
	}
	return ns, name, nil
}

// readFile reads path, or standard input for "-"; errors name the flag.
func readFile(cmd *cobra.Command, flag, path string) ([]byte, error) {
	if path == "-" {
		data, err := io.ReadAll(cmd.InOrStdin())
		if err != nil {
			return nil, fmt.Errorf("%s -: %w", flag, err)
		}
		return data, nil
	}
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", flag, err)
	}
	return data, nil
}

// readServices reads a Kubernetes Service, List or array in JSON.
func readServices(cmd *cobra.Command, flag, path string) ([]types.Service, error) {
	data, err := readFile(cmd, flag, path)
	if err != nil {
		return nil, err
	}
	svcs, err := kube.Services(bytes.NewReader(data))
	if err != nil {
		return nil, fmt.Errorf("%s %s: %w", flag, path, err)
	}
	return svcs, nil
}

// serviceError names the Service an API error is about. An API error is
// flattened to its code and message so the name survives main's printing.
func serviceError(s types.Service, err error) error {
	var ae *client.Error
	if errors.As(err, &ae) {
		msg := ae.Message
		if f, ok := ae.Details["field"].(string); ok && !strings.Contains(msg, f) {
			msg = f + ": " + msg
		}
		return fmt.Errorf("%s/%s: %s: %s", s.Namespace, s.Name, ae.Code, msg)
	}
	return fmt.Errorf("%s/%s: %w", s.Namespace, s.Name, err)
}

// portsText renders ports as kubectl does: 80:30080/TCP,443/TCP.
func portsText(ports []types.ServicePort) string {
	if len(ports) == 0 {
		return "<none>"
	}
	var b strings.Builder
	for i, p := range ports {
		if i > 0 {
			b.WriteByte(',')
		}
		proto := p.Protocol
		if proto == "" {
			proto = "TCP"
		}
		b.WriteString(strconv.Itoa(int(p.Port)))
		if p.NodePort != 0 {
			b.WriteString(":" + strconv.Itoa(int(p.NodePort)))
		}
		b.WriteString("/" + proto)
	}
	return b.String()
}

func orNone(s string) string {
	if s == "" {
		return "<none>"
	}
	return s
}

// serviceRow is one Service in a table, with what a write did to it.
type serviceRow struct {
	Result  string        `json:"result,omitempty"`
	Service types.Service `json:"service"`
}

func serviceTable(tw *tabwriter.Writer, rows ...serviceRow) {
	withResult := slices.ContainsFunc(rows, func(r serviceRow) bool { return r.Result != "" })
	head := "NAMESPACE\tNAME\tTYPE\tCLUSTER-IPS\tPORTS\tHEALTH-CHECK\tREVISION"
	if withResult {
		head += "\tRESULT"
	}
	fmt.Fprintln(tw, head)
	for _, r := range rows {
		s := r.Service
		hc := "<none>"
		if s.HealthCheckNodePort != 0 {
			hc = strconv.Itoa(int(s.HealthCheckNodePort))
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\t%d", s.Namespace, s.Name, s.Type, orNone(strings.Join(s.ClusterIPs, ",")),
			portsText(s.Ports), hc, s.Revision)
		if withResult {
			fmt.Fprintf(tw, "\t%s", r.Result)
		}
		fmt.Fprintln(tw)
	}
}

func rowsOf(svcs []types.Service) []serviceRow {
	rows := make([]serviceRow, len(svcs))
	for i, s := range svcs {
		rows[i] = serviceRow{Service: s}
	}
	return rows
}

func newServicesCmd(g *globals) *cobra.Command {
	list := newServicesListCmd(g)
	cmd := &cobra.Command{
		Use:   "services",
		Short: "Create, update, show and delete Kubernetes Services and their ClusterIPs and NodePorts",
		Long: `A Service write allocates and releases its ClusterIPs, nodePorts and
healthCheckNodePort the way kube-apiserver does, in one replicated step.
Values a Service holds are owned by services/<namespace>/<name>.`,
		Example: `  rangealloc services apply -f web.json
  kubectl get services -A -o json | rangealloc services apply -f -
  rangealloc services get default/web
  rangealloc services list --namespace default -o json
  rangealloc services delete default/web --dry-run
  rangealloc services network`,
		Args: cobra.NoArgs,
		RunE: list.RunE,
	}
	cmd.Flags().AddFlagSet(list.Flags())
	cmd.AddCommand(newServicesApplyCmd(g), newServicesGetCmd(g), list, newServicesDeleteCmd(g), newServiceNetworkCmd(g))
	return cmd
}

func newServicesApplyCmd(g *globals) *cobra.Command {
	var file string
	var dryRun bool
	cmd := &cobra.Command{
		Use:   "apply -f FILE",
		Short: "Create or update the Services of a Kubernetes manifest (JSON)",
		Long: `Reads a Service, a List of them or a JSON array (- for standard input), and
writes each with PUT /v1/services/NAMESPACE/NAME: left-out ClusterIPs and
nodePorts are allocated, named ones reserved. Prints each Service completed,
with what the write did: created, updated or unchanged. Stops at the first
Service the server refuses, after printing the ones already written.
YAML is not read: convert with kubectl ... -o json.`,
		Example: `  rangealloc services apply -f web.json
  rangealloc services apply -f web.json --dry-run      # what would be allocated; nothing changes
  kubectl get services -n shop -o json | rangealloc services apply -f -`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			svcs, err := readServices(cmd, "-f", file)
			if err != nil {
				return err
			}
			ctx, cancel := ctxOf(cmd)
			defer cancel()
			rows, err := applyServices(ctx, g.client(), svcs, dryRun)
			if perr := g.print(cmd.OutOrStdout(), struct {
				Results []serviceRow `json:"results"`
			}{rows}, func(tw *tabwriter.Writer) { serviceTable(tw, rows...) }); perr != nil && err == nil {
				err = perr
			}
			return err
		},
	}
	cmd.Flags().StringVarP(&file, "filename", "f", "", "Service manifest in JSON; - for standard input")
	cmd.Flags().BoolVar(&dryRun, "dry-run", false, "answer what the writes would do and change nothing")
	_ = cmd.MarkFlagRequired("filename")
	return cmd
}

// applyServices PUTs each Service in turn. A Service's result compares the
// answer with what was stored before: a PUT that changes nothing answers
// 200 like an update does.
func applyServices(ctx context.Context, c *client.Client, svcs []types.Service, dryRun bool) ([]serviceRow, error) {
	rows := make([]serviceRow, 0, len(svcs))
	suffix := ""
	if dryRun {
		suffix = " (dry run)"
	}
	for _, s := range svcs {
		prev, err := c.GetService(ctx, s.Namespace, s.Name, client.Options{})
		var ae *client.Error
		found := err == nil
		if err != nil && (!errors.As(err, &ae) || ae.Status != http.StatusNotFound) {
			return rows, serviceError(s, err)
		}
		out, created, err := c.PutService(ctx, s, client.ServiceOptions{DryRun: dryRun})
		if err != nil {
			return rows, serviceError(s, err)
		}
		result := "updated"
		switch {
		case created:
			result = "created"
		case found && sameService(prev, out):
			result = "unchanged"
		}
		rows = append(rows, serviceRow{Result: result + suffix, Service: out})
	}
	return rows, nil
}

// sameService compares two answers about a Service, revision aside.
func sameService(a, b types.Service) bool {
	a.Revision, b.Revision = 0, 0
	return reflect.DeepEqual(a, b)
}

func newServicesGetCmd(g *globals) *cobra.Command {
	var cons string
	cmd := &cobra.Command{
		Use:     "get NAMESPACE/NAME",
		Short:   "Show a Service with its ClusterIPs and nodePorts",
		Example: `  rangealloc services get kube-system/kube-dns -o json`,
		Args:    cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			ns, name, err := splitService(args[0])
			if err != nil {
				return err
			}
			ctx, cancel := ctxOf(cmd)
			defer cancel()
			s, err := g.client().GetService(ctx, ns, name, client.Options{Consistency: cons})
			if err != nil {
				return err
			}
			return g.print(cmd.OutOrStdout(), s, func(tw *tabwriter.Writer) { serviceTable(tw, serviceRow{Service: s}) })
		},
	}
	consistencyFlag(cmd, &cons)
	return cmd
}

func newServicesListCmd(g *globals) *cobra.Command {
	var ns, cons string
	cmd := &cobra.Command{
		Use:   "list",
		Short: "List Services, sorted by namespace and name",
		Long: `Lists the Services and the revision the list was read at: the fence to give
'rangealloc reconcile --fence' for a reconcile of Services listed after it.`,
		Example: `  rangealloc services list
  rangealloc services list --namespace kube-system -o json`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			ctx, cancel := ctxOf(cmd)
			defer cancel()
			l, err := g.client().ListServices(ctx, ns, client.Options{Consistency: cons})
			if err != nil {
				return err
			}
			if l.Services == nil {
				l.Services = []types.Service{}
			}
			return g.print(cmd.OutOrStdout(), l, func(tw *tabwriter.Writer) {
				serviceTable(tw, rowsOf(l.Services)...)
				fmt.Fprintf(tw, "\n%s at revision %d\n", plural(len(l.Services), "service"), l.Revision)
			})
		},
	}
	cmd.Flags().StringVarP(&ns, "namespace", "n", "", "only this namespace's Services (default: all)")
	consistencyFlag(cmd, &cons)
	return cmd
}

func newServicesDeleteCmd(g *globals) *cobra.Command {
	var dryRun bool
	cmd := &cobra.Command{
		Use:   "delete NAMESPACE/NAME",
		Short: "Delete a Service, releasing exactly its own values",
		Example: `  rangealloc services delete default/web
  rangealloc services delete default/web --dry-run`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			ns, name, err := splitService(args[0])
			if err != nil {
				return err
			}
			ctx, cancel := ctxOf(cmd)
			defer cancel()
			s, err := g.client().DeleteService(ctx, ns, name, client.ServiceOptions{DryRun: dryRun})
			if err != nil {
				return err
			}
			row := serviceRow{Result: "deleted", Service: s}
			if dryRun {
				row.Result = "deleted (dry run)"
			}
			return g.print(cmd.OutOrStdout(), row, func(tw *tabwriter.Writer) { serviceTable(tw, row) })
		},
	}
	cmd.Flags().BoolVar(&dryRun, "dry-run", false, "answer what the delete would release and change nothing")
	return cmd
}

func networkTable(tw *tabwriter.Writer, sn types.ServiceNetwork) {
	fmt.Fprintf(tw, "FAMILIES\t%s\n", orNone(strings.Join(sn.IPFamilies, ",")))
	fams := make([]string, 0, len(sn.Pools))
	for f := range sn.Pools {
		fams = append(fams, f)
	}
	slices.Sort(fams)
	for _, f := range fams {
		fmt.Fprintf(tw, "%s POOL\t%s\n", f, sn.Pools[f])
	}
	fmt.Fprintf(tw, "NODE PORT POOL\t%s\n", orNone(sn.NodePortPool))
}

func newServiceNetworkCmd(g *globals) *cobra.Command {
	cmd := &cobra.Command{
		Use:   "network",
		Short: "Show or set the service network: the IP families, their pools and the node-port pool",
		Example: `  rangealloc services network
  rangealloc services network set --families IPv4,IPv6 --pool IPv4=clusterip-ipv4 --pool IPv6=clusterip-ipv6 --node-port-pool nodeport`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			ctx, cancel := ctxOf(cmd)
			defer cancel()
			sn, err := g.client().ServiceNetwork(ctx, client.Options{})
			if err != nil {
				return err
			}
			return g.print(cmd.OutOrStdout(), sn, func(tw *tabwriter.Writer) { networkTable(tw, sn) })
		},
	}
	cmd.AddCommand(newServiceNetworkSetCmd(g))
	return cmd
}

func newServiceNetworkSetCmd(g *globals) *cobra.Command {
	var families, pools []string
	var nodePortPool string
	cmd := &cobra.Command{
		Use:   "set",
		Short: "Change the service network (admin)",
		Long: `Changes the service network. What no flag names is kept from the current
one: --families replaces the families and drops the pools of families it
leaves out, and each --pool sets one family's pool.
The first family is the primary one: single-stack Services get it.`,
		Example: `  rangealloc services network set --families IPv4,IPv6 --pool IPv4=clusterip-ipv4 --pool IPv6=clusterip-ipv6 --node-port-pool nodeport
  rangealloc services network set --families IPv6,IPv4      # make IPv6 the primary family`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			fl := cmd.Flags()
			if !fl.Changed("families") && !fl.Changed("pool") && !fl.Changed("node-port-pool") {
				return errors.New("nothing to set: give --families, --pool or --node-port-pool")
			}
			for _, f := range families {
				if f != "IPv4" && f != "IPv6" {
					return fmt.Errorf("--families %q: want IPv4 and/or IPv6, such as IPv4,IPv6", strings.Join(families, ","))
				}
			}
			byFamily, err := parsePools(pools)
			if err != nil {
				return err
			}
			ctx, cancel := ctxOf(cmd)
			defer cancel()
			sn, err := g.client().ServiceNetwork(ctx, client.Options{})
			if err != nil {
				return err
			}
			sn = mergeNetwork(sn, families, byFamily, fl.Changed("families"))
			if fl.Changed("node-port-pool") {
				sn.NodePortPool = nodePortPool
			}
			sn, err = g.client().SetServiceNetwork(ctx, sn, client.Options{})
			if err != nil {
				return err
			}
			return g.print(cmd.OutOrStdout(), sn, func(tw *tabwriter.Writer) { networkTable(tw, sn) })
		},
	}
	cmd.Flags().StringSliceVar(&families, "families", nil, "IP families, primary first: IPv4, IPv6, IPv4,IPv6 or IPv6,IPv4")
	cmd.Flags().StringArrayVar(&pools, "pool", nil, "FAMILY=POOL: the pool a family's ClusterIPs come from (repeat per family)")
	cmd.Flags().StringVar(&nodePortPool, "node-port-pool", "", "the pool nodePorts and healthCheckNodePorts come from")
	return cmd
}

// parsePools parses --pool FAMILY=POOL values.
func parsePools(pools []string) (map[string]string, error) {
	out := map[string]string{}
	for _, p := range pools {
		f, name, ok := strings.Cut(p, "=")
		if !ok || name == "" || (f != "IPv4" && f != "IPv6") {
			return nil, fmt.Errorf("--pool %q: want FAMILY=POOL with FAMILY IPv4 or IPv6, such as IPv4=clusterip-ipv4", p)
		}
		if _, dup := out[f]; dup {
			return nil, fmt.Errorf("--pool %q: %s is named twice", p, f)
		}
		out[f] = name
	}
	return out, nil
}

// mergeNetwork applies the flags given to the current network: --families
// replaces the families and drops the pools of families it leaves out;
// each --pool sets one family's pool.
func mergeNetwork(sn types.ServiceNetwork, families []string, pools map[string]string, setFamilies bool) types.ServiceNetwork {
	merged := map[string]string{}
	for f, p := range sn.Pools {
		if !setFamilies || slices.Contains(families, f) {
			merged[f] = p
		}
	}
	for f, p := range pools {
		merged[f] = p
	}
	if setFamilies {
		sn.IPFamilies = families
	}
	sn.Pools = merged
	return sn
}
