package node

import (
	"errors"
	"testing"

	"github.com/rangealloc/rangealloc/fsm"
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

// TestOlderLeader: net/rpc's answer for a method the leader's release does
// not have is a definite VersionMismatch; other errors are not.
func TestOlderLeader(t *testing.T) {
	e := olderLeader("127.0.0.1:7081", "FinalizeUpgrade", errors.New("rpc: can't find method Node.FinalizeUpgrade"))
	require.NotNil(t, e)
	assert.Equal(t, fsm.CodeVersionMismatch, e.Code)
	assert.Contains(t, e.Message, "127.0.0.1:7081 runs an older release, which has no FinalizeUpgrade")
	assert.Nil(t, olderLeader("127.0.0.1:7081", "FinalizeUpgrade", errors.New("connection refused")))
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
