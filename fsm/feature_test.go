package fsm

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"io"
	"strings"
	"testing"

	"github.com/hashicorp/raft"
	"github.com/rangealloc/rangealloc/service"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func setLevel(l uint64) *Request { return &Request{Kind: KindSetFeatureLevel, FeatureLevel: l} }

// snapshotVersion is the format version of the state's snapshot.
func snapshotVersion(t *testing.T, f *FSM) (uint32, []byte) {
	t.Helper()
	var b bytes.Buffer
	require.NoError(t, f.WriteBackup(&b))
	return binary.BigEndian.Uint32(b.Bytes()[8:12]), b.Bytes()
}

func TestFeatureLevelRaisesAndNeverLowers(t *testing.T) {
	h := newHarness(t)
	assert.Equal(t, 1, h.f.FeatureLevel(), "a state that never recorded a level is at level 1")
	assert.True(t, h.one(setLevel(1)).Err == nil && !h.one(setLevel(1)).Created, "the current level: nothing to do")

	res := h.one(setLevel(2))
	require.Nil(t, res.Err)
	assert.True(t, res.Created)
	assert.Equal(t, 2, h.f.FeatureLevel())

	res = h.one(setLevel(1))
	require.NotNil(t, res.Err)
	assert.Equal(t, CodeInvalidArgument, res.Err.Code)
	assert.Contains(t, res.Err.Message, "never lowered")
	assert.Equal(t, 2, h.f.FeatureLevel())
	assert.NotNil(t, h.one(setLevel(0)).Err)
}

// TestFeatureLevelDecidesTheSnapshotFormat: at level 1 a snapshot is
// format 3, which the release before levels reads; at level 2 it is format
// 4, and the level survives a restore.
func TestFeatureLevelDecidesTheSnapshotFormat(t *testing.T) {
	h := newHarness(t)
	h.pool("p", "10.0.0.0/24")
	h.one(txn(alloc("p", "10.0.0.7", "o")))
	v, _ := snapshotVersion(t, h.f)
	assert.Equal(t, uint32(3), v)

	h.one(setLevel(2))
	v, snap := snapshotVersion(t, h.f)
	assert.Equal(t, uint32(4), v)
	g := New(nil)
	require.NoError(t, g.Restore(io.NopCloser(bytes.NewReader(snap))))
	assert.Equal(t, 2, g.FeatureLevel())
	a, err := g.Get("p", "10.0.0.7")
	require.NoError(t, err)
	assert.Equal(t, "o", a.Owner)
}

// TestLevelAboveThisBuildStopsTheNode: an entry raising the level past
// what this build supports is one it cannot follow; like an unknown kind,
// it stops the node rather than let it diverge.
func TestLevelAboveThisBuildStopsTheNode(t *testing.T) {
	data := EncodeBatch([]*Request{setLevel(MaxFeatureLevel + 1)})
	_, err := DecodeEntry(data)
	require.Error(t, err)
	assert.Contains(t, err.Error(), "upgrade its binary")
	f := New(nil)
	assert.Panics(t, func() { f.Apply(&raft.Log{Index: 1, Type: raft.LogCommand, Data: data}) })
	assert.Equal(t, 1, f.FeatureLevel())
}

// TestKindLevels: every kind of the release before levels is level 1, so
// a cluster at level 1 proposes them to nodes of that release; the raise
// is level 2.
func TestKindLevels(t *testing.T) {
	for k := KindTxn; k <= KindImport; k++ {
		assert.Equal(t, 1, KindLevel(k), "kind %s", k)
	}
	assert.Equal(t, 2, KindLevel(KindSetFeatureLevel))
	for k, l := range kindLevels {
		assert.LessOrEqual(t, l, MaxFeatureLevel, "kind %s needs a level this build has", k)
	}
}

func TestSetFeatureLevelRoundTrip(t *testing.T) {
	reqs := []*Request{{Kind: KindSetFeatureLevel, ID: "x", FeatureLevel: 2}}
	got, err := DecodeEntry(EncodeBatch(reqs))
	require.NoError(t, err)
	assert.Equal(t, reqs, got)
	assert.NotEqual(t, setLevel(1).Fingerprint(), setLevel(2).Fingerprint())
}

