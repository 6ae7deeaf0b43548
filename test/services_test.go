package test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strconv"
	"testing"
	"time"

	"github.com/hashicorp/raft"
	"github.com/rangealloc/rangealloc/api"
	"github.com/rangealloc/rangealloc/api/client"
	"github.com/rangealloc/rangealloc/api/types"
	"github.com/rangealloc/rangealloc/fsm"
	"github.com/rangealloc/rangealloc/node"
	"github.com/rangealloc/rangealloc/service"
	"github.com/rangealloc/rangealloc/test/cluster"
	"github.com/stretchr/testify/require"
)

// servicePools is a dual-stack service network with small ranges.
var servicePools = []node.PoolSpec{
	{Name: "clusterip-ipv4", Range: "10.96.0.0/24"},
	{Name: "clusterip-ipv6", Range: "fd00::/120"},
	{Name: "nodeport", Range: "30000-30099"},
}

// serviceCluster starts n nodes with the dual-stack service network and
// an API server on each; it returns a client per node.
func serviceCluster(t *testing.T, n int, tune ...func(*node.Config)) (*cluster.Cluster, []*client.Client) {
	c := cluster.New(t, n, cluster.Options{Pools: servicePools, Tune: func(cfg *node.Config) {
		cfg.ServiceNetwork = &fsm.ServiceNetwork{Families: []service.Family{service.IPv4, service.IPv6},
			IPv4Pool: "clusterip-ipv4", IPv6Pool: "clusterip-ipv6", NodePortPool: "nodeport"}
		for _, f := range tune {
			f(cfg)
		}
	}})
	var clients []*client.Client
	for _, m := range c.Members {
		srv := httptest.NewServer(api.NewServer(m.Node, api.Options{}))
		t.Cleanup(srv.Close)
		clients = append(clients, client.New(srv.URL, nil))
	}
	ctx := context.Background()
	require.Eventually(t, func() bool {
		sn, err := clients[0].ServiceNetwork(ctx, client.Options{})
		return err == nil && len(sn.IPFamilies) == 2
	}, 10*time.Second, 20*time.Millisecond, "the leader sets the configured service network")
	// A new cluster starts at feature level 1, and its first leader raises
	// it after the service network: the tests are of the raised level's
	// rules, which every node decides by the level it applied.
	level := fsm.MaxFeatureLevel
	if l := c.Config(0).MaxFeatureLevel; l > 0 {
		level = l
	}
	require.Eventually(t, func() bool {
		for _, m := range c.Members {
			if m.Node.LocalState().FeatureLevel() != level {
				return false
			}
		}
		return true
	}, 10*time.Second, 20*time.Millisecond, "every node applied feature level %d", level)
	return c, clients
}

func apiErr(t *testing.T, err error) *client.Error {
	t.Helper()
	var ae *client.Error
	require.True(t, errors.As(err, &ae), "want an API error, got %v", err)
	return ae
}

