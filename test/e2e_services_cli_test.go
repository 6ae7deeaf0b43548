package test

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/rangealloc/rangealloc/api/client"
	"github.com/rangealloc/rangealloc/api/types"
	"github.com/rangealloc/rangealloc/service/kube"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// startServiceNode starts one node whose service network is the one
// kube.DefaultGenNetwork generates in, and waits for its three pools.
func startServiceNode(t *testing.T) *proc {
	t.Helper()
	net := kube.DefaultGenNetwork()
	p := newProcsArgs(t, 1, "--service-cidr", net.IPv4+","+net.IPv6, "--node-port-range", net.NodePorts)[0]
	require.Eventually(t, func() bool {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		defer cancel()
		pools, err := p.client().Pools(ctx, client.Options{})
		return err == nil && len(pools) == 3
	}, 30*time.Second, 100*time.Millisecond, "the pools of %s", p.id)
	return p
}

// applyJSON runs services apply on manifest and returns the one result.
func applyJSON(t *testing.T, p *proc, manifest string) (result string, svc types.Service) {
	t.Helper()
	file := filepath.Join(t.TempDir(), "svc.json")
	require.NoError(t, os.WriteFile(file, []byte(manifest), 0o600))
	out, errOut, code := rangealloc(t, p.http, "services", "apply", "-f", file, "-o", "json")
	require.Equal(t, 0, code, "services apply: %s", errOut)
	var res struct {
		Results []struct {
			Result  string        `json:"result"`
			Service types.Service `json:"service"`
		} `json:"results"`
	}
	require.NoError(t, json.Unmarshal([]byte(out), &res), out)
	require.Len(t, res.Results, 1)
	return res.Results[0].Result, res.Results[0].Service
}

// TestE2EServicesCLI: a Service's life through the CLI, with the pools
// checked at each step, and reconcile's findings and exit status.
func TestE2EServicesCLI(t *testing.T) {
	t.Parallel()
	p := startServiceNode(t)
	c, ctx := p.client(), ctxE(t)
	web := `{"apiVersion":"v1","kind":"Service","metadata":{"name":"web","namespace":"shop","uid":"u-web"},
		"spec":{"type":"NodePort","selector":{"app":"web"},"ports":[{"name":"http","port":80,"protocol":"TCP","targetPort":8080}]}}`

	result, svc := applyJSON(t, p, web)
	assert.Equal(t, "created", result)
	require.Len(t, svc.ClusterIPs, 1)
	require.Len(t, svc.Ports, 1)
	nodePort := strconv.Itoa(int(svc.Ports[0].NodePort))
	a, _, err := c.Get(ctx, "nodeport", nodePort, client.Options{})
	require.NoError(t, err, "the nodePort is held")
	assert.Equal(t, "services/shop/web", a.Owner)

	result, _ = applyJSON(t, p, web)
	assert.Equal(t, "unchanged", result)

	result, svc = applyJSON(t, p, strings.Replace(web, `"type":"NodePort"`, `"type":"ClusterIP"`, 1))
	assert.Equal(t, "updated", result)
	assert.Zero(t, svc.Ports[0].NodePort, "a ClusterIP Service has no nodePort")
	_, _, err = c.Get(ctx, "nodeport", nodePort, client.Options{})
	require.Error(t, err, "the type change released nodePort %s", nodePort)

	out, errOut, code := rangealloc(t, p.http, "reconcile")
	require.Equal(t, 0, code, "reconcile: %s%s", out, errOut)
	assert.Contains(t, out, "0 findings in 1 service,")

	_, err = c.ReleaseForce(ctx, "clusterip-ipv4", svc.ClusterIPs[0], "", client.Options{})
	require.NoError(t, err)
	out, errOut, code = rangealloc(t, p.http, "reconcile")
	assert.Equal(t, 3, code, "a missing ClusterIP: %s%s", out, errOut)
	assert.Regexp(t, `missing\s+clusterip-ipv4\s+`+svc.ClusterIPs[0]+`\s+shop/web`, out)
	assert.Contains(t, errOut, "1 finding remains")
	out, errOut, code = rangealloc(t, p.http, "reconcile", "--repair")
	assert.Equal(t, 0, code, "the repair records it: %s%s", out, errOut)
	out, errOut, code = rangealloc(t, p.http, "reconcile")
	assert.Equal(t, 0, code, "nothing left: %s%s", out, errOut)

	out, errOut, code = rangealloc(t, p.http, "services", "delete", "shop/web")
	require.Equal(t, 0, code, "services delete: %s", errOut)
	assert.Regexp(t, `shop\s+web\s+ClusterIP.*deleted`, out)
	_, _, err = c.Get(ctx, "clusterip-ipv4", svc.ClusterIPs[0], client.Options{})
	require.Error(t, err, "the delete released %s", svc.ClusterIPs[0])
	_, errOut, code = rangealloc(t, p.http, "services", "get", "shop/web")
	assert.Equal(t, 1, code)
	assert.Contains(t, errOut, "ServiceNotFound")
}