// TestNonvoterMember: the row of a member kept a non-voter survives a
// snapshot, and a plain set-member row clears the mark.
func TestNonvoterMember(t *testing.T) {
	h := newHarness(t)
	h.one(setLevel(2))
	m := Member{ID: "n4", RaftAddr: "127.0.0.1:4", APIAddr: "127.0.0.1:14", Nonvoter: true}
	require.Nil(t, h.one(&Request{Kind: KindSetMemberNonvoter, Member: m}).Err)
	got, ok := h.f.Member("n4")
	require.True(t, ok)
	assert.Equal(t, m, got)

	_, snap := snapshotVersion(t, h.f)
	g := New(nil)
	require.NoError(t, g.Restore(io.NopCloser(bytes.NewReader(snap))))
	got, _ = g.Member("n4")
	assert.True(t, got.Nonvoter, "kept across a snapshot")

	require.Nil(t, h.one(&Request{Kind: KindSetMember, Member: m}).Err)
	got, _ = h.f.Member("n4")
	assert.False(t, got.Nonvoter, "a plain row makes it a voter-to-be again")

	reqs := []*Request{{Kind: KindSetMemberNonvoter, Member: m}}
	dec, err := DecodeEntry(EncodeBatch(reqs))
	require.NoError(t, err)
	assert.Equal(t, reqs, dec)
}

// TestNonvoterNeedsLevel2: below level 2 a member kept a non-voter is
// refused, since no snapshot below that level can hold one; the state
// stays one a snapshot can write.
func TestNonvoterNeedsLevel2(t *testing.T) {
	h := newHarness(t)
	m := Member{ID: "n4", RaftAddr: "127.0.0.1:4", APIAddr: "127.0.0.1:14", Nonvoter: true}
	res := h.one(&Request{Kind: KindSetMemberNonvoter, Member: m})
	require.NotNil(t, res.Err)
	assert.Equal(t, CodeInvalidArgument, res.Err.Code)
	assert.Contains(t, res.Err.Message, "needs feature level 2; the cluster is at 1")
	_, ok := h.f.Member("n4")
	assert.False(t, ok, "nothing written")
	var b bytes.Buffer
	require.NoError(t, h.f.WriteBackup(&b), "the state can still be snapshotted")
}

// TestNetworkPoolKept: from level 4 a pool the service network names
// cannot be deleted. Below it one could be, and a snapshot of what that
// left loads again (a node restarting from it, or a follower sent it,
// failed to start before), with Services answering PoolNotFound.
func TestNetworkPoolKept(t *testing.T) {
	for _, level := range []uint64{3, 4} {
		t.Run(fmt.Sprint("level=", level), func(t *testing.T) {
			h := newSvcFSM(t, "10.96.0.0/24", "30000-30099")
			require.Nil(t, h.apply(setLevel(level)).Err)
			res := h.apply(&Request{Kind: KindDeletePool, Pool: "clusterip-ipv6"})
			if level >= 4 {
				require.NotNil(t, res.Err)
				assert.Equal(t, CodePoolNotEmpty, res.Err.Code)
				assert.Equal(t, `pool "clusterip-ipv6" is the service network's IPv6 pool: point the network at another pool first (PUT /v1/service-network)`, res.Err.Message)
				assert.Len(t, h.f.Pools(), 3, "nothing deleted")
				return
			}
			require.Nil(t, res.Err, "below level 4 the empty pool goes")
			var b bytes.Buffer
			require.NoError(t, h.f.WriteBackup(&b))
			g := New(nil)
			require.NoError(t, g.Restore(io.NopCloser(bytes.NewReader(b.Bytes()))), "the state loads from its snapshot")
			assert.Equal(t, h.f.ServiceNetwork(), g.ServiceNetwork())
			dual := service.Spec{Namespace: "default", Name: "dual", IPFamilyPolicy: service.RequireDualStack}
			res = h.put(dual)
			require.NotNil(t, res.Err)
			assert.Equal(t, CodePoolNotFound, res.Err.Code)
		})
	}
}

// TestLargeResultRefused: from level 4 a transaction whose answer encodes
// to more than a snapshot keeps of a remembered result (1 MiB) is undone
// and refused; the state stays one a snapshot can write. Below it the
// transaction applied, and every snapshot failed until its result left
// the request table.
func TestLargeResultRefused(t *testing.T) {
	owner := strings.Repeat("o", MaxOwnerLen)
	for _, level := range []uint64{3, 4} {
		t.Run(fmt.Sprint("level=", level), func(t *testing.T) {
			h := newHarness(t)
			h.one(setLevel(level))
			h.pool("big", "10.128.0.0/12")
			res := h.one(&Request{Kind: KindTxn, ID: "big-count", Seed: 1, Ops: []Op{{Kind: OpAllocate, Pool: "big", Owner: owner, Count: MaxCount}}})
			var b bytes.Buffer
			if level < 4 {
				require.Nil(t, res.Err, "below level 4 replicas replay the old rule")
				return
			}
			require.NotNil(t, res.Err)
			assert.Equal(t, CodeInvalidArgument, res.Err.Code)
			assert.Contains(t, res.Err.Message, "more than the 1048576 a cluster remembers for a retry")
			assert.Zero(t, h.f.Pools()[0].Used, "nothing allocated")
			require.NoError(t, h.f.WriteBackup(&b), "the state can be snapshotted")
			again := h.one(&Request{Kind: KindTxn, ID: "big-count", Seed: 2, Ops: []Op{{Kind: OpAllocate, Pool: "big", Owner: owner, Count: MaxCount}}})
			assert.Equal(t, res.Err, again.Err, "a retry gets the same refusal")
			ok := h.one(&Request{Kind: KindTxn, ID: "short", Seed: 3, Ops: []Op{{Kind: OpAllocate, Pool: "big", Owner: "svc", Count: MaxCount}}})
			require.Nil(t, ok.Err, "the same count with a short owner fits")
			b.Reset()
			require.NoError(t, h.f.WriteBackup(&b))
		})
	}
}