func TestServicesOverHTTP(t *testing.T) {
	t.Parallel()
	c, cl := serviceCluster(t, 3)
	ctx := context.Background()
	follower := cl[0]
	if c.Leader().Index == 0 {
		follower = cl[1]
	}
	dual := "RequireDualStack"
	svc := types.Service{Namespace: "default", Name: "web", Type: "NodePort", IPFamilyPolicy: dual,
		Ports: []types.ServicePort{{Name: "http", Port: 80}, {Name: "dns", Protocol: "UDP", Port: 53}, {Name: "dns-tcp", Protocol: "TCP", Port: 53}}}

	// Create through a follower: 201, every value filled in.
	got, created, err := follower.PutService(ctx, svc, client.ServiceOptions{})
	require.NoError(t, err)
	require.True(t, created)
	require.Len(t, got.ClusterIPs, 2)
	require.Equal(t, got.ClusterIPs[0], got.ClusterIP)
	require.Equal(t, []string{"IPv4", "IPv6"}, got.IPFamilies)
	require.NotZero(t, got.Ports[0].NodePort)
	require.NotZero(t, got.Ports[1].NodePort)
	require.Equal(t, got.Ports[1].NodePort, got.Ports[2].NodePort, "TCP and UDP of one port number share a nodePort")
	require.NotZero(t, got.Revision)
	a, _, err := cl[2].Get(ctx, "nodeport", fmt.Sprint(got.Ports[0].NodePort), client.Options{})
	require.NoError(t, err)
	require.Equal(t, "services/default/web", a.Owner)

	// The same PUT: 200, the stored object, the same revision.
	same, created, err := cl[2].PutService(ctx, svc, client.ServiceOptions{})
	require.NoError(t, err)
	require.False(t, created)
	require.Equal(t, got, same)

	// A plain release is OwnedByService, also in a txn; force releases.
	np := fmt.Sprint(got.Ports[0].NodePort)
	_, err = follower.Release(ctx, "nodeport", np, "", client.Options{})
	require.Equal(t, "OwnedByService", apiErr(t, err).Code)
	require.Equal(t, http.StatusConflict, apiErr(t, err).Status)
	_, err = follower.Txn(ctx, []types.TxnOp{{Op: "release", Pool: "clusterip-ipv4", Value: got.ClusterIPs[0]}}, client.Options{})
	require.Equal(t, "OwnedByService", apiErr(t, err).Code)
	_, _, err = follower.Allocate(ctx, "nodeport", "", "services/default/web", client.Options{})
	require.Equal(t, "InvalidArgument", apiErr(t, err).Code, "plain allocations may not take a Service's owner")

	// A taken requested value: 422 Invalid with the field.
	// (A dynamic pick: a named port could be one "web" holds already.)
	other, _, err := follower.Allocate(ctx, "nodeport", "", "other", client.Options{})
	require.NoError(t, err)
	otherPort, err := strconv.Atoi(other.Value)
	require.NoError(t, err)
	bad := types.Service{Namespace: "default", Name: "taken", Type: "NodePort", Ports: []types.ServicePort{{Port: 80}, {Port: 81, NodePort: int32(otherPort)}}}
	_, _, err = follower.PutService(ctx, bad, client.ServiceOptions{})
	ae := apiErr(t, err)
	require.Equal(t, http.StatusUnprocessableEntity, ae.Status)
	require.Equal(t, "Invalid", ae.Code)
	require.Equal(t, "spec.ports[1].nodePort", ae.Details["field"])
	require.Equal(t, fmt.Sprintf(`Service "taken" is invalid: spec.ports[1].nodePort: Invalid value: %d: provided port is already allocated`, otherPort), ae.Message)

	// A dry run answers 201 and changes nothing.
	dry, created, err := follower.PutService(ctx, types.Service{Namespace: "default", Name: "dry", Type: "NodePort", Ports: []types.ServicePort{{Port: 80}}}, client.ServiceOptions{DryRun: true})
	require.NoError(t, err)
	require.True(t, created)
	require.NotZero(t, dry.Ports[0].NodePort)
	_, err = follower.GetService(ctx, "default", "dry", client.Options{})
	require.Equal(t, "ServiceNotFound", apiErr(t, err).Code)

	// Type change to ClusterIP releases the node ports in the same entry.
	ci := svc
	ci.Type = "ClusterIP"
	upd, created, err := follower.PutService(ctx, ci, client.ServiceOptions{})
	require.NoError(t, err)
	require.False(t, created)
	require.Equal(t, got.ClusterIPs, upd.ClusterIPs)
	require.Zero(t, upd.Ports[0].NodePort)
	_, _, err = follower.Get(ctx, "nodeport", np, client.Options{})
	require.Equal(t, "NotAllocated", apiErr(t, err).Code)

	// The list, sorted, with the revision it was read at.
	_, _, err = follower.PutService(ctx, types.Service{Namespace: "a", Name: "first"}, client.ServiceOptions{})
	require.NoError(t, err)
	list, err := cl[2].ListServices(ctx, "", client.Options{})
	require.NoError(t, err)
	require.Len(t, list.Services, 2)
	require.Equal(t, "a", list.Services[0].Namespace)
	require.NotZero(t, list.Revision)
	only, err := cl[2].ListServices(ctx, "default", client.Options{})
	require.NoError(t, err)
	require.Len(t, only.Services, 1)

	// A listed Service whose clusterIP and clusterIPs disagree is refused,
	// naming it by its index in the list.
	_, err = follower.Reconcile(ctx, types.ReconcileRequest{Fence: list.Revision, Services: []types.Service{list.Services[0],
		{Namespace: "x", Name: "y", ClusterIP: "10.96.0.1", ClusterIPs: []string{"10.96.0.2"}}}}, client.Options{})
	require.Equal(t, "Invalid", apiErr(t, err).Code)
	require.Equal(t, "services[1].spec.clusterIPs", apiErr(t, err).Details["field"])

	// Reconcile the Services against themselves: nothing to report.
	rep, err := follower.Reconcile(ctx, types.ReconcileRequest{Fence: list.Revision, Services: list.Services}, client.Options{})
	require.NoError(t, err)
	require.Empty(t, rep.Findings)
	// Without "a/first" in the list, its IP is a leak; a repair frees it.
	rep, err = follower.Reconcile(ctx, types.ReconcileRequest{Fence: list.Revision, Services: list.Services[1:], Mode: "repair"}, client.Options{})
	require.NoError(t, err)
	require.Len(t, rep.Findings, 1)
	require.Equal(t, "leak", rep.Findings[0].Type)
	require.True(t, rep.Findings[0].Repaired)
	_, err = follower.GetService(ctx, "a", "first", client.Options{})
	require.Equal(t, "ServiceNotFound", apiErr(t, err).Code, "a record whose values all leaked is removed with them")

	// Delete: 200 with the removed object; its values are free; then 404.
	del, err := follower.DeleteService(ctx, "default", "web", client.ServiceOptions{})
	require.NoError(t, err)
	require.Equal(t, upd.ClusterIPs, del.ClusterIPs)
	_, _, err = follower.Get(ctx, "clusterip-ipv4", got.ClusterIPs[0], client.Options{})
	require.Equal(t, "NotAllocated", apiErr(t, err).Code)
	_, err = follower.DeleteService(ctx, "default", "web", client.ServiceOptions{})
	require.Equal(t, http.StatusNotFound, apiErr(t, err).Status)
	require.Equal(t, "ServiceNotFound", apiErr(t, err).Code)
}

