package fsm

import (
	"bytes"
	"fmt"
	"io"
	"math/rand/v2"
	"sort"
	"strconv"
	"strings"
	"testing"

	"github.com/hashicorp/raft"
	"github.com/rangealloc/rangealloc/service"
	"github.com/stretchr/testify/require"
)

// The pools of the model tests: small enough that requested values
// collide and dynamic picks run out.
const (
	poolV4    = "clusterip-ipv4"
	poolV6    = "clusterip-ipv6"
	poolPorts = "nodeport"
)

// pv is one value of one pool.
type pv struct{ pool, value string }

// namedValues lists the values a completed spec names, written from the
// Kubernetes rules rather than from the planner: clusterIPs unless
// ExternalName or headless, nodePorts for NodePort and LoadBalancer,
// healthCheckNodePort for LoadBalancer with externalTrafficPolicy Local.
func namedValues(s service.Spec) []pv {
	var out []pv
	seen := map[pv]bool{}
	add := func(v pv) {
		if !seen[v] {
			seen[v] = true
			out = append(out, v)
		}
	}
	typ := s.Type
	if typ == "" {
		typ = service.TypeClusterIP
	}
	if typ != service.TypeExternalName && (len(s.ClusterIPs) == 0 || s.ClusterIPs[0] != service.ClusterIPNone) {
		for _, ip := range s.ClusterIPs {
			switch {
			case ip == "":
			case strings.Contains(ip, ":"):
				add(pv{poolV6, ip})
			default:
				add(pv{poolV4, ip})
			}
		}
	}
	if typ == service.TypeNodePort || typ == service.TypeLoadBalancer {
		for _, p := range s.Ports {
			if p.NodePort != 0 {
				add(pv{poolPorts, strconv.Itoa(int(p.NodePort))})
			}
		}
	}
	if typ == service.TypeLoadBalancer && s.ExternalTrafficPolicy == service.TrafficLocal && s.HealthCheckNodePort != 0 {
		add(pv{poolPorts, strconv.Itoa(int(s.HealthCheckNodePort))})
	}
	return out
}

// logged is a state machine that keeps the entries applied to it, so
// that the same log can be replayed on another.
type logged struct {
	f   *FSM
	idx uint64
	log [][]byte
	rng *rand.Rand
}

func newLogged(t testing.TB, rng *rand.Rand, v4, v6, ports string, families ...service.Family) *logged {
	l := &logged{f: New(nil), rng: rng}
	require.Nil(t, l.apply(&Request{Kind: KindCreatePool, Pool: poolV4, Range: v4}).Err)
	require.Nil(t, l.apply(&Request{Kind: KindCreatePool, Pool: poolV6, Range: v6}).Err)
	require.Nil(t, l.apply(&Request{Kind: KindCreatePool, Pool: poolPorts, Range: ports}).Err)
	n := ServiceNetwork{Families: families, NodePortPool: poolPorts}
	for _, f := range families {
		if f == service.IPv4 {
			n.IPv4Pool = poolV4
		} else {
			n.IPv6Pool = poolV6
		}
	}
	require.Nil(t, l.apply(&Request{Kind: KindSetServiceNetwork, Network: n}).Err)
	return l
}

// apply applies r as the next entry, with a random seed unless r has one.
func (l *logged) apply(r *Request) *Result {
	l.idx++
	if r.Seed == 0 {
		r.Seed = l.rng.Uint64() | 1
	}
	data := EncodeBatch([]*Request{r})
	l.log = append(l.log, data)
	return l.f.Apply(&raft.Log{Index: l.idx, Term: 1, Type: raft.LogCommand, Data: data}).(*Response).Results[0]
}

// replay applies l's log to a new state machine.
func (l *logged) replay() *FSM {
	g := New(nil)
	for i, data := range l.log {
		g.Apply(&raft.Log{Index: uint64(i + 1), Term: 1, Type: raft.LogCommand, Data: data})
	}
	return g
}

