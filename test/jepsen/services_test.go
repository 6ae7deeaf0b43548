package jepsen

import (
	"context"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/rangealloc/rangealloc/api/client"
	"github.com/rangealloc/rangealloc/api/types"
	"github.com/rangealloc/rangealloc/test/checker"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestServiceHolds checks which values a Service names.
func TestServiceHolds(t *testing.T) {
	ps := DefaultPools()
	cases := []struct {
		name string
		svc  types.Service
		want []string
	}{
		{name: "none", svc: types.Service{Type: "ClusterIP", ClusterIP: "None"}},
		{name: "clusterIP only", svc: types.Service{ClusterIP: "10.96.0.3"}, want: []string{"clusterip-ipv4=10.96.0.3"}},
		{name: "a shared nodePort once, the health check port", svc: types.Service{Type: "NodePort", ClusterIPs: []string{"10.96.0.3"},
			Ports: []types.ServicePort{{Port: 80, NodePort: 30002}, {Port: 80, Protocol: "UDP", NodePort: 30002}}, HealthCheckNodePort: 30010},
			want: []string{"clusterip-ipv4=10.96.0.3", "nodeport=30002", "nodeport=30010"}},
	}
	for _, c := range cases {
		assert.Equal(t, c.want, ServiceHolds(ps, c.svc), c.name)
	}
	sp := ServicePools()
	assert.Equal(t, []string{"30000", "30007"}, []string{sp.PortValues[0], sp.PortValues[len(sp.PortValues)-1]}, "ServicePools' ports")
	assert.Equal(t, "30000-30007", sp.PortRange)
}

// TestNextService draws many Service writes and checks each is one the
// API can take as Kubernetes would: one or two ports with distinct names
// and (port, protocol), nodePorts only on a NodePort Service, a unique
// key, one of the few names; and that every kind of write is drawn.
func TestNextService(t *testing.T) {
	w := &Workload{Pools: DefaultPools()}
	s := &session{id: 3, rng: rand.New(rand.NewPCG(1, 2)), svcs: map[string]types.Service{}}
	keys, kinds := map[string]bool{}, map[string]int{}
	for range 3000 {
		op := w.nextService(s)
		require.False(t, keys[op.Key], "key %s drawn twice", op.Key)
		keys[op.Key] = true
		kinds[op.Kind]++
		require.Contains(t, serviceNames, op.Service)
		if op.Kind == checker.KindServiceDelete {
			require.Nil(t, op.Request)
			delete(s.svcs, op.Service)
			continue
		}
		var req types.Service
		require.NoError(t, json.Unmarshal(op.Request, &req))
		require.Equal(t, op.Service, req.Namespace+"/"+req.Name)
		require.Contains(t, []string{typeClusterIP, typeNodePort}, req.Type)
		require.NotEmpty(t, req.UID)
		require.True(t, len(req.Ports) == 1 || len(req.Ports) == 2, "%s: %d ports", op.Key, len(req.Ports))
		if len(req.Ports) == 2 {
			a, b := req.Ports[0], req.Ports[1]
			require.NotEqual(t, a.Name, b.Name, "%s: port names", op.Key)
			require.False(t, a.Port == b.Port && a.Protocol == b.Protocol, "%s: a port twice", op.Key)
		}
		for _, p := range req.Ports {
			if req.Type == typeClusterIP {
				require.Zero(t, p.NodePort, "%s: a nodePort on a ClusterIP Service", op.Key)
			}
		}
		// As if the server stored it: the next update starts from it.
		s.svcs[op.Service] = req
	}
	for _, k := range []string{checker.KindServiceCreate, checker.KindServiceUpdate, checker.KindServiceDelete} {
		assert.Greater(t, kinds[k], 300, "%s drawn %d times of 3000", k, kinds[k])
	}
}

// fakeServices is an in-memory stand-in for the Services API, for the
// workload and the end-of-run reads: enough of the semantics to be a
// good run (values allocated and released with the Service, requested
// values refused when taken, idempotency keys), with one answer in five
// lost after the write was applied (503), and a bug to switch on.
type fakeServices struct {
	ps PoolSet
	// leakOnDelete keeps a deleted Service's nodePorts held: orphans.
	leakOnDelete bool

	mu       sync.Mutex
	rng      *rand.Rand
	rev      uint64
	services map[string]types.Service
	pools    map[string]map[string]string
	answers  map[string][]byte // idempotency key -> status and body
	statuses map[string]int
}

func newFakeServices(ps PoolSet) *fakeServices {
	return &fakeServices{ps: ps, rng: rand.New(rand.NewPCG(7, 7)), services: map[string]types.Service{},
		pools:   map[string]map[string]string{ps.IPPool: {}, ps.PortPool: {}},
		answers: map[string][]byte{}, statuses: map[string]int{}}
}

func (f *fakeServices) handler() http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("PUT /v1/services/{ns}/{name}", f.write)
	mux.HandleFunc("DELETE /v1/services/{ns}/{name}", f.write)
	mux.HandleFunc("GET /v1/services", func(w http.ResponseWriter, r *http.Request) {
		f.mu.Lock()
		defer f.mu.Unlock()
		list := types.ServiceList{Services: []types.Service{}, Revision: f.rev}
		for _, k := range sortedNames(f.services) {
			list.Services = append(list.Services, f.services[k])
		}
		_ = json.NewEncoder(w).Encode(list)
	})
	mux.HandleFunc("GET /v1/pools/{pool}/allocations", func(w http.ResponseWriter, r *http.Request) {
		f.mu.Lock()
		defer f.mu.Unlock()
		list := types.AllocationList{Allocations: []types.Allocation{}}
		p := r.PathValue("pool")
		for _, v := range sortedNames(f.pools[p]) {
			list.Allocations = append(list.Allocations, types.Allocation{Pool: p, Value: v, Owner: f.pools[p][v]})
		}
		_ = json.NewEncoder(w).Encode(list)
	})
	return mux
}