// TestE2EImportGenerated: 5,000 generated Services and their
// RangeAllocations imported into a fresh node give back RangeAllocation
// bytes identical to the imported ones, pool by pool.
func TestE2EImportGenerated(t *testing.T) {
	t.Parallel()
	p := startServiceNode(t)
	svcs, ras := kube.Generate(5000, 1, kube.DefaultGenNetwork())
	dir := t.TempDir()
	svcFile, raFile := filepath.Join(dir, "services.json"), filepath.Join(dir, "ranges.json")
	require.NoError(t, os.WriteFile(svcFile, svcs, 0o600))
	raJSON, err := json.Marshal(ras)
	require.NoError(t, err)
	require.NoError(t, os.WriteFile(raFile, raJSON, 0o600))

	out, errOut, code := rangealloc(t, p.http, "import", "--services", svcFile, "--rangeallocations", raFile, "-o", "json")
	require.Equal(t, 0, code, "import: %s", errOut)
	var res types.ImportResult
	require.NoError(t, json.Unmarshal([]byte(out), &res), out)
	assert.Equal(t, 5000, res.Services)

	ctx := ctxE(t)
	for _, want := range ras {
		got, err := p.client().RangeAllocation(ctx, want.Metadata.Name, client.Options{})
		require.NoError(t, err)
		assert.Equal(t, want.Range, got.Range, want.Metadata.Name)
		assert.Equal(t, want.Data, got.Data, "the RangeAllocation bytes of %s", want.Metadata.Name)
	}
	l, err := p.client().ListServices(ctx, "", client.Options{})
	require.NoError(t, err)
	assert.Len(t, l.Services, 5000)

	out, errOut, code = rangealloc(t, p.http, "reconcile", "--services", svcFile)
	assert.Equal(t, 0, code, "the imported Services agree with the pools: %s%s", out, errOut)

	// A list without kube-system/kube-dns: its ClusterIP has leaked.
	var list struct {
		Items []map[string]any `json:"items"`
	}
	require.NoError(t, json.Unmarshal(svcs, &list))
	kept := list.Items[:0]
	for _, it := range list.Items {
		if m := it["metadata"].(map[string]any); m["namespace"] != "kube-system" || m["name"] != "kube-dns" {
			kept = append(kept, it)
		}
	}
	require.Len(t, kept, 4999)
	data, err := json.Marshal(map[string]any{"kind": "List", "items": kept})
	require.NoError(t, err)
	partial := filepath.Join(dir, "partial.json")
	require.NoError(t, os.WriteFile(partial, data, 0o600))
	out, errOut, code = rangealloc(t, p.http, "reconcile", "--services", partial)
	assert.Equal(t, 3, code, "%s%s", out, errOut)
	assert.Regexp(t, `leak\s+clusterip-ipv4\s+10.96.0.10\s+<none>\s+services/kube-system/kube-dns\s`, out)
	out, errOut, code = rangealloc(t, p.http, "reconcile", "--services", partial, "--fence", strconv.FormatUint(res.Revision-1, 10))
	assert.Equal(t, 0, code, "a fence before the import: nothing the import allocated is a leak: %s%s", out, errOut)
	_, errOut, code = rangealloc(t, p.http, "reconcile", "--services", partial, "--repair")
	assert.Equal(t, 1, code)
	assert.Contains(t, errOut, "needs --fence")
	out, errOut, code = rangealloc(t, p.http, "reconcile", "--services", partial, "--repair", "--fence", strconv.FormatUint(res.Revision, 10))
	assert.Equal(t, 0, code, "the leak is released: %s%s", out, errOut)
	_, _, err = p.client().Get(ctx, "clusterip-ipv4", "10.96.0.10", client.Options{})
	require.Error(t, err, "10.96.0.10 is free again")
}
