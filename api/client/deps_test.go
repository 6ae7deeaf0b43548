package client

import (
	"os/exec"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// TestClientLinksNoServer: a program that only talks to rangealloc links
// neither Raft, bbolt, Prometheus nor the node: the JSON types it shares
// with the server live in the leaf package api/types.
func TestClientLinksNoServer(t *testing.T) {
	out, err := exec.Command("go", "list", "-deps", ".").CombinedOutput()
	require.NoError(t, err, "%s", out)
	for _, dep := range strings.Fields(string(out)) {
		require.NotEqual(t, "github.com/rangealloc/rangealloc/api", dep, "api/client depends on the server's package")
		for _, banned := range []string{"github.com/hashicorp/raft", "go.etcd.io/bbolt", "github.com/prometheus/",
			"github.com/rangealloc/rangealloc/node", "github.com/rangealloc/rangealloc/fsm"} {
			require.False(t, strings.HasPrefix(dep, banned), "api/client depends on %s", dep)
		}
	}
}
