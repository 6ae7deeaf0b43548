package fsm

import (
	"fmt"
	"math/rand/v2"
	"sort"
	"strconv"
	"strings"
	"testing"

	"github.com/hashicorp/raft"
	"github.com/rangealloc/rangealloc/service"
	"github.com/stretchr/testify/require"
)

// finding is the part of a Finding the reconcile tests compare.
type finding struct {
	Type, Pool, Value, Service, Owner, Reason string
}

// want returns the finding of a value of pool, with Kubernetes' repair
// reason for its type.
func want(typ string, v pv, svc, owner string) finding {
	prefix := "ClusterIP"
	if v.pool == poolPorts {
		prefix = "Port"
	}
	reason := map[string]string{FindingLeak: "Leaked", FindingMissing: "NotAllocated", FindingDuplicate: "AlreadyAllocated",
		FindingOutOfRange: "OutOfRange", FindingMismatch: "AlreadyAllocated"}[typ]
	return finding{Type: typ, Pool: v.pool, Value: v.value, Service: svc, Owner: owner, Reason: prefix + reason}
}

func sortedFindings(fs []Finding) []finding {
	out := make([]finding, 0, len(fs))
	for _, f := range fs {
		out = append(out, finding{f.Type, f.Pool, f.Value, f.Service, f.Owner, f.Reason})
	}
	sortFindings(out)
	return out
}

func sortFindings(fs []finding) {
	sort.Slice(fs, func(i, j int) bool {
		return fmt.Sprint(fs[i]) < fmt.Sprint(fs[j])
	})
}

// svcKinds are the shapes of the generated Services.
var svcKinds = []func(ns, name string) service.Spec{
	func(ns, name string) service.Spec { // one IPv4 clusterIP
		return service.Spec{Namespace: ns, Name: name, Ports: []service.Port{{Name: "http", Port: 80}}}
	},
	func(ns, name string) service.Spec { // clusterIP and two nodePorts, one shared by TCP and UDP
		return service.Spec{Namespace: ns, Name: name, Type: service.TypeNodePort, Ports: []service.Port{
			{Name: "dns", Protocol: service.ProtocolTCP, Port: 53}, {Name: "dns-udp", Protocol: service.ProtocolUDP, Port: 53},
			{Name: "https", Port: 443}}}
	},
	func(ns, name string) service.Spec { // dual-stack LoadBalancer, Local: nodePort and healthCheckNodePort
		return service.Spec{Namespace: ns, Name: name, Type: service.TypeLoadBalancer, IPFamilyPolicy: service.RequireDualStack,
			ExternalTrafficPolicy: service.TrafficLocal, Ports: []service.Port{{Name: "http", Port: 80}}}
	},
	func(ns, name string) service.Spec { // dual-stack clusterIPs
		return service.Spec{Namespace: ns, Name: name, IPFamilyPolicy: service.PreferDualStack, Ports: []service.Port{{Name: "http", Port: 80}}}
	},
	func(ns, name string) service.Spec { // headless: no value
		return service.Spec{Namespace: ns, Name: name, ClusterIPs: []string{service.ClusterIPNone}, Ports: []service.Port{{Name: "http", Port: 80}}}
	},
}

// buildServices creates n Services of the shapes above, in random order,
// and returns their keys by shape.
func buildServices(t testing.TB, l *logged, rng *rand.Rand, n int) map[int]*[]string {
	byKind := map[int]*[]string{}
	for i, k := range rng.Perm(n) {
		kind := k % len(svcKinds)
		ns, name := fmt.Sprintf("ns%d", i%4), fmt.Sprintf("svc-%04d", i)
		res := l.apply(&Request{Kind: KindPutService, Service: ptr(svcKinds[kind](ns, name))})
		require.Nil(t, res.Err, "create %s/%s", ns, name)
		if byKind[kind] == nil {
			byKind[kind] = new([]string)
		}
		*byKind[kind] = append(*byKind[kind], ns+"/"+name)
	}
	return byKind
}

func ptr[T any](v T) *T { return &v }

func newReconcileFSM(t testing.TB, rng *rand.Rand) *logged {
	return newLogged(t, rng, "10.96.0.0/22", "fd00::/118", "30000-32767", service.IPv4, service.IPv6)
}

func serviceRecords(f *FSM) map[string]ServiceRecord {
	recs, _ := f.Services("")
	out := make(map[string]ServiceRecord, len(recs))
	for _, r := range recs {
		out[r.Key()] = r
	}
	return out
}