func sortedNames[V any](m map[string]V) []string {
	var ks []string
	for k := range m {
		ks = append(ks, k)
	}
	slices.Sort(ks)
	return ks
}

func (f *fakeServices) write(w http.ResponseWriter, r *http.Request) {
	f.mu.Lock()
	key := r.Header.Get("Idempotency-Key")
	body, seen := f.answers[key]
	status := f.statuses[key]
	if !seen {
		status, body = f.apply(r)
		f.answers[key], f.statuses[key] = body, status
	}
	lost := f.rng.IntN(5) == 0
	f.mu.Unlock()
	if lost {
		http.Error(w, `{"error":{"code":"Unavailable","message":"lost"}}`, http.StatusServiceUnavailable)
		return
	}
	w.WriteHeader(status)
	_, _ = w.Write(body)
}

func fail(status int, code, field string) (int, []byte) {
	b, _ := json.Marshal(types.ErrorBody{Error: types.ErrorDetail{Code: code, Message: code, Details: map[string]any{"field": field}}})
	return status, b
}

// apply does one write; f.mu is held.
func (f *fakeServices) apply(r *http.Request) (int, []byte) {
	name := r.PathValue("ns") + "/" + r.PathValue("name")
	owner := checker.ServiceOwnerPrefix + name
	old, exists := f.services[name]
	if r.Method == http.MethodDelete {
		if !exists {
			return fail(http.StatusNotFound, checker.CodeServiceNotFound, "")
		}
		f.release(old, f.leakOnDelete)
		delete(f.services, name)
		b, _ := json.Marshal(old)
		return http.StatusOK, b
	}
	var svc types.Service
	if err := json.NewDecoder(r.Body).Decode(&svc); err != nil {
		return fail(http.StatusBadRequest, "InvalidArgument", "")
	}
	if exists && svc.UID == old.UID && svc.ClusterIP == "" {
		svc.ClusterIP = old.ClusterIP
	}
	if exists {
		f.release(old, false)
	}
	undo := func() {
		f.release(svc, false)
		if exists {
			f.hold(old, owner)
		}
	}
	if svc.ClusterIP == "" {
		svc.ClusterIP = f.pick(f.ps.IPPool, f.ps.IPValues, owner)
	} else if _, taken := f.pools[f.ps.IPPool][svc.ClusterIP]; taken {
		svc.ClusterIP = ""
		undo()
		return fail(http.StatusUnprocessableEntity, checker.CodeInvalid, "spec.clusterIPs")
	}
	f.pools[f.ps.IPPool][svc.ClusterIP] = owner
	svc.ClusterIPs = []string{svc.ClusterIP}
	for i := range svc.Ports {
		if svc.Type != typeNodePort {
			continue
		}
		p := &svc.Ports[i]
		if p.NodePort == 0 && exists && svc.UID == old.UID {
			for _, op := range old.Ports {
				if op.Name == p.Name {
					p.NodePort = op.NodePort
				}
			}
		}
		v := fmt.Sprint(p.NodePort)
		switch held := f.pools[f.ps.PortPool][v]; {
		case p.NodePort == 0:
			if v = f.pick(f.ps.PortPool, f.ps.PortValues, owner); v == "" {
				undo()
				return fail(http.StatusConflict, checker.CodeRangeFull, "")
			}
			fmt.Sscan(v, &p.NodePort)
		case held != "" && held != owner:
			p.NodePort = 0
			undo()
			return fail(http.StatusUnprocessableEntity, checker.CodeInvalid, fmt.Sprintf("spec.ports[%d].nodePort", i))
		}
		f.pools[f.ps.PortPool][v] = owner
	}
	f.rev++
	svc.Revision = f.rev
	f.services[name] = svc
	b, _ := json.Marshal(svc)
	if exists && svc.UID == old.UID {
		return http.StatusOK, b
	}
	return http.StatusCreated, b
}

