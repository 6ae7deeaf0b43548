package rangealloc_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"net/http/httptest"
	"os/exec"
	"regexp"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/rangealloc/rangealloc"
	"github.com/rangealloc/rangealloc/api/client"
)

var (
	_ rangealloc.Allocator = (*rangealloc.Node)(nil)
	_ rangealloc.Allocator = (*client.Remote)(nil)
)

// program runs calls a control plane makes against a, and writes down what
// each answered: values, or the error's code and its details, each with
// its Go type.
// Values the pool draws are written as their band, so two clusters of
// the same config give the same transcript.
func program(ctx context.Context, a rangealloc.Allocator) []string {
	var out []string
	note := func(call string, v any, err error) {
		var e *rangealloc.Error
		switch {
		case err == nil:
			out = append(out, fmt.Sprintf("%s = %v", call, v))
		case errors.As(err, &e):
			var keys []string
			for k, v := range e.Details {
				keys = append(keys, fmt.Sprintf("%s=%v(%T)", k, v, v))
			}
			sort.Strings(keys)
			out = append(out, fmt.Sprintf("%s: %s %v", call, e.Code, keys))
		default:
			out = append(out, fmt.Sprintf("%s: not an *Error: %v", call, err))
		}
	}
	if err := a.Ready(ctx); err != nil {
		return append(out, "Ready: "+err.Error())
	}
	al, err := a.Allocate(ctx, "clusterip-ipv4", "10.96.0.10", "kube-system/dns")
	note("Allocate(10.96.0.10)", []string{al.Value, al.Owner, al.Band, al.Mode}, err)
	al, err = a.Allocate(ctx, "clusterip-ipv4", "10.96.0.10", "default/web")
	note("Allocate(10.96.0.10) again", al, err)
	al, err = a.Allocate(ctx, "nodeport", "", "default/web", rangealloc.WithIdempotencyKey("web-port"))
	note("Allocate(nodeport)", al.Band, err)
	again, err := a.Allocate(ctx, "nodeport", "", "default/web", rangealloc.WithIdempotencyKey("web-port"))
	note("Allocate(nodeport) retried", again.Value == al.Value, err)
	_, err = a.Allocate(ctx, "nodeport", "29999", "default/web")
	note("Allocate(29999)", nil, err)
	_, err = a.Allocate(ctx, "no-such-pool", "", "default/web")
	note("Allocate(no-such-pool)", nil, err)
	_, err = a.AllocateN(ctx, "nodeport", "default/batch", 0)
	note("AllocateN(0)", nil, err)
	as, err := a.AllocateN(ctx, "nodeport", "default/batch", 3)
	note("AllocateN(3)", len(as), err)
	res, err := a.Txn(ctx, []rangealloc.TxnOp{{Op: "allocate", Pool: "nodeport", Value: "30100", Owner: "default/t"}, {Op: "swap", Pool: "nodeport"}})
	note("Txn(bad op)", res, err)
	res, err = a.Txn(ctx, []rangealloc.TxnOp{{Op: "allocate", Pool: "nodeport", Value: "30100", Owner: "default/t"}, {Op: "release", Pool: "clusterip-ipv4", Value: "10.96.0.10", Owner: "default/t"}})
	note("Txn(wrong owner)", res, err)
	err = a.Release(ctx, "clusterip-ipv4", "10.96.0.10", "default/web")
	note("Release(other owner)", nil, err)
	got, err := a.Get(ctx, "clusterip-ipv4", "10.96.0.10")
	note("Get", got.Owner, err)
	got, err = a.Get(ctx, "clusterip-ipv4", "10.96.0.10", rangealloc.WithConsistency(rangealloc.Stale))
	note("Get(stale)", got.Owner, err)
	_, err = a.Get(ctx, "clusterip-ipv4", "10.96.0.11")
	note("Get(free)", nil, err)
	list, err := a.List(ctx, "nodeport", "default/batch")
	note("List(batch)", len(list), err)
	p, err := a.Pool(ctx, "nodeport")
	note("Pool(nodeport)", []any{p.Range, p.Used, p.Static.Size}, err)
	ps, err := a.Pools(ctx)
	note("Pools", len(ps), err)
	p, err = a.CreatePool(ctx, "extra", "40000-40099")
	note("CreatePool", []any{p.Name, p.Size}, err)
	_, err = a.CreatePool(ctx, "overlap", "30000-30010")
	note("CreatePool(overlap)", nil, err)
	note("DeletePool", nil, a.DeletePool(ctx, "extra"))
	svc, err := a.PutService(ctx, rangealloc.Service{Namespace: "default", Name: "web", Type: "NodePort", ClusterIP: "10.96.0.20",
		Ports: []rangealloc.ServicePort{{Protocol: "TCP", Port: 80, NodePort: 30080}}})
	note("PutService", []any{svc.ClusterIPs, svc.Ports[0].NodePort}, err)
	_, err = a.PutService(ctx, rangealloc.Service{Namespace: "default", Name: "bad", Type: "NodePort",
		Ports: []rangealloc.ServicePort{{Protocol: "TCP", Port: 80, NodePort: 30080}}}, rangealloc.WithDryRun())
	note("PutService(taken port, dry run)", nil, err)
	err = a.Release(ctx, "nodeport", "30080", "")
	note("Release(Service's port)", nil, err)
	svc, err = a.Service(ctx, "default", "web")
	note("Service", svc.Type, err)
	sl, err := a.Services(ctx, "")
	note("Services", len(sl.Services), err)
	svc, err = a.DeleteService(ctx, "default", "web")
	note("DeleteService", svc.Name, err)
	_, err = a.Service(ctx, "default", "web")
	note("Service(deleted)", nil, err)
	sn, err := a.ServiceNetwork(ctx)
	note("ServiceNetwork", []any{sn.IPFamilies, sn.Pools, sn.NodePortPool}, err)
	_, err = a.SetServiceNetwork(ctx, rangealloc.ServiceNetwork{IPFamilies: []string{"IPv4"}, Pools: map[string]string{"IPv5": "x"}})
	note("SetServiceNetwork(bad family)", nil, err)
	st, err := a.Cluster(ctx)
	note("Cluster", len(st.Members), err)
	note("RemoveMember(unknown)", nil, a.RemoveMember(ctx, "nobody"))
	var buf bytes.Buffer
	note("Backup", nil, a.Backup(ctx, &buf))
	note("Restore(garbage)", nil, a.Restore(ctx, strings.NewReader("not a backup")))
	note("Restore(backup)", nil, a.Restore(ctx, &buf))
	got, err = a.Get(ctx, "clusterip-ipv4", "10.96.0.10")
	note("Get after restore", got.Owner, err)
	// Empty names, which a path cannot carry.
	_, err = a.Get(ctx, "", "10.96.0.10")
	note("Get(no pool)", nil, err)
	_, err = a.Get(ctx, "clusterip-ipv4", "")
	note("Get(no value)", nil, err)
	note("Release(no pool)", nil, a.Release(ctx, "", "10.96.0.10", ""))
	note("Release(no value)", nil, a.Release(ctx, "clusterip-ipv4", "", ""))
	note("Release(no pool, no value)", nil, a.Release(ctx, "", "", ""))
	_, err = a.Get(ctx, "no-such-pool", "")
	note("Get(unknown pool, no value)", nil, err)
	_, err = a.List(ctx, "", "")
	note("List(no pool)", nil, err)
	_, err = a.Pool(ctx, "")
	note("Pool(no name)", nil, err)
	_, err = a.CreatePool(ctx, "", "40000-40099")
	note("CreatePool(no name)", nil, err)
	note("DeletePool(no name)", nil, a.DeletePool(ctx, ""))
	_, err = a.Service(ctx, "", "web")
	note("Service(no namespace)", nil, err)
	_, err = a.Service(ctx, "default", "")
	note("Service(no name)", nil, err)
	_, err = a.DeleteService(ctx, "default", "")
	note("DeleteService(no name)", nil, err)
	_, err = a.PutService(ctx, rangealloc.Service{Namespace: "default", Type: "ClusterIP", Ports: []rangealloc.ServicePort{{Protocol: "TCP", Port: 80}}})
	note("PutService(no name)", nil, err)
	_, err = a.PutService(ctx, rangealloc.Service{Name: "web", Type: "ClusterIP", Ports: []rangealloc.ServicePort{{Protocol: "TCP", Port: 80}}})
	note("PutService(no namespace)", nil, err)
	note("RemoveMember(no ID)", nil, a.RemoveMember(ctx, ""))
	_, err = a.Allocate(ctx, "", "", "o")
	note("Allocate(no pool)", nil, err)
	return out
}

