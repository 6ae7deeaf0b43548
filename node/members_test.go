package node

import (
	"context"
	"testing"
	"time"

	"github.com/hashicorp/raft"
	"github.com/rangealloc/rangealloc/fsm"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestRemoveMemberRetried: a member removal under a request ID answers a
// retry as the first call did, finishing what that call left, and refuses
// the ID of another request.
func TestRemoveMemberRetried(t *testing.T) {
	c := newDiskCluster(t, nil)
	l := c.leader(t)
	var fs []*Node
	for _, n := range c.nodes {
		if n != l {
			fs = append(fs, n)
		}
	}
	a, b := fs[0], fs[1]
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	members := func() []string {
		t.Helper()
		st, err := l.Cluster()
		require.NoError(t, err)
		var ids []string
		for _, m := range st.Members {
			ids = append(ids, m.ID)
		}
		return ids
	}

	// A first call that removed a's row under its ID, then stopped (its
	// leader crashed, say) before the configuration change.
	res, err := l.submit(ctx, &fsm.Request{Kind: fsm.KindRemoveMember, ID: "remove-a", Member: fsm.Member{ID: a.ID()}})
	require.NoError(t, err)
	require.Nil(t, res.Err)
	require.Contains(t, members(), a.ID())
	require.NoError(t, b.RemoveMember(ctx, a.ID(), "remove-a"), "the retry, through a follower, finishes the removal")
	assert.NotContains(t, members(), a.ID())
	require.NoError(t, l.RemoveMember(ctx, a.ID(), "remove-a"), "and a retry after it answers as the first call did")
	assert.ErrorIs(t, l.RemoveMember(ctx, a.ID(), ""), &fsm.Error{Code: fsm.CodeMemberNotFound}, "without the ID, the member is gone")
	// A member added again under the same name (to the configuration,
	// and its row) is not removed by a retry of the old call.
	require.NoError(t, l.raft.AddNonvoter(raft.ServerID(a.ID()), raft.ServerAddress(a.RaftAddr()), 0, 0).Error())
	res, err = l.submit(ctx, &fsm.Request{Kind: fsm.KindSetMember, Member: fsm.Member{ID: a.ID(), RaftAddr: a.RaftAddr()}})
	require.NoError(t, err)
	require.Nil(t, res.Err)
	require.NoError(t, l.RemoveMember(ctx, a.ID(), "remove-a"))
	assert.Contains(t, members(), a.ID(), "the retry removed the member added since")
	_, inTable := l.fsm.Member(a.ID())
	assert.True(t, inTable, "the retry removed the row of the member added since")
	require.NoError(t, l.RemoveMember(ctx, a.ID(), ""))

	// The ID of another request is refused, and removes nothing.
	assert.ErrorIs(t, l.RemoveMember(ctx, b.ID(), "remove-a"), &fsm.Error{Code: fsm.CodeIdempotencyKeyReused})
	_, err = l.Allocate(ctx, "nodeport", "", "web", 0, "alloc-1")
	require.NoError(t, err)
	assert.ErrorIs(t, b.RemoveMember(ctx, b.ID(), "alloc-1"), &fsm.Error{Code: fsm.CodeIdempotencyKeyReused})
	require.Contains(t, members(), b.ID())
	_, inTable = l.fsm.Member(b.ID())
	require.True(t, inTable)

	// A member in the configuration without a row (an earlier call
	// removed the row without an ID): the first call under an ID still
	// writes an entry, so that its retry knows it.
	res, err = l.submit(ctx, &fsm.Request{Kind: fsm.KindRemoveMember, Member: fsm.Member{ID: b.ID()}})
	require.NoError(t, err)
	require.Nil(t, res.Err)
	require.NoError(t, l.RemoveMember(ctx, b.ID(), "remove-b"))
	assert.Equal(t, []string{l.ID()}, members())
	require.NoError(t, l.RemoveMember(ctx, b.ID(), "remove-b"), "the retry answers as the first call did")
	assert.ErrorIs(t, l.RemoveMember(ctx, l.ID(), "remove-l"), &fsm.Error{Code: fsm.CodeLastVoter}, "the checks still hold under an ID")
}