// take removes and returns a random key of the list.
func take(rng *rand.Rand, keys *[]string) string {
	i := rng.IntN(len(*keys))
	k := (*keys)[i]
	*keys = append((*keys)[:i], (*keys)[i+1:]...)
	return k
}

func nodePortValue(p int32) pv { return pv{poolPorts, strconv.Itoa(int(p))} }

// TestReconcileFindsInjectedFaults builds states of 200 Services, injects
// leaks, missing values, duplicates, out-of-range values and mismatches,
// and writes after the fence, and checks that the report is exactly the
// injected set; then repairs and checks what the repair may and may not
// change.
func TestReconcileFindsInjectedFaults(t *testing.T) {
	for seed := uint64(1); seed <= 4; seed++ {
		t.Run(fmt.Sprint("seed=", seed), func(t *testing.T) { reconcileFaults(t, seed) })
	}
}

func reconcileFaults(t *testing.T, seed uint64) {
	rng := rand.New(rand.NewPCG(seed, 0xfe4ce))
	l := newReconcileFSM(t, rng)
	byKind := buildServices(t, l, rng, 200)
	recs := serviceRecords(l.f)
	var expect, missingLater []finding
	repaired := map[finding]bool{}
	ipv4 := func(key string) pv { return pv{poolV4, recs[key].Spec.ClusterIPs[0]} }
	owner := func(key string) string { return ServiceOwnerPrefix + key }

	// Before the fence: a plain allocation by a Service that does not
	// exist leaks; one by another owner does not.
	ghost := l.apply(&Request{Kind: KindTxn, Ops: []Op{{Kind: OpAllocate, Pool: poolV4, Owner: "services/gone/ghost"}}})
	require.Nil(t, ghost.Err)
	ghostV := pv{poolV4, ghost.Allocations()[0][0].Value}
	f := want(FindingLeak, ghostV, "", "services/gone/ghost")
	expect, repaired[f] = append(expect, f), true
	plain := l.apply(&Request{Kind: KindTxn, Ops: []Op{{Kind: OpAllocate, Pool: poolV4, Owner: "plain"}}})
	require.Nil(t, plain.Err)
	plainV := pv{poolV4, plain.Allocations()[0][0].Value}

	// Missing: values forced away from listed Services (a nodePort and a
	// secondary clusterIP). The update of s2 after the fence (below) frees
	// Service values, so this repair leaves missing values alone (they
	// could be a deleted Service's); a repair with a newer fence gives
	// them back (the end of this test).
	s1 := take(rng, byKind[1])
	s1b := take(rng, byKind[3])
	for _, m := range []struct {
		key string
		v   pv
	}{{s1, nodePortValue(recs[s1].Spec.Ports[2].NodePort)}, {s1b, pv{poolV6, recs[s1b].Spec.ClusterIPs[1]}}} {
		require.Nil(t, l.apply(&Request{Kind: KindTxn, Ops: []Op{{Kind: OpReleaseForce, Pool: m.v.pool, Value: m.v.value}}}).Err)
		f := want(FindingMissing, m.v, m.key, "")
		expect, missingLater = append(expect, f), append(missingLater, f)
	}

	fence := l.f.AppliedIndex()
	listed := map[string]service.Spec{}
	for k, r := range recs {
		listed[k] = cloneSpec(r.Spec)
	}

	// Leaks: Services the caller no longer lists. r2's values are all
	// leaks, so its record goes and they are released; r1 keeps one
	// value that a listed Service names (a mismatch below), so its record
	// and its values stay. A headless Service has nothing to leak.
	r1, r2, h := take(rng, byKind[2]), take(rng, byKind[1]), take(rng, byKind[4])
	delete(listed, r1)
	delete(listed, r2)
	delete(listed, h)
	r1Ports := namedValues(recs[r1].Spec)
	for _, v := range namedValues(recs[r2].Spec) {
		f := want(FindingLeak, v, "", owner(r2))
		expect, repaired[f] = append(expect, f), true
	}

	// Duplicate: b names a's clusterIP; a sorts first, so b's naming is
	// the duplicate, and b's own clusterIP leaks.
	a, b := take(rng, byKind[0]), take(rng, byKind[0])
	if b < a {
		a, b = b, a
	}
	listed[b].ClusterIPs[0] = recs[a].Spec.ClusterIPs[0]
	expect = append(expect, want(FindingDuplicate, ipv4(a), b, owner(a)), want(FindingLeak, ipv4(b), "", owner(b)))

	// Out of range: c's https nodePort and c2's clusterIP lie outside
	// their pools; the values they replaced leak.
	c, c2 := take(rng, byKind[1]), take(rng, byKind[0])
	listed[c].Ports[2].NodePort = 29000
	listed[c2].ClusterIPs[0] = "10.200.0.1"
	expect = append(expect,
		want(FindingOutOfRange, pv{poolPorts, "29000"}, c, ""), want(FindingLeak, nodePortValue(recs[c].Spec.Ports[2].NodePort), "", owner(c)),
		want(FindingOutOfRange, pv{poolV4, "10.200.0.1"}, c2, ""), want(FindingLeak, ipv4(c2), "", owner(c2)))

	// Mismatch: d names the plain allocation; d2 names r1's nodePort.
	d, d2 := take(rng, byKind[0]), take(rng, byKind[1])
	listed[d].ClusterIPs[0] = plainV.value
	r1NodePort := nodePortValue(recs[r1].Spec.Ports[0].NodePort)
	listed[d2].Ports[2].NodePort = recs[r1].Spec.Ports[0].NodePort
	expect = append(expect,
		want(FindingMismatch, plainV, d, "plain"), want(FindingLeak, ipv4(d), "", owner(d)),
		want(FindingMismatch, r1NodePort, d2, owner(r1)), want(FindingLeak, nodePortValue(recs[d2].Spec.Ports[2].NodePort), "", owner(d2)))
	for _, v := range r1Ports {
		if v != r1NodePort {
			expect = append(expect, want(FindingLeak, v, "", owner(r1)))
		}
	}

	// After the fence: a create and a plain allocation by a Service
	// nobody lists, and an update that releases values the (stale) list
	// still names: none of them is the repair's to undo.
	z := l.apply(&Request{Kind: KindPutService, Service: ptr(svcKinds[1]("late", "z"))})
	require.Nil(t, z.Err)
	ghost2 := l.apply(&Request{Kind: KindTxn, Ops: []Op{{Kind: OpAllocate, Pool: poolPorts, Owner: "services/late/ghost"}}})
	require.Nil(t, ghost2.Err)
	s2 := take(rng, byKind[1])
	s2Spec := svcKinds[0](recs[s2].Spec.Namespace, recs[s2].Spec.Name) // NodePort to ClusterIP
	require.Nil(t, l.apply(&Request{Kind: KindPutService, Service: &s2Spec}).Err)
	for _, v := range namedValues(recs[s2].Spec) {
		if v.pool == poolPorts {
			expect = append(expect, want(FindingMissing, v, s2, ""))
		}
	}

	var list []service.Spec
	for _, k := range sortedKeys(listed) {
		list = append(list, listed[k])
	}
	rng.Shuffle(len(list), func(i, j int) { list[i], list[j] = list[j], list[i] })

	// The report is exactly the injected set, and changes nothing.
	sortFindings(expect)
	before := readFull(l.f)
	got, _, err := l.f.Reconcile(fence, list)
	require.NoError(t, err)
	require.Equal(t, expect, sortedFindings(got))
	require.Equal(t, before, readFull(l.f))
	dry := l.apply(&Request{Kind: KindReconcile, Fence: fence, Services: list})
	require.Nil(t, dry.Err)
	require.Equal(t, expect, sortedFindings(dry.Findings))
	require.Equal(t, before, readFull(l.f), "a reconcile without repair changes nothing")

	// Repair: the same findings, the expected ones repaired.
	res := l.apply(&Request{Kind: KindReconcile, Fence: fence, Services: list, Repair: true})
	require.Nil(t, res.Err)
	require.Equal(t, expect, sortedFindings(res.Findings))
	for _, f := range res.Findings {
		k := finding{f.Type, f.Pool, f.Value, f.Service, f.Owner, f.Reason}
		require.Equal(t, repaired[k], f.Repaired, "%+v: Repaired", k)
	}

	// What was written after the fence is intact.
	after := serviceRecords(l.f)
	require.Equal(t, *z.Service, after["late/z"], "a Service created after the fence is kept")
	for _, v := range namedValues(z.Service.Spec) {
		got, err := l.f.Get(v.pool, v.value)
		require.NoError(t, err, "%v of a Service created after the fence", v)
		require.Equal(t, "services/late/z", got.Owner)
	}
	g2, err := l.f.Get(poolPorts, ghost2.Allocations()[0][0].Value)
	require.NoError(t, err, "a value allocated after the fence is never released")
	require.Equal(t, "services/late/ghost", g2.Owner)
	require.Equal(t, recs[s2].Spec.Namespace, after[s2].Spec.Namespace)
	require.Equal(t, service.TypeClusterIP, after[s2].Spec.Type, "a record written after the fence is not replaced")

	// The records: r2 and the headless h are gone (nothing of theirs is
	// held any more); everything else is as it was, or as the late writes
	// made it. The state keeps the invariants of the model test.
	wantRecs := serviceRecords(l.f)
	require.NotContains(t, wantRecs, r2)
	require.NotContains(t, wantRecs, h)
	for k, r := range recs {
		if k == r2 || k == h || k == s2 {
			continue
		}
		require.Equal(t, r.Spec, after[k].Spec, "record of %s", k)
	}
	require.Nil(t, l.apply(&Request{Kind: KindTxn, Ops: []Op{{Kind: OpRelease, Pool: poolPorts, Value: ghost2.Allocations()[0][0].Value}}}).Err)
	forced := map[string]map[pv]bool{} // still forced away: this repair left them
	for _, m := range missingLater {
		if forced[m.Service] == nil {
			forced[m.Service] = map[pv]bool{}
		}
		forced[m.Service][pv{m.Pool, m.Value}] = true
	}
	checkServiceInvariants(t, l.f, wantRecs, forced)

	// A second report no longer finds what the repair fixed.
	again, _, err := l.f.Reconcile(l.f.AppliedIndex(), list)
	require.NoError(t, err)
	for _, f := range again {
		for k := range repaired {
			require.False(t, f.Pool == k.Pool && f.Value == k.Value && (f.Type == FindingLeak || f.Type == FindingMissing),
				"%+v was repaired but is found again", f)
		}
	}
	// A repair fenced after every write gives the forced-away values back.
	fresh := l.apply(&Request{Kind: KindReconcile, Fence: l.f.AppliedIndex(), Services: list, Repair: true})
	require.Nil(t, fresh.Err)
	for _, m := range missingLater {
		found := false
		for _, f := range fresh.Findings {
			if f.Type == FindingMissing && f.Pool == m.Pool && f.Value == m.Value {
				found = true
				require.True(t, f.Repaired, "%+v", f)
			}
		}
		require.True(t, found, "%+v is still missing before the fresh repair", m)
		a, err := l.f.Get(m.Pool, m.Value)
		require.NoError(t, err)
		require.Equal(t, ServiceOwnerPrefix+m.Service, a.Owner)
	}
}

