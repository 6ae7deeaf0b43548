package node

import (
	"context"
	"testing"
	"time"

	"github.com/rangealloc/rangealloc/fsm"
	"github.com/rangealloc/rangealloc/service"
	"github.com/rangealloc/rangealloc/version"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestProtocolRefusesNewer: a forwarded call of a newer protocol than this
// node speaks is refused as VersionMismatch; this protocol and the
// previous release's (0, which sends none) pass.
func TestProtocolRefusesNewer(t *testing.T) {
	s := &rpcService{n: &Node{id: "n1"}}
	assert.Nil(t, s.protocol(0))
	assert.Nil(t, s.protocol(version.Protocol))
	e := s.protocol(version.Protocol + 1)
	require.NotNil(t, e)
	require.NotNil(t, e.Domain)
	assert.Equal(t, fsm.CodeVersionMismatch, e.Domain.Code)
	assert.Contains(t, e.Domain.Message, "leader n1")
}

// TestCheckKindLevel: a level-2 kind is refused at level 1 and passes at
// 2; the raise itself is never refused here (its proposer checks members).
func TestCheckKindLevel(t *testing.T) {
	e := checkKindLevel(fsm.KindSetMemberNonvoter, 1)
	require.NotNil(t, e)
	assert.Equal(t, fsm.CodeVersionMismatch, e.Code)
	assert.Contains(t, e.Message, "needs feature level 2, and the cluster is at 1")
	assert.Nil(t, checkKindLevel(fsm.KindSetMemberNonvoter, 2))
	assert.Nil(t, checkKindLevel(fsm.KindSetFeatureLevel, 1))
	assert.Nil(t, checkKindLevel(fsm.KindTxn, 1))
}

// TestKindAboveLevelRefused: a leader refuses a kind its cluster's level
// does not have, after catching up, and nothing is applied.
func TestKindAboveLevelRefused(t *testing.T) {
	cfg := testConfig(t, t.TempDir())
	cfg.MaxFeatureLevel = 4
	n := openReady(t, cfg)
	require.Eventually(t, func() bool { return n.fsm.FeatureLevel() == 4 }, 10*time.Second, 10*time.Millisecond)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()

	v2 := &fsm.Request{Kind: fsm.KindPutServiceV2, ID: "v2", Service: &service.Spec{Namespace: "ns", Name: "s", ClusterIP: "10.96.0.9"}}
	res, err := n.submit(ctx, v2)
	require.NoError(t, err)
	require.NotNil(t, res.Err)
	assert.Equal(t, fsm.CodeVersionMismatch, res.Err.Code)
	assert.Contains(t, res.Err.Message, "put-service-v2 needs feature level 5, and the cluster is at 4")
	_, remembered := n.fsm.RequestResult("v2")
	assert.False(t, remembered, "nothing applied")

	done, stop := context.WithCancel(context.Background())
	stop()
	assert.Equal(t, outcome{}, n.levels.checkKind(done, fsm.KindTxn), "a kind the level has passes at once, without a catch-up")
}