// fullState is everything a Service write may change: the pools
// (ranges, bitmaps, allocation records) and the Service records.
type fullState struct {
	Pools    map[string]any
	Services []ServiceRecord
	Network  ServiceNetwork
}

func readFull(f *FSM) fullState {
	recs, _ := f.Services("")
	return fullState{Pools: dump(f), Services: recs, Network: f.ServiceNetwork()}
}

// svcModel is what the model test expects of the state machine: the
// Service records that exist, and for each the values a forced release
// took from it while its record still names them.
type svcModel struct {
	t      *testing.T
	rng    *rand.Rand
	l      *logged
	recs   map[string]ServiceRecord
	uids   map[string]string
	forced map[string]map[pv]bool
	nuid   int
	codes  map[string]int // outcomes seen, for the coverage check
}

var (
	modelNamespaces = []string{"ns1", "ns2"}
	modelNames      = []string{"a", "b", "c", "d", "e", "f"}
)

func (m *svcModel) randomKey() (string, string) {
	return modelNamespaces[m.rng.IntN(len(modelNamespaces))], modelNames[m.rng.IntN(len(modelNames))]
}

func pick[T any](rng *rand.Rand, xs ...T) T { return xs[rng.IntN(len(xs))] }

// randomSpec returns a spec for ns/name: a fresh one, or the stored
// record with one field changed.
func (m *svcModel) randomSpec(ns, name string) service.Spec {
	rng := m.rng
	key := ns + "/" + name
	var s service.Spec
	if rec, ok := m.recs[key]; ok && rng.IntN(5) < 2 {
		s = cloneSpec(rec.Spec)
		m.mutate(&s)
	} else {
		s = m.freshSpec(ns, name)
	}
	switch r := rng.IntN(20); {
	case r < 3:
		m.nuid++
		s.UID = fmt.Sprintf("uid-%d", m.nuid)
	case r < 10:
		s.UID = m.uids[key]
	case r < 14:
		s.UID = ""
	}
	return s
}

func (m *svcModel) freshSpec(ns, name string) service.Spec {
	rng := m.rng
	s := service.Spec{Namespace: ns, Name: name, Type: pick(rng,
		service.TypeClusterIP, service.TypeClusterIP, service.TypeNodePort, service.TypeNodePort,
		service.TypeNodePort, service.TypeLoadBalancer, service.TypeLoadBalancer, service.TypeExternalName)}
	for i := range 1 + rng.IntN(3) {
		p := service.Port{Name: fmt.Sprintf("p%d", i), Protocol: pick(rng, "", service.ProtocolTCP, service.ProtocolUDP),
			Port: pick[int32](rng, 53, 80, 443)}
		if rng.IntN(4) == 0 && s.Type != service.TypeClusterIP || rng.IntN(40) == 0 {
			p.NodePort = 29998 + rng.Int32N(20) // 30000-30015 is the range
		}
		s.Ports = append(s.Ports, p)
	}
	switch r := rng.IntN(10); {
	case r == 0 && s.Type == service.TypeClusterIP:
		s.ClusterIPs = []string{service.ClusterIPNone}
	case r < 3:
		v4 := fmt.Sprintf("10.96.0.%d", rng.IntN(18)) // /28: 0-15
		v6 := fmt.Sprintf("fd00::%x", rng.IntN(18))
		s.ClusterIPs = pick(rng, []string{v4}, []string{v6}, []string{v4, v6}, []string{v6, v4})
	}
	s.IPFamilyPolicy = pick(rng, "", "", service.SingleStack, service.PreferDualStack, service.RequireDualStack)
	if rng.IntN(7) == 0 {
		s.IPFamilies = pick(rng, []service.Family{service.IPv4}, []service.Family{service.IPv6},
			[]service.Family{service.IPv6, service.IPv4}, []service.Family{service.IPv4, service.IPv6})
	}
	if s.Type == service.TypeLoadBalancer || s.Type == service.TypeNodePort {
		if rng.IntN(5) < 2 {
			s.ExternalTrafficPolicy = service.TrafficLocal
			if rng.IntN(3) == 0 && (s.Type == service.TypeLoadBalancer || rng.IntN(10) == 0) {
				s.HealthCheckNodePort = 29998 + rng.Int32N(20)
			}
		}
		if s.Type == service.TypeLoadBalancer && rng.IntN(4) == 0 {
			f := false
			s.AllocateLoadBalancerNodePorts = &f
		}
	}
	return s
}