func sortedKeys[V any](m map[string]V) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	return keys
}

// TestReconcileFenceKeepsRacingCreates lists Services at a fence, then,
// as a repair races them, deletes some Services the list left out and
// creates new ones, some naming the values the deletes freed: the repair
// with the stale list keeps every value and record written after the
// fence, and cleans up what the list left out before it.
func TestReconcileFenceKeepsRacingCreates(t *testing.T) {
	for seed := uint64(1); seed <= 4; seed++ {
		t.Run(fmt.Sprint("seed=", seed), func(t *testing.T) {
			rng := rand.New(rand.NewPCG(seed, 0xfe1ce))
			l := newReconcileFSM(t, rng)
			buildServices(t, l, rng, 200)
			fence := l.f.AppliedIndex()
			recs, _ := l.f.Services("")
			var list []service.Spec
			var dropped []ServiceRecord
			for _, r := range recs {
				if rng.IntN(5) == 0 {
					dropped = append(dropped, r)
				} else {
					list = append(list, r.Spec)
				}
			}
			late := map[string]bool{}
			for i, r := range dropped {
				if i%2 == 1 {
					continue
				}
				require.Nil(t, l.apply(&Request{Kind: KindDeleteService, Service: ptr(r.Spec)}).Err)
				s := svcKinds[i%len(svcKinds)]("late", fmt.Sprintf("z-%d", i))
				if i%4 == 0 && r.Spec.Type != service.TypeExternalName && len(namedValues(r.Spec)) > 0 {
					s = cloneSpec(r.Spec) // the same values, under a new name
					s.Namespace, s.Name = "late", fmt.Sprintf("z-%d", i)
				}
				res := l.apply(&Request{Kind: KindPutService, Service: &s})
				require.Nil(t, res.Err, "create %s/%s", s.Namespace, s.Name)
				late[res.Service.Key()] = true
			}
			lateRecs := serviceRecords(l.f)
			res := l.apply(&Request{Kind: KindReconcile, Fence: fence, Services: list, Repair: true})
			require.Nil(t, res.Err)
			for _, f := range res.Findings {
				require.Equal(t, FindingLeak, f.Type, "%+v", f)
				require.True(t, f.Repaired, "%+v", f)
				require.False(t, strings.HasPrefix(f.Owner, "services/late/"), "%+v", f)
			}
			require.NotEmpty(t, res.Findings, "the Services the list left out leak")
			after := serviceRecords(l.f)
			wantKeys := map[string]bool{}
			for _, s := range list {
				wantKeys[s.Namespace+"/"+s.Name] = true
			}
			for k := range late {
				wantKeys[k] = true
				require.Equal(t, lateRecs[k], after[k], "the record of %s, written after the fence", k)
			}
			require.Equal(t, sortedKeys(wantKeys), sortedKeys(after), "listed and late Services remain, no other")
			checkServiceInvariants(t, l.f, after, nil)
			before := readFull(l.f)
			again := l.apply(&Request{Kind: KindReconcile, Fence: fence, Services: list, Repair: true})
			require.Nil(t, again.Err)
			require.Empty(t, again.Findings, "a second reconcile with the same list finds nothing")
			require.Equal(t, before, readFull(l.f), "a repair that finds nothing changes nothing")
		})
	}
}

