package fsm

import (
	"bytes"
	"encoding/binary"
	"hash/crc32"
	"io"
	"math/rand/v2"
	"testing"

	"github.com/hashicorp/raft"
	"github.com/rangealloc/rangealloc/service"
	"github.com/stretchr/testify/require"
)

// FuzzApplyEntry feeds the state machine log entries built from arbitrary
// bytes, as a damaged log or a faulty leader could: an entry either fails
// to decode (the node stops, TestUndecodableEntryStopsTheNode), or it
// decodes, re-encodes to an entry that decodes the same, and applies
// without a panic, the same on two replicas, twice (a replayed entry), to
// a state that survives a backup and a restore unchanged.
func FuzzApplyEntry(f *testing.F) {
	for _, reqs := range fuzzSeedEntries() {
		f.Add(EncodeBatch(reqs))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		reqs, err := DecodeEntry(data)
		if err != nil {
			return
		}
		again, err := DecodeEntry(EncodeBatch(reqs))
		require.NoError(t, err, "an entry that decoded re-encodes to one that decodes")
		require.Equal(t, reqs, again)

		for _, level := range []uint64{1, MaxFeatureLevel} {
			a, b := fuzzReplica(t, level), fuzzReplica(t, level)
			for range 2 {
				for _, r := range []*fuzzFSM{a, b} {
					r.idx++
					r.f.ApplyBatch([]*raft.Log{{Index: r.idx, Term: 1, Type: raft.LogCommand, Data: data}})
				}
			}
			require.Equal(t, fuzzDump(a.f), fuzzDump(b.f), "level %d: replicas applying the same entries agree", level)

			var buf bytes.Buffer
			require.NoError(t, a.f.WriteBackup(&buf), "level %d: the state after the entry can be backed up", level)
			_, err = ReadBackup(bytes.NewReader(buf.Bytes()))
			require.NoError(t, err, "level %d: a backup of a state the log reached passes the restore's checks", level)
			c := New(nil)
			require.NoError(t, c.Restore(io.NopCloser(bytes.NewReader(buf.Bytes()))))
			require.Equal(t, fuzzDump(a.f), fuzzDump(c), "level %d: restored state equals the backed up one", level)
		}
	})
}

// FuzzReadBackup: a backup made of arbitrary bytes is refused with an
// error or accepted; an accepted one restores, and the restored state backs
// up again into a backup that is accepted too. Random bytes seldom pass
// the checksum, so each input is also tried with its trailer resealed.
func FuzzReadBackup(f *testing.F) {
	for _, reqs := range fuzzSeedEntries() {
		r := fuzzReplica(f, MaxFeatureLevel)
		r.idx++
		r.f.ApplyBatch([]*raft.Log{{Index: r.idx, Term: 1, Type: raft.LogCommand, Data: EncodeBatch(reqs)}})
		var buf bytes.Buffer
		require.NoError(f, r.f.WriteBackup(&buf))
		if buf.Len() < 8192 {
			f.Add(buf.Bytes())
		}
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		checkBackup(t, data)
		if len(data) >= 4 {
			checkBackup(t, resealed(data))
		}
	})
}

func checkBackup(t *testing.T, data []byte) {
	if _, err := ReadBackup(bytes.NewReader(data)); err != nil {
		return
	}
	g := New(nil)
	require.NoError(t, g.Restore(io.NopCloser(bytes.NewReader(data))), "a backup ReadBackup accepts restores")
	var buf bytes.Buffer
	require.NoError(t, g.WriteBackup(&buf))
	_, err := ReadBackup(bytes.NewReader(buf.Bytes()))
	require.NoError(t, err, "the restored state backs up again")
}

type fuzzFSM struct {
	f   *FSM
	idx uint64
}

// fuzzReplica is a state machine at feature level, with a dual-stack
// service network, a Service, and a few plain allocations, for fuzzed
// entries to act on.
func fuzzReplica(t testing.TB, level uint64) *fuzzFSM {
	r := &fuzzFSM{f: New(nil)}
	yes := true
	var reqs []*Request
	if level > 1 {
		reqs = append(reqs, &Request{Kind: KindSetFeatureLevel, FeatureLevel: level})
	}
	reqs = append(reqs, []*Request{
		{Kind: KindCreatePool, ID: "p4", Pool: "clusterip-ipv4", Range: "10.96.0.0/28"},
		{Kind: KindCreatePool, ID: "p6", Pool: "clusterip-ipv6", Range: "fd00::/124"},
		{Kind: KindCreatePool, ID: "pp", Pool: "nodeport", Range: "30000-30015"},
		{Kind: KindSetServiceNetwork, Network: ServiceNetwork{Families: []service.Family{service.IPv4, service.IPv6},
			IPv4Pool: "clusterip-ipv4", IPv6Pool: "clusterip-ipv6", NodePortPool: "nodeport"}},
		{Kind: KindPutService, ID: "s1", Seed: 3, Service: &service.Spec{Namespace: "default", Name: "web", Type: service.TypeNodePort,
			HasSelector: &yes, Ports: []service.Port{{Name: "a", Port: 80}}}},
		{Kind: KindTxn, ID: "t1", Seed: 5, Ops: []Op{alloc("clusterip-ipv4", "10.96.0.9", "x"), {Kind: OpAllocate, Pool: "nodeport", Owner: "y", Count: 2}}},
	}...)
	for _, q := range reqs {
		r.idx++
		res := r.f.Apply(&raft.Log{Index: r.idx, Term: 1, Type: raft.LogCommand, Data: EncodeBatch([]*Request{q})}).(*Response)
		require.Nil(t, res.Results[0].Err, "fuzz replica setup: %v", q.Kind)
	}
	return r
}