// TestOneInterfaceTwoTransports runs the same program against a node in
// process and, through the HTTP client, against a node of the same config
// in another cluster: the transcripts, errors included, are the same.
func TestOneInterfaceTwoTransports(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	local, err := openCluster(t, ctx, clusterConfigs(t, 1))
	require.NoError(t, err)
	served, err := openCluster(t, ctx, clusterConfigs(t, 1))
	require.NoError(t, err)
	srv := httptest.NewServer(served[0].Handler())
	defer srv.Close()
	remote := client.NewRemote(srv.URL, nil)
	defer remote.Close()

	in, over := program(ctx, local[0]), program(ctx, remote)
	require.Equal(t, in, over, "the same program in process and over HTTP")
	t.Logf("transcript:\n%s", strings.Join(in, "\n"))
	// The program reaches the failures it means to.
	for _, want := range []string{"AlreadyAllocated [owner=kube-system/dns(string)]", "NotInRange", "PoolNotFound", "InvalidArgument [op=1(int)]",
		"OwnedByService", "ServiceNotFound", "PoolOverlap [pool=nodeport(string)]", "MemberNotFound"} {
		require.Contains(t, strings.Join(in, "\n"), want)
	}
}

// TestGoDocShowsNoInternalType checks that the front door's documentation
// names no type of the packages behind it: a caller needs none of them.
func TestGoDocShowsNoInternalType(t *testing.T) {
	out, err := exec.Command("go", "doc", "-all", ".").CombinedOutput()
	require.NoError(t, err, "go doc -all .: %s", out)
	require.Contains(t, string(out), "func Open(ctx context.Context, cfg Config) (*Node, error)")
	internal := regexp.MustCompile(`\b(fsm|service|node|allocator|snapshot|transport)\.[A-Z]\w*`)
	require.Empty(t, internal.FindAllString(string(out), -1), "go doc -all . names types of internal packages")
}

// TestRemoteUnreachable: a node the client cannot reach answers Unavailable;
// for a write, an unknown outcome with the key to retry under, as a node
// in process answers a write whose answer it lost.
func TestRemoteUnreachable(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	r := client.NewRemote("http://127.0.0.1:1", nil)
	_, err := r.Allocate(ctx, "nodeport", "", "default/web")
	require.ErrorIs(t, err, rangealloc.ErrOutcomeUnknown)
	var e *rangealloc.Error
	require.ErrorAs(t, err, &e)
	require.NotEmpty(t, e.Details["idempotencyKey"], "the key drawn for the write")
	_, err = r.Allocate(ctx, "nodeport", "", "default/web", rangealloc.WithIdempotencyKey("web-port"))
	require.ErrorAs(t, err, &e)
	require.Equal(t, "web-port", e.Details["idempotencyKey"], "the caller's key")
	_, err = r.Get(ctx, "nodeport", "30000")
	require.ErrorIs(t, err, rangealloc.ErrUnavailable)
	require.NotErrorIs(t, err, rangealloc.ErrOutcomeUnknown, "a read applies nothing")
}