// TestReconcileRepairAfterLateDelete: a Service listed by the caller and
// deleted after the fence, before the repair is applied, must not come
// back: its values look free ("missing"), but the state remembers that an
// entry after the fence freed Service values, and the repair leaves
// missing values to a reconcile with a newer fence. (Kubernetes' repair
// loop is kept off by its RangeAllocation write failing on the
// resourceVersion it read before listing.)
func TestReconcileRepairAfterLateDelete(t *testing.T) {
	l := newReconcileFSM(t, rand.New(rand.NewPCG(1, 1)))
	s := l.apply(&Request{Kind: KindPutService, Service: ptr(svcKinds[1]("ns", "s"))})
	require.Nil(t, s.Err)
	fence := l.f.AppliedIndex()
	listed, _ := l.f.Services("")
	require.Nil(t, l.apply(&Request{Kind: KindDeleteService, Service: ptr(s.Service.Spec)}).Err)
	res := l.apply(&Request{Kind: KindReconcile, Fence: fence, Services: []service.Spec{listed[0].Spec}, Repair: true})
	require.Nil(t, res.Err)
	_, err := l.f.Service("ns", "s")
	require.ErrorIs(t, err, &Error{Code: CodeServiceNotFound}, "a Service deleted after the fence stays deleted")
	for _, v := range namedValues(s.Service.Spec) {
		_, err := l.f.Get(v.pool, v.value)
		require.ErrorIs(t, err, &Error{Code: CodeNotAllocated}, "%v of the deleted Service", v)
	}
}

