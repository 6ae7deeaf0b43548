package jepsen

import (
	"context"
	"encoding/json"
	"fmt"
	"maps"
	"slices"
	"strconv"
	"strings"

	"github.com/rangealloc/rangealloc/api/client"
	"github.com/rangealloc/rangealloc/api/types"
	"github.com/rangealloc/rangealloc/test/checker"
)

// The Service workload: the Clients create, update and delete Services
// through random nodes, each write under an idempotency key of its own
// that its retries share. There are few names, so that writes of one
// Service from several clients collide, and few values (ServicePools: 14
// addresses, 8 ports for 8 Services of up to 2 nodePorts), so that
// requested values are taken and dynamic picks find a range full.
//
// Each client remembers the answer of its last acknowledged PUT of each
// Service (session.svcs) and builds its updates from it, though other
// clients may have changed the Service since: a stale update is answered
// 422 (a clusterIP is immutable), or replaces the Service if its uid
// changed meanwhile, as Kubernetes would.

// ServicePools are the pools of a Service run: DefaultPools with 8
// ports, about what the eight Services hold at a time (half of them
// NodePort, of one or two ports), so that dynamic picks find the range
// full now and then.
func ServicePools() PoolSet {
	ps := DefaultPools()
	ps.PortRange, ps.PortValues = "30000-30007", ps.PortValues[:8]
	return ps
}

// serviceNames are the Services the clients write, "<namespace>/<name>".
var serviceNames = []string{"a/web", "a/db", "a/cache", "a/queue", "b/web", "b/db", "b/cache", "b/queue"}

// servicePorts are the port numbers a Service's ports are drawn from.
var servicePorts = []int32{80, 443, 8080, 9090}

// Service types the workload writes.
const (
	typeClusterIP = "ClusterIP"
	typeNodePort  = "NodePort"
)

// nextService draws a Service write: an update (3 in 5) or a delete of a
// Service the client believes exists, else a create (4 in 5) or a delete
// (which may find it missing). A create of a Service another client made
// replaces it (a new uid).
func (w *Workload) nextService(s *session) checker.Op {
	s.n++
	name := serviceNames[s.rng.IntN(len(serviceNames))]
	op := checker.Op{Client: s.id, Service: name, Key: fmt.Sprintf("c%d-%d", s.id, s.n)}
	cur, known := s.svcs[name]
	r := s.rng.IntN(100)
	var req types.Service
	switch {
	case known && r < 60:
		op.Kind, req = checker.KindServiceUpdate, w.updatedService(s, cur)
	case known || r < 20:
		op.Kind = checker.KindServiceDelete
		return op
	default:
		op.Kind, req = checker.KindServiceCreate, w.newService(s, name)
	}
	body, err := json.Marshal(req)
	if err != nil {
		panic(fmt.Sprintf("jepsen: encode a Service: %v", err)) // a types.Service always encodes
	}
	op.Request = body
	return op
}

// newService draws a new Service named name: ClusterIP or NodePort, one
// or two ports, a requested clusterIP one time in four, a requested
// nodePort on one NodePort Service in three.
func (w *Workload) newService(s *session, name string) types.Service {
	ns, n, _ := strings.Cut(name, "/")
	svc := types.Service{Namespace: ns, Name: n, UID: fmt.Sprintf("u-c%d-%d", s.id, s.n), Type: typeClusterIP}
	if s.rng.IntN(2) == 0 {
		svc.Type = typeNodePort
	}
	for _, i := range s.rng.Perm(len(servicePorts))[:1+s.rng.IntN(2)] {
		svc.Ports = append(svc.Ports, newPort(servicePorts[i], "TCP"))
	}
	if s.rng.IntN(4) == 0 {
		ip := w.Pools.IPValues[s.rng.IntN(len(w.Pools.IPValues))]
		svc.ClusterIP, svc.ClusterIPs = ip, []string{ip}
	}
	if svc.Type == typeNodePort && s.rng.IntN(3) == 0 {
		port, _ := strconv.Atoi(w.Pools.PortValues[s.rng.IntN(len(w.Pools.PortValues))])
		svc.Ports[0].NodePort = int32(port)
	}
	return svc
}

func newPort(port int32, protocol string) types.ServicePort {
	return types.ServicePort{Name: fmt.Sprintf("%s-%d", strings.ToLower(protocol), port), Protocol: protocol, Port: port}
}

