// Command rangealloc runs a rangealloc node (`rangealloc server`) or talks
// to one (every other command). See `rangealloc --help`.
package main

import (
	"errors"
	"fmt"
	"net/url"
	"os"
	"strings"
	"time"

	"github.com/rangealloc/rangealloc/api/client"
	"github.com/rangealloc/rangealloc/certs"
	"github.com/spf13/cobra"
	"github.com/spf13/pflag"
)

func main() {
	root := newRoot()
	if err := root.Execute(); err != nil {
		var xe *exitError
		if errors.As(err, &xe) {
			fmt.Fprintln(os.Stderr, xe.msg)
			os.Exit(xe.code)
		}
		fmt.Fprint(os.Stderr, errorText(err))
		os.Exit(1)
	}
}

// errorText is what main prints for a command's error.
func errorText(err error) string {
	var ae *client.Error
	var ue *url.Error
	switch {
	case errors.As(err, &ae):
		text := fmt.Sprintf("Error: %s: %s\n", ae.Code, ae.Message)
		if key, ok := ae.Details["idempotencyKey"].(string); ok && key != "" {
			// The key the node drew for a request sent without one: the
			// only way to learn the outcome without applying it twice.
			text += fmt.Sprintf("The request's Idempotency-Key is %s: a retry with it (--idempotency-key, where the command has it) answers what the request did.\n", key)
		}
		return text
	case errors.As(err, &ue):
		return fmt.Sprintf("Error: cannot reach rangealloc at %s: %v\n"+
			"Is a server running there? Start one with 'rangealloc server', or point --addr (RANGEALLOC_ADDR) at one.\n",
			ue.URL, ue.Err)
	default:
		return fmt.Sprintf("Error: %v\n", err)
	}
}

func newRoot() *cobra.Command {
	g := &globals{}
	root := &cobra.Command{
		Use:   "rangealloc",
		Short: "Unique Service ClusterIPs and NodePorts, replicated with Raft",
		Long: `rangealloc allocates Kubernetes-style Service ClusterIPs and NodePorts for
control planes on one to three machines, without etcd.

Run a node with 'rangealloc server'; every other command talks to a node at
--addr (any node: writes are carried to the leader). Every flag can also be
set from the environment as RANGEALLOC_<FLAG>, e.g. RANGEALLOC_ADDR or
RANGEALLOC_DATA_DIR.`,
		Example: `  rangealloc server                                  # one node, default pools, data in ./data
  rangealloc allocate clusterip-ipv4 --owner default/web
  rangealloc allocate nodeport 30080 --owner default/web
  rangealloc list clusterip-ipv4 -o json`,
		SilenceUsage:  true,
		SilenceErrors: true,
		PersistentPreRunE: func(cmd *cobra.Command, _ []string) error {
			if err := bindEnv(cmd); err != nil {
				return err
			}
			if g.output != "table" && g.output != "json" {
				return fmt.Errorf("--output %q: want table or json", g.output)
			}
			if cmd.Name() != "server" {
				var err error
				g.hc, err = g.httpClient(30*time.Second, 2, certs.Paths{}) // reads the TLS files now: a bad one is named here
				return err
			}
			return nil
		},
	}
	g.register(root.PersistentFlags())
	root.AddCommand(newServerCmd(g), newPoolsCmd(g), newAllocateCmd(g), newReleaseCmd(g), newGetCmd(g),
		newListCmd(g), newClusterCmd(g), newSnapshotCmd(g), newBenchCmd(g), newTokenCmd(), newCertsCmd(g))
	root.AddCommand(newRecoverCmd(g))
	root.AddCommand(newServicesCmd(g), newReconcileCmd(g), newImportCmd(g), newVersionCmd(g))
	return root
}

// bindEnv sets every flag the command line left alone from
// RANGEALLOC_<FLAG>, if that is set.
func bindEnv(cmd *cobra.Command) error {
	var errs []error
	set := func(f *pflag.Flag) {
		if f.Changed {
			return
		}
		name := "RANGEALLOC_" + strings.ToUpper(strings.ReplaceAll(f.Name, "-", "_"))
		if v, ok := os.LookupEnv(name); ok {
			if err := f.Value.Set(v); err != nil {
				errs = append(errs, fmt.Errorf("%s=%q: %w", name, v, err))
			}
			f.Changed = true
		}
	}
	cmd.Flags().VisitAll(set)
	cmd.InheritedFlags().VisitAll(set)
	return errors.Join(errs...)
}