// BenchmarkReconcile10k reconciles 10,000 Services (a quarter of them
// NodePort, a tenth dual-stack) that agree with the state: the report
// (a read) and the repair (one applied entry, decoded).
func BenchmarkReconcile10k(b *testing.B) {
	const n = 10000
	l := newLogged(b, rand.New(rand.NewPCG(1, 1)), "10.96.0.0/16", "fd00::/112", "20000-32767", service.IPv4, service.IPv6)
	for i := range n {
		ns, name := fmt.Sprintf("ns%d", i%20), fmt.Sprintf("svc-%05d", i)
		s := svcKinds[0](ns, name)
		switch {
		case i%4 == 0:
			s = svcKinds[1](ns, name)
		case i%10 == 1:
			s = svcKinds[3](ns, name)
		}
		if res := l.apply(&Request{Kind: KindPutService, Service: &s}); res.Err != nil {
			b.Fatal(res.Err)
		}
	}
	recs, fence := l.f.Services("")
	list := make([]service.Spec, len(recs))
	for i, r := range recs {
		list[i] = r.Spec
	}
	b.Run("report", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			fs, _, err := l.f.Reconcile(fence, list)
			if err != nil || len(fs) != 0 {
				b.Fatal(err, fs)
			}
		}
	})
	b.Run("repair", func(b *testing.B) {
		b.ReportAllocs()
		data := EncodeBatch([]*Request{{Kind: KindReconcile, Fence: fence, Services: list, Repair: true, Seed: 1}})
		for b.Loop() {
			l.idx++
			res := l.f.Apply(&raft.Log{Index: l.idx, Term: 1, Type: raft.LogCommand, Data: data}).(*Response).Results[0]
			if res.Err != nil || len(res.Findings) != 0 {
				b.Fatal(res.Err, res.Findings)
			}
		}
	})
}

