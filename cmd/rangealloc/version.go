package main

import (
	"fmt"
	"runtime"
	"text/tabwriter"

	"github.com/rangealloc/rangealloc/fsm"
	"github.com/rangealloc/rangealloc/version"
	"github.com/spf13/cobra"
)

// versionInfo is what rangealloc version prints.
type versionInfo struct {
	Version      string `json:"version"`
	Protocol     int    `json:"protocol"`
	FeatureLevel int    `json:"featureLevel"`
	Go           string `json:"go"`
	Platform     string `json:"platform"`
}

func newVersionCmd(g *globals) *cobra.Command {
	return &cobra.Command{
		Use:   "version",
		Short: "Print this binary's release, protocol version and highest feature level",
		Long: `Print this binary's release, the version of the protocol its nodes speak
to each other, and the highest cluster feature level it supports.

A running node's release and feature level are in rangealloc cluster.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			v := versionInfo{Version: version.String(), Protocol: version.Protocol, FeatureLevel: fsm.MaxFeatureLevel,
				Go: runtime.Version(), Platform: runtime.GOOS + "/" + runtime.GOARCH}
			return g.print(cmd.OutOrStdout(), v, func(tw *tabwriter.Writer) {
				fmt.Fprintf(tw, "rangealloc %s\nprotocol\t%d\nfeature level\t%d\ngo\t%s\nplatform\t%s\n",
					v.Version, v.Protocol, v.FeatureLevel, v.Go, v.Platform)
			})
		},
	}
}