// updatedService changes cur, the client's last answer for the Service:
// its type (ClusterIP <-> NodePort) or its ports (one added, or one of two
// removed; an added port may be the UDP twin of the other, which shares
// its nodePort). Three times in four the values are left out, for the
// server to fill from the stored Service; else cur's are sent, which may
// be stale, and every other time the clusterIP goes as the singular field
// alone, as a client that knows nothing of clusterIPs sends it.
func (w *Workload) updatedService(s *session, cur types.Service) types.Service {
	svc := cur
	svc.Revision, svc.AllocateLoadBalancerNodePorts = 0, nil
	svc.Ports = slices.Clone(cur.Ports)
	if s.rng.IntN(4) != 0 {
		svc.ClusterIP, svc.ClusterIPs, svc.HealthCheckNodePort = "", nil, 0
		for i := range svc.Ports {
			svc.Ports[i].NodePort = 0
		}
	} else if s.n%2 == 0 { // not a draw: the seeds' sequences stay as they were
		svc.ClusterIPs = nil
	}
	switch {
	case s.rng.IntN(2) == 0 && svc.Type == typeNodePort:
		svc.Type, svc.ExternalTrafficPolicy = typeClusterIP, ""
		for i := range svc.Ports {
			svc.Ports[i].NodePort = 0 // a ClusterIP Service names none
		}
	case s.rng.IntN(2) == 0:
		svc.Type = typeNodePort
	case len(svc.Ports) > 1:
		i := s.rng.IntN(len(svc.Ports))
		svc.Ports = slices.Delete(svc.Ports, i, i+1)
	case len(svc.Ports) == 1 && s.rng.IntN(4) == 0:
		p, twin := svc.Ports[0], "UDP"
		if p.Protocol == "UDP" {
			twin = "TCP"
		}
		svc.Ports = append(svc.Ports, newPort(p.Port, twin))
	default:
		var free []int32
		for _, p := range servicePorts {
			if !slices.ContainsFunc(svc.Ports, func(sp types.ServicePort) bool { return sp.Port == p }) {
				free = append(free, p)
			}
		}
		svc.Ports = append(svc.Ports, newPort(free[s.rng.IntN(len(free))], "TCP"))
	}
	return svc
}

// serviceAttempt sends one attempt of a Service write and, when it is
// acknowledged, records the answer: the values it names and its revision.
func (w *Workload) serviceAttempt(ctx context.Context, c *client.Client, op *checker.Op) error {
	o := client.ServiceOptions{Options: client.Options{IdempotencyKey: op.Key}}
	var out types.Service
	var err error
	switch op.Kind {
	case checker.KindServiceDelete:
		ns, name, _ := strings.Cut(op.Service, "/")
		out, err = c.DeleteService(ctx, ns, name, o)
		op.Result = "deleted"
	default:
		var req types.Service
		if err := json.Unmarshal(op.Request, &req); err != nil {
			return fmt.Errorf("decode the request of %s: %w", op.Key, err)
		}
		var created bool
		out, created, err = c.PutService(ctx, req, o)
		op.Result = map[bool]string{true: "created", false: "updated"}[created]
	}
	if err != nil {
		return err
	}
	op.Holds, op.Revision = ServiceHolds(w.Pools, out), out.Revision
	op.Answer, _ = json.Marshal(out)
	return nil
}

// learn keeps s.svcs in step with a Service write's answer.
func (s *session) learn(op checker.Op) {
	if !checker.IsServiceKind(op.Kind) {
		return
	}
	switch {
	case op.Outcome == checker.OK && op.Kind != checker.KindServiceDelete:
		var svc types.Service
		if json.Unmarshal(op.Answer, &svc) == nil {
			s.svcs[op.Service] = svc
		}
	case op.Outcome == checker.OK, op.Err == checker.CodeServiceNotFound:
		delete(s.svcs, op.Service)
	case op.Err == checker.CodeInvalid && op.Kind == checker.KindServiceUpdate:
		delete(s.svcs, op.Service) // maybe stale: create it afresh next time
	}
}

// ServiceHolds returns the values svc names, each checker.HoldsValue,
// sorted and without repeats: its clusterIPs in the IP pool (the
// service network of a run names the pools of ps), its nodePorts and
// healthCheckNodePort in the port pool.
func ServiceHolds(ps PoolSet, svc types.Service) []string {
	set := map[string]bool{}
	ips := svc.ClusterIPs
	if len(ips) == 0 && svc.ClusterIP != "" {
		ips = []string{svc.ClusterIP}
	}
	for _, ip := range ips {
		if ip != "" && ip != "None" {
			set[checker.HoldsValue(ps.IPPool, ip)] = true
		}
	}
	for _, p := range svc.Ports {
		if p.NodePort != 0 {
			set[checker.HoldsValue(ps.PortPool, fmt.Sprint(p.NodePort))] = true
		}
	}
	if svc.HealthCheckNodePort != 0 {
		set[checker.HoldsValue(ps.PortPool, fmt.Sprint(svc.HealthCheckNodePort))] = true
	}
	return slices.Sorted(maps.Keys(set))
}

// ServiceNetwork is the service network of a run: the pools of ps.
func ServiceNetwork(ps PoolSet) types.ServiceNetwork {
	return types.ServiceNetwork{IPFamilies: []string{"IPv4"}, Pools: map[string]string{"IPv4": ps.IPPool}, NodePortPool: ps.PortPool}
}