// mutate changes one field of a stored spec, so that updates keep,
// release and add values.
func (m *svcModel) mutate(s *service.Spec) {
	rng := m.rng
	switch rng.IntN(7) {
	case 0:
		s.Type = pick(rng, service.TypeClusterIP, service.TypeNodePort, service.TypeLoadBalancer, service.TypeExternalName)
	case 1:
		if len(s.Ports) > 1 {
			s.Ports = s.Ports[:len(s.Ports)-1]
		} else {
			s.Ports = append(s.Ports, service.Port{Name: "q", Protocol: service.ProtocolUDP, Port: pick[int32](rng, 53, 80)})
		}
	case 2:
		for i := range s.Ports {
			s.Ports[i].NodePort = 0
		}
	case 3:
		s.ExternalTrafficPolicy = pick(rng, service.TrafficLocal, service.TrafficCluster)
		if s.Type == service.TypeLoadBalancer {
			s.HealthCheckNodePort = pick[int32](rng, 0, 0, 29998+rng.Int32N(20))
		}
	case 4:
		s.IPFamilyPolicy = pick(rng, service.SingleStack, service.PreferDualStack, service.RequireDualStack)
		s.IPFamilies = nil
		if rng.IntN(2) == 0 {
			s.ClusterIPs = nil
		}
	case 5:
		s.ClusterIPs = nil
	case 6:
		if len(s.Ports) > 0 {
			s.Ports[0].NodePort = 29998 + rng.Int32N(20)
		}
	}
}

func cloneSpec(s service.Spec) service.Spec {
	s.ClusterIPs = append([]string(nil), s.ClusterIPs...)
	s.IPFamilies = append([]service.Family(nil), s.IPFamilies...)
	s.Ports = append([]service.Port(nil), s.Ports...)
	return s
}

// step applies one random operation and checks its answer.
func (m *svcModel) step() {
	switch r := m.rng.IntN(100); {
	case r < 48:
		m.put()
	case r < 60:
		m.del()
	case r < 75:
		m.plainAllocate()
	case r < 93:
		m.plainRelease()
	case r < 97:
		m.reconcile()
	default:
		m.roundTrip()
	}
	checkServiceInvariants(m.t, m.l.f, m.recs, m.forced)
}

func (m *svcModel) note(res *Result, what string) {
	code := "ok"
	if res.Err != nil {
		code = string(res.Err.Code)
	}
	m.codes[what+" "+code]++
}

func (m *svcModel) put() {
	t := m.t
	ns, name := m.randomKey()
	key := ns + "/" + name
	spec := m.randomSpec(ns, name)
	dry := m.rng.IntN(10) == 0
	before := readFull(m.l.f)
	res := m.l.apply(&Request{Kind: KindPutService, Service: &spec, DryRun: dry})
	m.note(res, fmt.Sprint("put dry=", dry))
	prev, existed := m.recs[key]
	if res.Err != nil || dry {
		require.Equal(t, before, readFull(m.l.f), "put %+v (dry run %v) = %v: the state changed", spec, dry, res.Err)
		if res.Err == nil {
			replaced := existed && spec.UID != "" && prev.Spec.UID != "" && spec.UID != prev.Spec.UID
			require.Equal(t, !existed || replaced, res.Created, "dry run of %s: Created", key)
		}
		return
	}
	uid := spec.UID
	if uid == "" && existed {
		uid = prev.Spec.UID
	}
	require.Equal(t, !existed || (uid != "" && prev.Spec.UID != "" && uid != prev.Spec.UID), res.Created, "put %s: Created", key)
	got, err := m.l.f.Service(ns, name)
	require.NoError(t, err)
	require.Equal(t, got, *res.Service, "put %s: the answer is the stored record", key)
	require.Equal(t, uid, got.Spec.UID)
	m.recs[key], m.uids[key] = got, got.Spec.UID
	names := map[pv]bool{}
	for _, v := range namedValues(got.Spec) {
		names[v] = true
	}
	for v := range m.forced[key] {
		if !names[v] {
			delete(m.forced[key], v)
		}
	}
}