// TestPutServiceV2: the singular clusterIP travels in the log entry, and
// an update naming only a dual-stack Service's stored primary keeps both
// IPs. Below level 5 the kind is refused and changes nothing.
func TestPutServiceV2(t *testing.T) {
	h := newSvcFSM(t, "10.96.0.0/24", "30000-30099")
	dual := service.Spec{Namespace: "ns", Name: "d", IPFamilyPolicy: service.RequireDualStack}
	created := h.put(dual)
	require.Nil(t, created.Err)
	ips := created.Service.Spec.ClusterIPs
	require.Len(t, ips, 2)

	v2 := &Request{Kind: KindPutServiceV2, ID: "v2", Seed: 3, Service: &service.Spec{Namespace: "ns", Name: "d", ClusterIP: ips[0]}}
	dec, err := DecodeEntry(EncodeBatch([]*Request{v2}))
	require.NoError(t, err)
	assert.Equal(t, []*Request{v2}, dec, "the singular survives the log encoding")
	res := h.apply(v2)
	require.NotNil(t, res.Err)
	assert.Equal(t, CodeInvalidArgument, res.Err.Code)
	assert.Contains(t, res.Err.Message, "needs feature level 5")
	got, err := h.f.Service("ns", "d")
	require.NoError(t, err)
	assert.Equal(t, created.Service.Revision, got.Revision, "refused below level 5: nothing written")

	h.apply(setLevel(5))
	res = h.apply(&Request{Kind: KindPutServiceV2, Service: &service.Spec{Namespace: "ns", Name: "d", ClusterIP: ips[0]}})
	require.Nil(t, res.Err)
	assert.Equal(t, ips, res.Service.Spec.ClusterIPs, "the secondary is kept")
	assert.Empty(t, res.Service.Spec.ClusterIP, "the record holds no singular")
	assert.Equal(t, created.Service.Revision, res.Service.Revision, "nothing changed, so nothing was written")

	res = h.apply(&Request{Kind: KindPutServiceV2, Service: &service.Spec{Namespace: "ns", Name: "d", ClusterIP: "10.96.0.200"}})
	require.NotNil(t, res.Err)
	assert.Equal(t, CodeInvalid, res.Err.Code)
	got, _ = h.f.Service("ns", "d")
	assert.Equal(t, ips, got.Spec.ClusterIPs, "a refused write changes nothing")
}

// TestPutServiceV2RetryAcrossRaise: a write sent under one request ID as a
// put-service (the singular folded, below level 5) and retried as a
// put-service-v2 after the raise, or the other way round, is one request:
// the retry answers the first attempt's result and applies nothing again.
func TestPutServiceV2RetryAcrossRaise(t *testing.T) {
	for _, first := range []Kind{KindPutService, KindPutServiceV2} {
		t.Run(first.String(), func(t *testing.T) {
			h := newSvcFSM(t, "10.96.0.0/24", "30000-30099")
			h.apply(setLevel(5))
			ip := "10.96.0.7"
			folded := &Request{Kind: KindPutService, ID: "k", Service: &service.Spec{Namespace: "ns", Name: "s", ClusterIPs: []string{ip}}}
			v2 := &Request{Kind: KindPutServiceV2, ID: "k", Service: &service.Spec{Namespace: "ns", Name: "s", ClusterIP: ip}}
			a, b := folded, v2
			if first == KindPutServiceV2 {
				a, b = v2, folded
			}
			res := h.apply(a)
			require.Nil(t, res.Err)
			require.True(t, res.Created)
			// The Service is deleted meanwhile: a retry that applied again
			// would create it afresh.
			require.Nil(t, h.apply(&Request{Kind: KindDeleteService, Service: &service.Spec{Namespace: "ns", Name: "s"}}).Err)
			again := h.apply(b)
			require.Nil(t, again.Err, "the retry is the same request")
			assert.Equal(t, res.Index, again.Index, "the first attempt's answer")
			_, err := h.f.Service("ns", "s")
			require.Error(t, err, "nothing applied again")

			other := &Request{Kind: KindPutServiceV2, ID: "k", Service: &service.Spec{Namespace: "ns", Name: "s", ClusterIP: "10.96.0.8"}}
			assert.Equal(t, CodeIdempotencyKeyReused, h.apply(other).Err.Code, "another singular is another request")
		})
	}
}