// EnsureServiceNetwork makes the service network name the pools of ps:
// the servers set it from --service-cidr and --node-port-range when they
// bootstrap; if the leader reports another, it is set with the admin
// token. It says which it did.
func (c *Cluster) EnsureServiceNetwork(ctx context.Context, ps PoolSet) (string, error) {
	l, _, err := c.WaitLeader(ctx)
	if err != nil {
		return "", err
	}
	want := ServiceNetwork(ps)
	got, err := c.ctl[l].ServiceNetwork(ctx, client.Options{})
	if err == nil && slices.Equal(got.IPFamilies, want.IPFamilies) && maps.Equal(got.Pools, want.Pools) && got.NodePortPool == want.NodePortPool {
		return fmt.Sprintf("service network %+v, as bootstrapped", got), nil
	}
	was := fmt.Sprintf("%+v", got)
	if err != nil {
		was = err.Error()
	}
	if _, err := c.admin[l].SetServiceNetwork(ctx, want, client.Options{IdempotencyKey: "jepsen-service-network"}); err != nil {
		return "", fmt.Errorf("set the service network (it was %s): %w", was, err)
	}
	return fmt.Sprintf("service network set to %+v (it was %s)", want, was), nil
}

// ServiceStates reads the Services and the pools of ps: first through
// node via with linearizable reads ("leader"), then from every node with
// consistency=stale. Call it once the replicas converged.
func (c *Cluster) ServiceStates(ctx context.Context, via int, ps PoolSet) ([]checker.ServiceState, error) {
	read := func(i int, name string, o client.Options) (checker.ServiceState, error) {
		st := checker.ServiceState{Node: name, Services: map[string][]string{}, Revisions: map[string]uint64{},
			Pools: map[string]map[string]string{}}
		list, err := c.ctl[i].ListServices(ctx, "", o)
		if err != nil {
			return st, fmt.Errorf("%s: list Services: %w", name, err)
		}
		for _, svc := range list.Services {
			st.Services[svc.Namespace+"/"+svc.Name] = ServiceHolds(ps, svc)
			st.Revisions[svc.Namespace+"/"+svc.Name] = svc.Revision
		}
		for _, p := range ps.Names() {
			as, err := c.ctl[i].ListAll(ctx, p, "", o)
			if err != nil {
				return st, fmt.Errorf("%s: list %s: %w", name, p, err)
			}
			st.Pools[p] = map[string]string{}
			for _, a := range as {
				st.Pools[p][a.Value] = a.Owner
			}
		}
		return st, nil
	}
	leader, err := read(via, "leader "+c.Servers[via].ID, client.Options{})
	if err != nil {
		return nil, err
	}
	states := []checker.ServiceState{leader}
	for i, s := range c.Servers {
		st, err := read(i, s.ID, client.Options{Consistency: "stale"})
		if err != nil {
			return nil, err
		}
		states = append(states, st)
	}
	return states, nil
}

// CheckOnlyServices reports every value of a Service run's final state
// held by an owner other than a Service: the run allocated nothing else.
// Checked counts the values held.
func CheckOnlyServices(st checker.ServiceState) checker.Report {
	r := checker.Report{Name: "no allocation outside a Service", OK: true}
	for _, p := range slices.Sorted(maps.Keys(st.Pools)) {
		for _, v := range slices.Sorted(maps.Keys(st.Pools[p])) {
			r.Checked++
			if owner := st.Pools[p][v]; !strings.HasPrefix(owner, checker.ServiceOwnerPrefix) {
				r.Problems = append(r.Problems, fmt.Sprintf("%s: %s %s is held by %q, which no Service write made", st.Node, p, v, owner))
			}
		}
	}
	r.OK = len(r.Problems) == 0
	return r
}

// checkServices reads the final Services and pools and judges them and
// the history's Service writes (checker.CheckServiceState on the
// leader's read, CheckServiceReplicas over every read, CheckServiceAcks,
// CheckOnlyServices).
func checkServices(ctx context.Context, c *Cluster, leader int, ps PoolSet, h checker.History) ([]checker.Report, error) {
	states, err := c.ServiceStates(ctx, leader, ps)
	if err != nil {
		return nil, err
	}
	final := states[0]
	return []checker.Report{checker.CheckServiceState(final), checker.CheckServiceReplicas(states),
		checker.CheckServiceAcks(h, final), CheckOnlyServices(final)}, nil
}

// ServiceSummary sums up a Service run's writes, logical operations by
// kind and outcome, and the refusals by code.
func ServiceSummary(h checker.History) string {
	c := checker.ServiceCounts(h)
	var b strings.Builder
	for _, k := range []string{checker.KindServiceCreate, checker.KindServiceUpdate, checker.KindServiceDelete} {
		fmt.Fprintf(&b, "%ss: %d ok, %d fail, %d unknown", strings.TrimPrefix(k, "service-"), c[k+" ok"], c[k+" fail"], c[k+" unknown"])
		var codes []string
		for key, n := range c {
			if code, ok := strings.CutPrefix(key, k+" "); ok && code != "ok" && code != "fail" && code != "unknown" {
				codes = append(codes, fmt.Sprintf("%s %d", code, n))
			}
		}
		if slices.Sort(codes); len(codes) > 0 {
			fmt.Fprintf(&b, " (%s)", strings.Join(codes, ", "))
		}
		b.WriteString("; ")
	}
	return strings.TrimSuffix(b.String(), "; ")
}