func (m *svcModel) del() {
	t := m.t
	ns, name := m.randomKey()
	key := ns + "/" + name
	dry := m.rng.IntN(10) == 0
	before := readFull(m.l.f)
	res := m.l.apply(&Request{Kind: KindDeleteService, Service: &service.Spec{Namespace: ns, Name: name}, DryRun: dry})
	m.note(res, fmt.Sprint("delete dry=", dry))
	prev, existed := m.recs[key]
	if !existed {
		require.NotNil(t, res.Err, "delete of absent %s", key)
		require.Equal(t, CodeServiceNotFound, res.Err.Code)
	} else {
		require.Nil(t, res.Err, "delete of %s", key)
		require.Equal(t, prev, *res.Service, "delete %s answers the removed record", key)
	}
	if res.Err != nil || dry {
		require.Equal(t, before, readFull(m.l.f), "delete %s (dry run %v): the state changed", key, dry)
		return
	}
	delete(m.recs, key)
	delete(m.forced, key)
}

// randomValue returns a value of a pool, sometimes just outside it.
func (m *svcModel) randomValue(pool string) string {
	n := m.rng.IntN(18)
	switch pool {
	case poolV4:
		return fmt.Sprintf("10.96.0.%d", n)
	case poolV6:
		return fmt.Sprintf("fd00::%x", n)
	}
	return strconv.Itoa(29998 + n)
}

func (m *svcModel) plainAllocate() {
	t := m.t
	pool := pick(m.rng, poolV4, poolV6, poolPorts)
	op := Op{Kind: OpAllocate, Pool: pool, Owner: pick(m.rng, "plain-1", "plain-2")}
	if m.rng.IntN(2) == 0 {
		op.Value = m.randomValue(pool)
	}
	before := readFull(m.l.f)
	res := m.l.apply(&Request{Kind: KindTxn, Ops: []Op{op}})
	m.note(res, "allocate")
	if res.Err != nil {
		require.Contains(t, []Code{CodeAlreadyAllocated, CodeNotInRange, CodeRangeFull}, res.Err.Code)
		require.Equal(t, before, readFull(m.l.f), "refused %+v changed the state", op)
	}
}

func (m *svcModel) plainRelease() {
	t := m.t
	pool := pick(m.rng, poolV4, poolV6, poolPorts)
	value := m.randomValue(pool)
	if held, _, _ := m.l.f.List(pool, "", "", 100); len(held) > 0 && m.rng.IntN(4) > 0 {
		value = held[m.rng.IntN(len(held))].Value
	}
	kind := OpRelease
	if m.rng.IntN(4) == 0 {
		kind = OpReleaseForce
	}
	a, gerr := m.l.f.Get(pool, value)
	before := readFull(m.l.f)
	res := m.l.apply(&Request{Kind: KindTxn, Ops: []Op{{Kind: kind, Pool: pool, Value: value}}})
	m.note(res, fmt.Sprint("release force=", kind == OpReleaseForce))
	key, byService := strings.CutPrefix(a.Owner, ServiceOwnerPrefix)
	switch {
	case gerr != nil:
		require.NotNil(t, res.Err, "release of free %s/%s", pool, value)
		require.Contains(t, []Code{CodeNotAllocated, CodeNotInRange, CodeInvalidArgument}, res.Err.Code)
	case byService && kind == OpRelease:
		require.NotNil(t, res.Err, "plain release of %s/%s held by %s", pool, value, a.Owner)
		require.Equal(t, CodeOwnedByService, res.Err.Code)
		require.Equal(t, a.Owner, res.Err.Owner)
	default:
		require.Nil(t, res.Err, "release of %s/%s held by %s", pool, value, a.Owner)
		if byService {
			if m.forced[key] == nil {
				m.forced[key] = map[pv]bool{}
			}
			m.forced[key][pv{pool, value}] = true
		}
	}
	if res.Err != nil {
		require.Equal(t, before, readFull(m.l.f), "refused release changed the state")
	}
}

