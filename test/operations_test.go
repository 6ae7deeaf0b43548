package test

import (
	"testing"
	"time"

	"github.com/rangealloc/rangealloc/fsm"
	"github.com/rangealloc/rangealloc/test/cluster"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestOperationsThatCannotSucceed: each answers at once with a definite
// error, or succeeds at once when there is nothing to do, and changes nothing.
func TestOperationsThatCannotSucceed(t *testing.T) {
	c := cluster.New(t, 1, cluster.Options{Pools: testPools})
	l := waitPools(t, c)
	ctx := ctxT(t, 10*time.Second)
	before, err := l.Node.Cluster()
	require.NoError(t, err)

	start := time.Now()
	err = l.Node.RemoveMember(ctx, l.ID)
	assert.ErrorIs(t, err, &fsm.Error{Code: fsm.CodeLastVoter}, "removing the only voter")
	require.NoError(t, l.Node.TransferLeadership(ctx, l.ID), "a transfer to the leader itself is done")
	err = l.Node.TransferLeadership(ctx, "")
	assert.ErrorIs(t, err, &fsm.Error{Code: fsm.CodeLastVoter}, "a transfer with no other voter")
	err = l.Node.TransferLeadership(ctx, "nope")
	assert.ErrorIs(t, err, &fsm.Error{Code: fsm.CodeMemberNotFound}, "a transfer to an unknown member")
	assert.Less(t, time.Since(start), 2*time.Second, "every answer is definite and immediate, not a retry until the deadline")

	after, err := l.Node.Cluster()
	require.NoError(t, err)
	assert.Equal(t, membership(before), membership(after), "membership unchanged")
	_, ok := l.Node.LocalState().Member(l.ID)
	assert.True(t, ok, "the member row is still there")
	assert.True(t, l.Node.IsLeader())
	_, err = l.Node.Allocate(ctx, "ip", "", "still-works", 0, "")
	require.NoError(t, err, "the cluster still commits")
}

// TestTransferToLeaderThroughFollower: a transfer to the current leader,
// asked on a follower, is done at once.
func TestTransferToLeaderThroughFollower(t *testing.T) {
	c := cluster.New(t, 3, cluster.Options{Pools: testPools})
	l := waitPools(t, c)
	f := follower(c, l)
	ctx := ctxT(t, 10*time.Second)
	start := time.Now()
	require.NoError(t, f.Node.TransferLeadership(ctx, l.ID))
	assert.Less(t, time.Since(start), 2*time.Second)
	assert.True(t, l.Node.IsLeader(), "leadership stayed")
}