// TestServiceSingularClusterIP: a client that knows only the singular
// clusterIP sends back a dual-stack Service's primary and leaves
// clusterIPs out. From feature level 5 the update keeps both IPs, as
// kube-apiserver does; at level 4 it is refused for dropping the
// secondary, and changes nothing. Both go through a follower.
func TestServiceSingularClusterIP(t *testing.T) {
	t.Parallel()
	for _, level := range []int{4, fsm.MaxFeatureLevel} {
		t.Run(fmt.Sprint("level=", level), func(t *testing.T) {
			c, cl := serviceCluster(t, 3, func(cfg *node.Config) { cfg.MaxFeatureLevel = level })
			ctx := context.Background()
			follower := cl[(c.Leader().Index+1)%len(cl)]
			ports := []types.ServicePort{{Name: "http", Port: 80}}
			svc, _, err := follower.PutService(ctx, types.Service{Namespace: "default", Name: "web",
				IPFamilyPolicy: "RequireDualStack", Ports: ports}, client.ServiceOptions{})
			require.NoError(t, err)
			require.Len(t, svc.ClusterIPs, 2)

			update := types.Service{Namespace: "default", Name: "web", ClusterIP: svc.ClusterIP, Ports: ports}
			got, created, err := follower.PutService(ctx, update, client.ServiceOptions{})
			if level < 5 {
				require.Equal(t, "Invalid", apiErr(t, err).Code)
				require.Equal(t, "spec.ipFamilyPolicy", apiErr(t, err).Details["field"])
			} else {
				require.NoError(t, err)
				require.False(t, created)
				require.Equal(t, svc.ClusterIPs, got.ClusterIPs, "the secondary is kept")
				require.Equal(t, svc.Revision, got.Revision, "a write that changes nothing appends no entry")
			}

			// A singular that disagrees with clusterIPs is refused at every level.
			update.ClusterIPs = []string{svc.ClusterIPs[1]}
			_, _, err = follower.PutService(ctx, update, client.ServiceOptions{})
			require.Equal(t, "Invalid", apiErr(t, err).Code)
			require.Equal(t, "spec.clusterIPs", apiErr(t, err).Details["field"])

			stored, err := cl[c.Leader().Index].GetService(ctx, "default", "web", client.Options{})
			require.NoError(t, err)
			require.Equal(t, svc.ClusterIPs, stored.ClusterIPs)
			require.Equal(t, svc.Revision, stored.Revision)
		})
	}
}