// fuzzSeedEntries are entries of every kind, valid and not, for the
// fuzzers to start from.
func fuzzSeedEntries() [][]*Request {
	no := false
	web := service.Spec{Namespace: "default", Name: "web", Type: service.TypeNodePort, Ports: []service.Port{{Name: "a", Port: 80, NodePort: 30003}}}
	lb := service.Spec{Namespace: "default", Name: "lb", Type: service.TypeLoadBalancer, ExternalTrafficPolicy: "Local",
		IPFamilyPolicy: service.RequireDualStack, AllocateLoadBalancerNodePorts: &no, Ports: []service.Port{{Name: "b", Port: 443}}}
	out := [][]*Request{
		{{Kind: KindTxn, ID: "t1", Seed: 5, Ops: []Op{alloc("clusterip-ipv4", "10.96.0.9", "x")}}},
		{{Kind: KindTxn, ID: "t2", Seed: 7, Ops: []Op{release("clusterip-ipv4", "10.96.0.9", "x"), {Kind: OpAllocate, Pool: "nodeport", Count: 20}}}},
		{{Kind: KindCreatePool, Pool: "extra", Range: "10.97.0.0/30"}, {Kind: KindCreatePoolExclusive, Pool: "ov", Range: "10.96.0.8/29"}},
		{{Kind: KindDeletePool, Pool: "clusterip-ipv6"}, {Kind: KindDeletePool, Pool: "extra"}},
		{{Kind: KindSetMember, Member: Member{ID: "n1", RaftAddr: "127.0.0.1:7081", APIAddr: "127.0.0.1:7080"}}, {Kind: KindRemoveMember, Member: Member{ID: "n1"}}},
		{{Kind: KindSetMemberNonvoter, Member: Member{ID: "n2", RaftAddr: "127.0.0.1:7091", APIAddr: "127.0.0.1:7090", Nonvoter: true}}},
		{{Kind: KindSetClusterID, ClusterID: "5b0c2f4e-0000-4000-8000-000000000001"}, {Kind: KindSetFeatureLevel, FeatureLevel: MaxFeatureLevel}},
		{{Kind: KindPutService, ID: "s2", Seed: 9, Service: &web}, {Kind: KindPutService, Seed: 11, Service: &lb, DryRun: true}},
		{{Kind: KindDeleteService, ID: "d1", Service: &service.Spec{Namespace: "default", Name: "web"}}},
		{{Kind: KindPutServiceV2, ID: "s3", Seed: 19, Service: &service.Spec{Namespace: "default", Name: "web", Type: service.TypeNodePort,
			ClusterIP: "10.96.0.3", Ports: []service.Port{{Name: "a", Port: 80}}}}},
		{{Kind: KindSetServiceNetwork, Network: ServiceNetwork{Families: []service.Family{service.IPv6}, IPv6Pool: "clusterip-ipv6", NodePortPool: "nodeport"}, IfUnset: true}},
		{{Kind: KindReconcile, Fence: 3, Repair: true, Services: []service.Spec{web, lb}}},
		{{Kind: KindDeletePool, Pool: "clusterip-ipv6"}, {Kind: KindCreatePool, Pool: "clusterip-ipv6", Range: "30100-30110"},
			{Kind: KindPutService, Seed: 13, Service: &lb}, {Kind: KindTxn, Seed: 15, Ops: []Op{{Kind: OpAllocate, Pool: "clusterip-ipv6", Owner: "z"}}},
			{Kind: KindReconcile, Fence: 9, Repair: true, Services: []service.Spec{web, lb}}},
		{{Kind: KindDeletePool, Pool: "clusterip-ipv6"}, {Kind: KindCreatePool, Pool: "clusterip-ipv6", Range: "10.98.0.0/29"},
			{Kind: KindPutService, Seed: 17, Service: &lb}},
		{{Kind: KindImport, Services: []service.Spec{lb}, Held: []PoolValues{{Pool: "nodeport", Values: []string{"30007", "30008"}}}}},
	}
	rng := rand.New(rand.NewPCG(7, 11))
	for _, e := range randomEntries(rng, 6)[1:] {
		for _, r := range e {
			for i := range r.Ops {
				if r.Ops[i].Pool == "ip" {
					r.Ops[i].Pool, r.Ops[i].Value = "clusterip-ipv4", ""
				} else {
					r.Ops[i].Pool = "nodeport"
				}
			}
		}
		out = append(out, e)
	}
	return out
}

// fuzzDump is what replicas must agree on: pools, bitmaps and
// allocations, Services and the service network, members, the cluster ID,
// the feature level and the request table.
func fuzzDump(f *FSM) map[string]any {
	svcs, rev := f.Services("")
	f.mu.RLock()
	reqs := f.s.requests.len()
	f.mu.RUnlock()
	return map[string]any{"pools": dump(f), "services": svcs, "revision": rev, "network": f.ServiceNetwork(),
		"members": f.Members(), "cluster": f.ClusterID(), "level": f.FeatureLevel(), "requests": reqs}
}

// resealed is data with its last four bytes replaced by the CRC-32C of
// the rest, the backup format's trailer.
func resealed(data []byte) []byte {
	body := bytes.Clone(data[:len(data)-4])
	return binary.BigEndian.AppendUint32(body, crc32.Checksum(body, crc32.MakeTable(crc32.Castagnoli)))
}