func (f *fakeServices) pick(pool string, values []string, owner string) string {
	for _, v := range values {
		if _, taken := f.pools[pool][v]; !taken {
			f.pools[pool][v] = owner
			return v
		}
	}
	return ""
}

// release frees svc's values (but its nodePorts when keepPorts).
func (f *fakeServices) release(svc types.Service, keepPorts bool) {
	owner := checker.ServiceOwnerPrefix + svc.Namespace + "/" + svc.Name
	for _, hv := range ServiceHolds(f.ps, svc) {
		pool, v, _ := strings.Cut(hv, "=")
		if f.pools[pool][v] == owner && !(keepPorts && pool == f.ps.PortPool) {
			delete(f.pools[pool], v)
		}
	}
}

func (f *fakeServices) hold(svc types.Service, owner string) {
	for _, hv := range ServiceHolds(f.ps, svc) {
		pool, v, _ := strings.Cut(hv, "=")
		f.pools[pool][v] = owner
	}
}

// TestServiceWorkloadOnFake runs the Service workload against the fake
// from three "nodes" and judges the end as a run does: a faithful fake
// passes every check with acknowledged writes of each kind checked; one
// whose deletes leak nodePorts fails with orphans named.
func TestServiceWorkloadOnFake(t *testing.T) {
	for _, leak := range []bool{false, true} {
		t.Run(fmt.Sprintf("leakOnDelete=%v", leak), func(t *testing.T) {
			ps := DefaultPools()
			fake := newFakeServices(ps)
			fake.leakOnDelete = leak
			srv := httptest.NewServer(fake.handler())
			defer srv.Close()
			sec, err := NewSecurity("", true)
			require.NoError(t, err)
			start := time.Now()
			w := &Workload{Addrs: []string{srv.URL, srv.URL, srv.URL}, Sec: sec, Pools: ps, Clients: 6, Seed: 5, Services: true,
				OpTimeout: time.Second, ImpatientTimeout: time.Second, ReadTimeout: time.Second,
				Now: func() int64 { return int64(time.Since(start)) }}
			ctx, cancel := context.WithTimeout(context.Background(), 700*time.Millisecond)
			defer cancel()
			h := w.Run(ctx)

			c := &Cluster{}
			for i := range 3 {
				c.Servers = append(c.Servers, &Server{ID: fmt.Sprintf("n%d", i+1)})
				c.ctl = append(c.ctl, client.New(srv.URL, http.DefaultClient))
			}
			reports, err := checkServices(context.Background(), c, 0, ps, h)
			require.NoError(t, err)
			counts := checker.ServiceCounts(h)
			t.Logf("%s", ServiceSummary(h))
			for _, k := range []string{checker.KindServiceCreate, checker.KindServiceUpdate, checker.KindServiceDelete} {
				assert.Positive(t, counts[k+" ok"], "acknowledged %ss", k)
			}
			assert.Positive(t, counts[checker.KindServiceUpdate+" "+checker.CodeInvalid]+counts[checker.KindServiceCreate+" "+checker.CodeInvalid], "taken values requested")
			byName := map[string]checker.Report{}
			for _, r := range reports {
				byName[r.Name] = r
				t.Logf("%s", r)
			}
			assert.Positive(t, byName["acknowledged Service writes"].Checked, "Services decided by a last write")
			assert.True(t, byName["replicas agree on Services"].OK)
			assert.True(t, byName["no allocation outside a Service"].OK)
			state := byName["services hold their values"]
			if !leak {
				assert.True(t, state.OK, "%v", state.Problems)
				assert.True(t, byName["acknowledged Service writes"].OK, "%v", byName["acknowledged Service writes"].Problems)
				return
			}
			require.False(t, state.OK, "leaked nodePorts are orphans")
			assert.Contains(t, state.Problems[0], "orphan: nodeport 300")
		})
	}
}