// reconcile lists every Service as it is, at the current index, and
// reconciles (reporting, or repairing). With nothing leaked, what it
// finds comes only of forced releases: a value forced away and still free
// is missing; one taken since by another owner is a mismatch, unless a
// Service listed earlier names it too, which makes it a duplicate. A
// repair gives the missing values back to Services with nothing else
// wrong.
func (m *svcModel) reconcile() {
	t := m.t
	recs, fence := m.l.f.Services("")
	list := make([]service.Spec, len(recs))
	for i, r := range recs {
		list[i] = r.Spec
	}
	exp := []finding{}
	claimed := map[pv]string{}
	bad := map[string]bool{}
	for _, r := range recs { // sorted by namespace and name, as the reconcile walks them
		key := r.Key()
		for _, v := range namedValues(r.Spec) {
			a, err := m.l.f.Get(v.pool, v.value)
			if _, dup := claimed[v]; dup {
				exp = append(exp, want(FindingDuplicate, v, key, a.Owner))
				bad[key] = true
				continue
			}
			claimed[v] = key
			switch {
			case err != nil:
				exp = append(exp, want(FindingMissing, v, key, ""))
			case a.Owner != ServiceOwnerPrefix+key:
				exp = append(exp, want(FindingMismatch, v, key, a.Owner))
				bad[key] = true
			}
		}
	}
	sortFindings(exp)
	repair := m.rng.IntN(2) == 0
	before := readFull(m.l.f)
	res := m.l.apply(&Request{Kind: KindReconcile, Fence: fence, Services: list, Repair: repair})
	m.note(res, fmt.Sprint("reconcile repair=", repair))
	require.Nil(t, res.Err)
	require.Equal(t, exp, sortedFindings(res.Findings), "reconcile of the Services as they are")
	for _, f := range exp {
		m.codes["reconcile "+f.Type]++
	}
	if !repair {
		require.Equal(t, before, readFull(m.l.f), "a reconcile without repair changes nothing")
		return
	}
	for _, f := range res.Findings {
		require.Equal(t, f.Type == FindingMissing && !bad[f.Service], f.Repaired, "%+v: Repaired", f)
		if f.Repaired {
			delete(m.forced[f.Service], pv{f.Pool, f.Value})
			m.codes["reconcile repaired"]++
		}
	}
	for _, r := range recs {
		got, err := m.l.f.Service(r.Spec.Namespace, r.Spec.Name)
		require.NoError(t, err)
		require.Equal(t, r.Spec, got.Spec, "a repair keeps the record of %s", r.Key())
		m.recs[r.Key()] = got
	}
}

// roundTrip writes a backup, restores it into a new state machine and
// carries on with that one.
func (m *svcModel) roundTrip() {
	var buf bytes.Buffer
	require.NoError(m.t, m.l.f.WriteBackup(&buf))
	g := New(nil)
	require.NoError(m.t, g.Restore(io.NopCloser(&buf)))
	require.Equal(m.t, readFull(m.l.f), readFull(g), "a restored backup equals its source")
	require.Equal(m.t, m.l.f.AppliedIndex(), g.AppliedIndex())
	m.l.f = g
	m.codes["snapshot"]++
}