// TestReconcileRepairsServiceMissingAForcedValue: a Service the caller no
// longer lists, one of whose values a forced release took (and another
// owner may have taken since), holds only leaks: the repair deletes its
// record and releases them, and the next reconcile finds nothing.
func TestReconcileRepairsServiceMissingAForcedValue(t *testing.T) {
	for _, retaken := range []bool{false, true} {
		t.Run(fmt.Sprint("retaken=", retaken), func(t *testing.T) {
			l := newReconcileFSM(t, rand.New(rand.NewPCG(1, 1)))
			s := l.apply(&Request{Kind: KindPutService, Service: ptr(svcKinds[2]("ns", "s"))}).Service
			keep := l.apply(&Request{Kind: KindPutService, Service: ptr(svcKinds[0]("ns", "t"))}).Service
			forced := nodePortValue(s.Spec.Ports[0].NodePort)
			require.Nil(t, l.apply(&Request{Kind: KindTxn, Ops: []Op{{Kind: OpReleaseForce, Pool: poolPorts, Value: forced.value}}}).Err)
			if retaken {
				require.Nil(t, l.apply(&Request{Kind: KindTxn, Ops: []Op{{Kind: OpAllocate, Pool: poolPorts, Value: forced.value, Owner: "plain"}}}).Err)
			}
			fence := l.f.AppliedIndex()
			list := []service.Spec{keep.Spec}
			var exp []finding
			for _, v := range namedValues(s.Spec) {
				if v != forced {
					exp = append(exp, want(FindingLeak, v, "", "services/ns/s"))
				}
			}
			sortFindings(exp)
			res := l.apply(&Request{Kind: KindReconcile, Fence: fence, Services: list, Repair: true})
			require.Nil(t, res.Err)
			require.Equal(t, exp, sortedFindings(res.Findings))
			for _, f := range res.Findings {
				require.True(t, f.Repaired, "%+v", f)
			}
			_, err := l.f.Service("ns", "s")
			require.ErrorIs(t, err, &Error{Code: CodeServiceNotFound}, "the unlisted Service's record is gone")
			checkServiceInvariants(t, l.f, serviceRecords(l.f), nil)
			again, _, err := l.f.Reconcile(l.f.AppliedIndex(), list)
			require.NoError(t, err)
			require.Empty(t, again)
		})
	}
}

// TestRepairRefusesFutureFence: a repair's fence must be a revision read
// before it; a later one would let it release values allocated after the
// caller listed, and changes nothing. A report may take any fence.
func TestRepairRefusesFutureFence(t *testing.T) {
	l := newReconcileFSM(t, rand.New(rand.NewPCG(1, 1)))
	require.Nil(t, l.apply(&Request{Kind: KindPutService, Service: ptr(svcKinds[1]("ns", "s"))}).Err)
	before := readFull(l.f)
	for _, fence := range []uint64{l.idx + 1, l.idx + 2, ^uint64(0)} {
		res := l.apply(&Request{Kind: KindReconcile, Fence: fence, Repair: true})
		require.NotNil(t, res.Err, "repair with fence %d at entry %d", fence, l.idx)
		require.Equal(t, CodeInvalidArgument, res.Err.Code)
		require.Equal(t, before, readFull(l.f))
	}
	found, _, err := l.f.Reconcile(^uint64(0), nil)
	require.NoError(t, err)
	require.Len(t, found, 3, "with no Service listed, the report finds all three values leaked")
	res := l.apply(&Request{Kind: KindReconcile, Fence: l.idx, Repair: true})
	require.Nil(t, res.Err, "a fence just before the repair's entry")
	require.Len(t, res.Findings, 3)
}