func TestServiceImportKeepsRangeAllocations(t *testing.T) {
	t.Parallel()
	_, cl := serviceCluster(t, 1)
	ctx := context.Background()
	yes := true
	svcs := []types.Service{
		{Namespace: "default", Name: "kubernetes", ClusterIP: "10.96.0.1", Ports: []types.ServicePort{{Port: 443}}},
		{Namespace: "kube-system", Name: "dns", ClusterIPs: []string{"10.96.0.10", "fd00::a"}, IPFamilies: []string{"IPv4", "IPv6"}, IPFamilyPolicy: "PreferDualStack"},
		{Namespace: "web", Name: "lb", Type: "LoadBalancer", ClusterIP: "10.96.0.77", ExternalTrafficPolicy: "Local", HealthCheckNodePort: 30090,
			Ports: []types.ServicePort{{Port: 80, NodePort: 30080}}, AllocateLoadBalancerNodePorts: &yes},
	}
	// The source cluster's bitmaps: the Services' values, and 10.96.0.200,
	// held by no Service there.
	ipv4 := fsmBitmap(t, "10.96.0.0/24", "10.96.0.1", "10.96.0.10", "10.96.0.77", "10.96.0.200")
	ports := fsmBitmap(t, "30000-30099", "30080", "30090")
	res, err := cl[0].Import(ctx, types.ImportRequest{Services: svcs, RangeAllocations: []types.RangeAllocation{
		{Range: "10.96.0.0/24", Data: ipv4}, {Range: "30000-30099", Data: ports}}}, client.Options{})
	require.NoError(t, err)
	require.Equal(t, 3, res.Services)
	require.Equal(t, 7, res.Values) // 6 named by the Services, and 10.96.0.200
	for pool, want := range map[string][]byte{"clusterip-ipv4": ipv4, "nodeport": ports} {
		ra, err := cl[0].RangeAllocation(ctx, pool, client.Options{})
		require.NoError(t, err)
		require.Equal(t, want, ra.Data, pool)
	}
	a, _, err := cl[0].Get(ctx, "clusterip-ipv4", "10.96.0.200", client.Options{})
	require.NoError(t, err)
	require.Equal(t, "import", a.Owner)
	dns, err := cl[0].GetService(ctx, "kube-system", "dns", client.Options{})
	require.NoError(t, err)
	require.Equal(t, []string{"10.96.0.10", "fd00::a"}, dns.ClusterIPs)

	// Importing again is all or nothing: the first Service exists.
	_, err = cl[0].Import(ctx, types.ImportRequest{Services: svcs[:1]}, client.Options{})
	require.Equal(t, "InvalidArgument", apiErr(t, err).Code)
	b, _ := json.Marshal(apiErr(t, err).Details)
	require.Contains(t, string(b), `"op":0`)
}

// fsmBitmap returns the RangeAllocation bytes of values in rng.
func fsmBitmap(t *testing.T, rng string, values ...string) []byte {
	f := fsm.New(nil)
	reqs := []*fsm.Request{{Kind: fsm.KindCreatePool, Pool: "p", Range: rng}}
	for _, v := range values {
		reqs = append(reqs, &fsm.Request{Kind: fsm.KindTxn, Ops: []fsm.Op{{Kind: fsm.OpAllocate, Pool: "p", Value: v}}})
	}
	resp := f.Apply(&raft.Log{Index: 1, Type: raft.LogCommand, Data: fsm.EncodeBatch(reqs)}).(*fsm.Response)
	for _, r := range resp.Results {
		require.Nil(t, r.Err)
	}
	_, data, err := f.RangeAllocation("p")
	require.NoError(t, err)
	return data
}