// checkServiceInvariants reads the state machine and checks, against the
// expected records: the Services that exist; that no value is held by a
// Service that does not exist; that every value a record names is held by
// that Service (except those forced away from it); that a Service holds
// nothing its record does not name; and that no two records name one
// value they hold.
func checkServiceInvariants(t *testing.T, f *FSM, want map[string]ServiceRecord, forced map[string]map[pv]bool) {
	t.Helper()
	recs, _ := f.Services("")
	got := map[string]ServiceRecord{}
	for _, r := range recs {
		got[r.Key()] = r
	}
	require.Equal(t, want, got, "the Services that exist")
	held := map[string]map[pv]bool{}
	for _, pool := range []string{poolV4, poolV6, poolPorts} {
		allocs, _, err := f.List(pool, "", "", 1<<20)
		require.NoError(t, err)
		for _, a := range allocs {
			key, ok := strings.CutPrefix(a.Owner, ServiceOwnerPrefix)
			if !ok {
				continue
			}
			_, exists := got[key]
			require.True(t, exists, "%s/%s is held by %s, which does not exist", pool, a.Value, a.Owner)
			if held[key] == nil {
				held[key] = map[pv]bool{}
			}
			held[key][pv{pool, a.Value}] = true
		}
	}
	namedBy := map[pv]string{}
	for _, r := range recs {
		key := r.Key()
		names := map[pv]bool{}
		for _, v := range namedValues(r.Spec) {
			names[v] = true
			if forced[key][v] {
				continue
			}
			require.True(t, held[key][v], "%s names %s/%s but does not hold it", key, v.pool, v.value)
			other, dup := namedBy[v]
			require.False(t, dup, "%s/%s is named by %s and %s", v.pool, v.value, other, key)
			namedBy[v] = key
		}
		for v := range held[key] {
			require.True(t, names[v], "%s holds %s/%s, which its record does not name", key, v.pool, v.value)
		}
	}
}

// TestServiceModel runs random Service writes, deletes, dry runs, plain
// allocations and releases (forced ones too), reconciles and backup round
// trips on small pools, and checks the state machine against the model after
// every step; then replays the log on a new state machine.
func TestServiceModel(t *testing.T) {
	const seeds, steps = 20, 300
	codes := map[string]int{}
	for seed := uint64(1); seed <= seeds; seed++ {
		t.Run(fmt.Sprint("seed=", seed), func(t *testing.T) {
			rng := rand.New(rand.NewPCG(seed, 0x5e7))
			families := []service.Family{service.IPv4, service.IPv6}
			if seed%3 == 0 {
				families = []service.Family{service.IPv6, service.IPv4}
			}
			if seed%5 == 0 {
				families = families[:1]
			}
			m := &svcModel{t: t, rng: rng, l: newLogged(t, rng, "10.96.0.0/28", "fd00::/124", "30000-30015", families...),
				recs: map[string]ServiceRecord{}, uids: map[string]string{}, forced: map[string]map[pv]bool{}, codes: codes}
			for range steps {
				m.step()
			}
			g := m.l.replay()
			require.Equal(t, readFull(m.l.f), readFull(g), "the same log gives the same state")
			require.Equal(t, m.l.f.AppliedIndex(), g.AppliedIndex())
		})
	}
	keys := make([]string, 0, len(codes))
	for k := range codes {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	for _, k := range keys {
		t.Logf("%-40s %d", k, codes[k])
	}
	for _, k := range []string{"put dry=false ok", "put dry=false Invalid", "put dry=false RangeFull", "put dry=true ok",
		"delete dry=false ok", "delete dry=false ServiceNotFound", "release force=false OwnedByService",
		"release force=true ok", "allocate RangeFull", "snapshot", "reconcile missing", "reconcile mismatch",
		"reconcile duplicate", "reconcile repaired"} {
		require.Positive(t, codes[k], "no step ended %q: the workload misses a case", k)
	}
}
