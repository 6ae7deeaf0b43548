package fsm

import (
	"bytes"
	"fmt"
	"io"
	"testing"

	"github.com/hashicorp/raft"
	"github.com/rangealloc/rangealloc/service"
	"github.com/rangealloc/rangealloc/snapshot"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// svcFSM is a state machine with a dual-stack service network.
type svcFSM struct {
	t   *testing.T
	f   *FSM
	idx uint64
}

func newSvcFSM(t *testing.T, ipv4, ports string) *svcFSM {
	h := &svcFSM{t: t, f: New(nil)}
	require.Nil(t, h.apply(&Request{Kind: KindCreatePool, Pool: "clusterip-ipv4", Range: ipv4}).Err)
	require.Nil(t, h.apply(&Request{Kind: KindCreatePool, Pool: "clusterip-ipv6", Range: "fd00::/120"}).Err)
	require.Nil(t, h.apply(&Request{Kind: KindCreatePool, Pool: "nodeport", Range: ports}).Err)
	require.Nil(t, h.apply(&Request{Kind: KindSetServiceNetwork, Network: ServiceNetwork{
		Families: []service.Family{service.IPv4, service.IPv6}, IPv4Pool: "clusterip-ipv4", IPv6Pool: "clusterip-ipv6", NodePortPool: "nodeport"}}).Err)
	return h
}

func (h *svcFSM) apply(r *Request) *Result {
	h.idx++
	if r.Seed == 0 {
		r.Seed = h.idx * 7919
	}
	resp := h.f.Apply(&raft.Log{Index: h.idx, Term: 1, Type: raft.LogCommand, Data: EncodeBatch([]*Request{r})}).(*Response)
	return resp.Results[0]
}

func (h *svcFSM) put(s service.Spec) *Result {
	return h.apply(&Request{Kind: KindPutService, Service: &s})
}

func nodePortSpec(ns, name string, ports ...int32) service.Spec {
	s := service.Spec{Namespace: ns, Name: name, Type: service.TypeNodePort}
	for i, p := range ports {
		s.Ports = append(s.Ports, service.Port{Name: string(rune('a' + i)), Port: p})
	}
	return s
}

func TestPutServiceAllocatesInOneEntry(t *testing.T) {
	h := newSvcFSM(t, "10.96.0.0/24", "30000-30099")
	res := h.put(nodePortSpec("default", "web", 80, 443))
	require.Nil(t, res.Err)
	require.True(t, res.Created)
	rec := res.Service
	require.Len(t, rec.Spec.ClusterIPs, 1)
	require.NotZero(t, rec.Spec.Ports[0].NodePort)
	require.NotZero(t, rec.Spec.Ports[1].NodePort)
	require.Equal(t, h.idx, rec.Revision)
	a, err := h.f.Get("clusterip-ipv4", rec.Spec.ClusterIPs[0])
	require.NoError(t, err)
	require.Equal(t, "services/default/web", a.Owner)

	// The same write again changes nothing and keeps the revision.
	again := h.put(nodePortSpec("default", "web", 80, 443))
	require.Nil(t, again.Err)
	require.False(t, again.Created)
	require.Equal(t, rec.Revision, again.Service.Revision)
	require.Equal(t, rec.Spec, again.Service.Spec)

	// A plain release of a Service's value is refused, unless forced.
	np := fmt.Sprint(rec.Spec.Ports[0].NodePort)
	rel := h.apply(&Request{Kind: KindTxn, Ops: []Op{{Kind: OpRelease, Pool: "nodeport", Value: np}}})
	require.Equal(t, CodeOwnedByService, rel.Err.Code)

	// Type change to ClusterIP releases both node ports, keeps the IP.
	ci := h.put(service.Spec{Namespace: "default", Name: "web", Type: service.TypeClusterIP, Ports: []service.Port{{Name: "a", Port: 80}, {Name: "b", Port: 443}}})
	require.Nil(t, ci.Err)
	require.Equal(t, rec.Spec.ClusterIPs, ci.Service.Spec.ClusterIPs)
	_, err = h.f.Get("nodeport", np)
	require.ErrorIs(t, err, &Error{Code: CodeNotAllocated})

	// Delete releases exactly the Service's values.
	del := h.apply(&Request{Kind: KindDeleteService, Service: &service.Spec{Namespace: "default", Name: "web"}})
	require.Nil(t, del.Err)
	_, err = h.f.Get("clusterip-ipv4", rec.Spec.ClusterIPs[0])
	require.ErrorIs(t, err, &Error{Code: CodeNotAllocated})
	gone := h.apply(&Request{Kind: KindDeleteService, Service: &service.Spec{Namespace: "default", Name: "web"}})
	require.Equal(t, CodeServiceNotFound, gone.Err.Code)
}

func TestPutServiceTakenValueIsInvalidAndChangesNothing(t *testing.T) {
	h := newSvcFSM(t, "10.96.0.0/24", "30000-30099")
	require.Nil(t, h.apply(&Request{Kind: KindTxn, Ops: []Op{{Kind: OpAllocate, Pool: "nodeport", Value: "30005", Owner: "someone"}}}).Err)
	before := h.f.Pools()
	s := nodePortSpec("default", "web", 80, 443)
	s.Ports[1].NodePort = 30005
	res := h.put(s)
	require.Equal(t, CodeInvalid, res.Err.Code)
	require.Equal(t, "spec.ports[1].nodePort", res.Err.Field)
	require.Equal(t, `Service "web" is invalid: spec.ports[1].nodePort: Invalid value: 30005: provided port is already allocated`, res.Err.Message)
	require.Equal(t, before, h.f.Pools(), "a refused write leaves no value allocated")
	_, err := h.f.Service("default", "web")
	require.ErrorIs(t, err, &Error{Code: CodeServiceNotFound})
}

func TestDryRunChangesNothing(t *testing.T) {
	h := newSvcFSM(t, "10.96.0.0/24", "30000-30099")
	s := nodePortSpec("default", "web", 80)
	res := h.apply(&Request{Kind: KindPutService, Service: &s, DryRun: true, ID: "k"})
	require.Nil(t, res.Err)
	require.True(t, res.Created)
	require.NotZero(t, res.Service.Spec.Ports[0].NodePort)
	for _, p := range h.f.Pools() {
		require.Zero(t, p.Used, p.Name)
	}
	_, err := h.f.Service("default", "web")
	require.Error(t, err)
	_, remembered := h.f.RequestResult("k")
	require.False(t, remembered)
}

func TestRangeFullNamesTheField(t *testing.T) {
	h := newSvcFSM(t, "10.96.0.0/30", "30000-30001")
	require.Nil(t, h.put(nodePortSpec("default", "a", 80, 81)).Err)
	res := h.put(nodePortSpec("default", "b", 80))
	require.Equal(t, CodeRangeFull, res.Err.Code)
	require.Equal(t, "spec.ports[0].nodePort", res.Err.Field)
}

func TestServicesSurviveSnapshot(t *testing.T) {
	h := newSvcFSM(t, "10.96.0.0/24", "30000-30099")
	require.Nil(t, h.put(nodePortSpec("default", "web", 80, 443)).Err)
	require.Nil(t, h.put(service.Spec{Namespace: "kube-system", Name: "dns", IPFamilyPolicy: service.RequireDualStack}).Err)
	var buf bytes.Buffer
	require.NoError(t, h.f.WriteBackup(&buf))
	g := New(nil)
	require.NoError(t, g.Restore(io.NopCloser(bytes.NewReader(buf.Bytes()))))
	want, _ := h.f.Services("")
	got, _ := g.Services("")
	require.Equal(t, want, got)
	require.Equal(t, h.f.ServiceNetwork(), g.ServiceNetwork())
}

func TestResultWithServiceRoundTrips(t *testing.T) {
	yes := true
	r := &Result{Index: 9, Err: &Error{Code: CodeInvalid, Message: "m", Op: -1, Field: "spec.ports[0].nodePort"},
		Service:  &ServiceRecord{Revision: 4, Spec: service.Spec{Namespace: "a", Name: "b", HasSelector: &yes, Ports: []service.Port{{Name: "x", Protocol: "TCP", Port: 80, NodePort: 30001}}}},
		Findings: []Finding{{Type: FindingLeak, Pool: "p", Value: "v", Owner: "o", Reason: "PortLeaked", Message: "m", Repaired: true}},
		Imported: 3, Count: 5}
	got, err := DecodeResult(EncodeResult(r))
	require.NoError(t, err)
	require.Equal(t, r, got)
	old := &Result{Index: 2, ops: [][]Allocation{{{Pool: "p", Value: "1", Revision: 2}}}}
	got, err = DecodeResult(EncodeResult(old))
	require.NoError(t, err)
	require.Equal(t, old, got)
}

func TestSetServiceNetworkRefusesWhatWouldStrandValues(t *testing.T) {
	h := newSvcFSM(t, "10.96.0.0/24", "30000-30099")
	require.Nil(t, h.apply(&Request{Kind: KindCreatePool, Pool: "other-ports", Range: "31000-31099"}).Err)
	net := h.f.ServiceNetwork()
	set := func(n ServiceNetwork) *Error { return h.apply(&Request{Kind: KindSetServiceNetwork, Network: n}).Err }

	for name, tc := range map[string]struct {
		n    ServiceNetwork
		code Code
		msg  string
	}{
		"no family":       {ServiceNetwork{NodePortPool: "nodeport"}, CodeInvalidArgument, "1 or 2 IP families"},
		"family twice":    {ServiceNetwork{Families: []service.Family{service.IPv4, service.IPv4}, IPv4Pool: "clusterip-ipv4", NodePortPool: "nodeport"}, CodeInvalidArgument, "listed twice"},
		"unknown family":  {ServiceNetwork{Families: []service.Family{"IPv5"}, NodePortPool: "nodeport"}, CodeInvalidArgument, "want IPv4 or IPv6"},
		"missing pool":    {ServiceNetwork{Families: []service.Family{service.IPv4}, IPv4Pool: "nope", NodePortPool: "nodeport"}, CodePoolNotFound, `"nope"`},
		"ports as IPv4":   {ServiceNetwork{Families: []service.Family{service.IPv4}, IPv4Pool: "nodeport", NodePortPool: "nodeport"}, CodeInvalidArgument, "not an IPv4 range"},
		"IPv6 as IPv4":    {ServiceNetwork{Families: []service.Family{service.IPv4}, IPv4Pool: "clusterip-ipv6", NodePortPool: "nodeport"}, CodeInvalidArgument, "not an IPv4 range"},
		"unlisted family": {ServiceNetwork{Families: []service.Family{service.IPv4}, IPv4Pool: "clusterip-ipv4", IPv6Pool: "clusterip-ipv6", NodePortPool: "nodeport"}, CodeInvalidArgument, "not one of the network's families"},
	} {
		err := set(tc.n)
		require.NotNil(t, err, name)
		require.Equal(t, tc.code, err.Code, name)
		require.Contains(t, err.Message, tc.msg, name)
		require.Equal(t, net, h.f.ServiceNetwork(), "%s: a refused network changes nothing", name)
	}

	// With a Service holding node ports, the node-port pool cannot move;
	// the IPv6 family, where it holds nothing, can go.
	require.Nil(t, h.put(nodePortSpec("default", "web", 80)).Err)
	moved := net
	moved.NodePortPool = "other-ports"
	err := set(moved)
	require.NotNil(t, err)
	require.Contains(t, err.Message, `1 Services hold values in pool "nodeport"`)
	v4only := ServiceNetwork{Families: []service.Family{service.IPv4}, IPv4Pool: "clusterip-ipv4", NodePortPool: "nodeport"}
	require.Nil(t, set(v4only))
	require.Equal(t, v4only, h.f.ServiceNetwork())

	// A set-if-unset leaves a set network alone.
	res := h.apply(&Request{Kind: KindSetServiceNetwork, Network: net, IfUnset: true})
	require.Nil(t, res.Err)
	require.False(t, res.Created)
	require.Equal(t, v4only, h.f.ServiceNetwork())
}

func TestRestoreRefusesABadServiceRecord(t *testing.T) {
	h := newSvcFSM(t, "10.96.0.0/24", "30000-30099")
	require.Nil(t, h.put(nodePortSpec("default", "web", 80)).Err)
	ss := h.f.s.export()
	for name, mutate := range map[string]func(*snapshot.State){
		"key not the spec's": func(s *snapshot.State) { s.Services[0].Key = "default/other" },
		"spec undecodable":   func(s *snapshot.State) { s.Services[0].Spec = []byte{0xff} },
		"no node-port pool":  func(s *snapshot.State) { s.Network.NodePortPool = "" },
	} {
		c := *ss
		c.Services = append([]snapshot.Service(nil), ss.Services...)
		n := *ss.Network
		c.Network = &n
		mutate(&c)
		var buf bytes.Buffer
		require.NoError(t, snapshot.Write(&buf, &c), name)
		g := New(nil)
		require.Error(t, g.Restore(io.NopCloser(&buf)), name)
		svcs, _ := g.Services("")
		require.Empty(t, svcs, "%s: a refused snapshot leaves the state as it was", name)
	}
}

// TestRepairKeepsAValueSpelledAnotherWay: a record written after the
// fence keeps its values from a repair, however its writer spelled them.
// Below level 4 the repair compared strings, and freed "fd00::a" that a
// record kept as "fd00::00a", for another owner to take: two owners.
func TestRepairKeepsAValueSpelledAnotherWay(t *testing.T) {
	for _, level := range []uint64{3, 4} {
		for _, ip := range []string{"fd00::a", "fd00::00a"} {
			t.Run(fmt.Sprintf("level=%d/%s", level, ip), func(t *testing.T) {
				h := newSvcFSM(t, "10.96.0.0/24", "30000-30099")
				require.Nil(t, h.apply(&Request{Kind: KindSetFeatureLevel, FeatureLevel: level}).Err)
				s := service.Spec{Namespace: "default", Name: "x", Type: service.TypeClusterIP,
					ClusterIPs: []string{ip}, Ports: []service.Port{{Name: "a", Port: 80}}}
				require.Nil(t, h.put(s).Err)
				fence := h.idx
				s.Ports[0].Name = "b" // the record is rewritten after the fence; its value is not
				up := h.put(s)
				require.Nil(t, up.Err)
				require.Greater(t, up.Service.Revision, fence)
				rep := h.apply(&Request{Kind: KindReconcile, Fence: fence, Repair: true})
				require.Nil(t, rep.Err)
				rec, err := h.f.Service("default", "x")
				require.NoError(t, err)
				require.Equal(t, []string{ip}, rec.Spec.ClusterIPs, "the record is kept")
				a, err := h.f.Get("clusterip-ipv6", "fd00::a")
				if level < 4 && ip != "fd00::a" {
					require.Error(t, err, "below level 4 replicas replay the old rule")
					return
				}
				require.NoError(t, err, "the value the kept record names stays held")
				assert.Equal(t, "services/default/x", a.Owner)
				other := h.apply(&Request{Kind: KindTxn, Ops: []Op{alloc("clusterip-ipv6", "fd00::a", "other")}})
				require.NotNil(t, other.Err, "no second owner")
				assert.Equal(t, CodeAlreadyAllocated, other.Err.Code)
			})
		}
	}
}

// TestDeleteServiceWithoutANetworkPool: from level 4, deleting a Service
// releases its values from the pools that exist though a pool of the
// network is gone (deleted before level 4). Before, it released none, and
// its values stayed held by a Service that no longer existed.
func TestDeleteServiceWithoutANetworkPool(t *testing.T) {
	for _, level := range []uint64{3, 4} {
		t.Run(fmt.Sprint("level=", level), func(t *testing.T) {
			h := newSvcFSM(t, "10.96.0.0/24", "30000-30099")
			require.Nil(t, h.apply(&Request{Kind: KindSetFeatureLevel, FeatureLevel: 3}).Err)
			s := nodePortSpec("default", "web", 80)
			s.IPFamilies = []service.Family{service.IPv4}
			require.Nil(t, h.put(s).Err)
			require.Nil(t, h.apply(&Request{Kind: KindDeletePool, Pool: "clusterip-ipv6"}).Err, "allowed below level 4")
			require.Nil(t, h.apply(&Request{Kind: KindSetFeatureLevel, FeatureLevel: level}).Err)
			del := h.apply(&Request{Kind: KindDeleteService, Service: &service.Spec{Namespace: "default", Name: "web"}})
			require.Nil(t, del.Err)
			_, err := h.f.Service("default", "web")
			require.Error(t, err, "the record is gone")
			used := map[string]int{}
			for _, p := range h.f.Pools() {
				used[p.Name] = p.Used
			}
			if level < 4 {
				assert.Equal(t, map[string]int{"clusterip-ipv4": 1, "nodeport": 1}, used, "below level 4 replicas replay the old rule")
				return
			}
			assert.Equal(t, map[string]int{"clusterip-ipv4": 0, "nodeport": 0}, used, "the Service's clusterIP and nodePort are free")
		})
	}
}

// TestHealthCheckNodePortOutOfRangeIsInvalid: a requested
// healthCheckNodePort outside the range is 422 Invalid naming the field
// from level 4 (400 InvalidArgument before).
func TestHealthCheckNodePortOutOfRangeIsInvalid(t *testing.T) {
	for level, want := range map[uint64]Code{3: CodeInvalidArgument, 4: CodeInvalid} {
		h := newSvcFSM(t, "10.96.0.0/24", "30000-30099")
		require.Nil(t, h.apply(&Request{Kind: KindSetFeatureLevel, FeatureLevel: level}).Err)
		res := h.put(service.Spec{Namespace: "default", Name: "lb", Type: service.TypeLoadBalancer, ExternalTrafficPolicy: "Local",
			Ports: []service.Port{{Name: "a", Port: 80}}, HealthCheckNodePort: 20000})
		require.NotNil(t, res.Err, "level %d", level)
		assert.Equal(t, want, res.Err.Code, "level %d", level)
		assert.Equal(t, "spec.healthCheckNodePort", res.Err.Field)
		assert.Contains(t, res.Err.Message, "failed to allocate requested HealthCheck NodePort 20000")
	}
}
