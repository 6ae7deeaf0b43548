package main

import (
	"fmt"

	"github.com/rangealloc/rangealloc/api"
	"github.com/spf13/cobra"
)

func newTokenCmd() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "token",
		Short: "Make API tokens for a node's --token-file",
		Example: `  rangealloc token create --role write --name kube-apiserver
  rangealloc token create --role admin --name ops`,
		Args: cobra.NoArgs,
	}
	cmd.AddCommand(newTokenCreateCmd())
	return cmd
}

func newTokenCreateCmd() *cobra.Command {
	var role, name string
	cmd := &cobra.Command{
		Use:   "create --role ROLE --name NAME",
		Short: "Make a new random token and its line for --token-file",
		Long: `Make a new random token (32 bytes from the system's secure random source)
and print, on standard output, the token on the first line and its line for
a node's --token-file on the second, nothing else. The file's line holds only
the token's SHA-256, its role and its name, so a copy of the file cannot call
the API; the token itself is shown only now.

--role is what the token may do, each including the one before it:
  read   every GET but /v1/snapshot (pools, allocations, cluster, metrics)
  write  also allocate, release and run transactions
  admin  everything: pools, members, leader transfer, snapshot, restore
--name labels the token in the node's logs (no whitespace); each token in a
file has its own name.

Nothing is sent to any node: append the line to the token file of every
node (each re-reads it within 10 seconds), then give the token to the
client.`,
		Example: `  # a token for the API server: append its line to every node's token file
  rangealloc token create --role write --name kube-apiserver > kube-apiserver.token
  sed -n 2p kube-apiserver.token >> /etc/rangealloc/tokens

  # then give the token (the first line) to clients, through the environment
  # rather than --token: a command line is visible to every local user
  RANGEALLOC_TOKEN=$(head -n 1 kube-apiserver.token) rangealloc pools`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			r, err := tokenFlags(role, name)
			if err != nil {
				return err
			}
			token, err := api.NewToken()
			if err != nil {
				return err
			}
			fmt.Fprintln(cmd.OutOrStdout(), token)
			fmt.Fprintln(cmd.OutOrStdout(), api.TokenLine(token, r, name))
			fmt.Fprintf(cmd.ErrOrStderr(), "# line 1: the token, for clients (--token or RANGEALLOC_TOKEN); it is not shown again\n"+
				"# line 2: for every node's --token-file (role %s, name %s)\n", r, name)
			return nil
		},
	}
	cmd.Flags().StringVar(&role, "role", "", "what the token may do: read, write or admin (required)")
	cmd.Flags().StringVar(&name, "name", "", "the token's name in logs, unique in the token file, no whitespace (required)")
	return cmd
}

// tokenFlags checks --role and --name of token create.
func tokenFlags(role, name string) (api.Role, error) {
	if role == "" {
		return 0, fmt.Errorf("--role is required: read, write or admin")
	}
	r, err := api.ParseRole(role)
	if err != nil {
		return 0, fmt.Errorf("--role %q: want read, write or admin", role)
	}
	if name == "" {
		return 0, fmt.Errorf("--name is required: a label for the token in logs, such as kube-apiserver")
	}
	if err := api.ValidTokenName(name); err != nil {
		return 0, fmt.Errorf("--name %q: %v", name, err)
	}
	return r, nil
}
