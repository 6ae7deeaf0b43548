package forward

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/rangealloc/rangealloc/fsm"
	"github.com/rangealloc/rangealloc/node/internal/wire"
)

// TestOlderLeader: net/rpc's answer for a method the leader's release does
// not have is a definite VersionMismatch; other errors are not.
func TestOlderLeader(t *testing.T) {
	e := olderLeader("127.0.0.1:7081", "FinalizeUpgrade", errors.New("rpc: can't find method Node.FinalizeUpgrade"))
	require.NotNil(t, e)
	assert.Equal(t, fsm.CodeVersionMismatch, e.Code)
	assert.Contains(t, e.Message, "127.0.0.1:7081 runs an older release, which has no FinalizeUpgrade")
	assert.Nil(t, olderLeader("127.0.0.1:7081", "FinalizeUpgrade", errors.New("connection refused")))
}

// memberLeader serves RemoveMember only, as a leader of a release before
// member removals carried request IDs; newMemberLeader serves
// RemoveMemberRequest too. Each hands on what it was asked.
type memberLeader struct{ got chan any }

func (l memberLeader) RemoveMember(id string, _ *wire.CallReply) error {
	l.got <- id
	return nil
}

type newMemberLeader struct{ memberLeader }

func (l newMemberLeader) RemoveMemberRequest(args *wire.RemoveMemberArgs, _ *wire.CallReply) error {
	l.got <- *args
	return nil
}

// TestRemoveMemberOlderLeader: a follower forwards a removal with its
// request ID. A leader of an older release, which has no
// RemoveMemberRequest, still removes the member when the ID is one the
// node drew; a caller's ID it could not keep is refused, not dropped.
func TestRemoveMemberOlderLeader(t *testing.T) {
	c := newClient(t, nil, 0)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	got := make(chan any, 1)
	keyed := &wire.RemoveMemberArgs{ID: "n4", RequestID: "remove-n4"}
	drawn := &wire.RemoveMemberArgs{ID: "n4", RequestID: fsm.DrawnRequestPrefix + "00000000-0000-4000-8000-000000000000"}

	addr, _ := serveFake(t, "", newMemberLeader{memberLeader{got}})
	_, err := c.Cluster(ctx, addr, wire.MethodRemoveMemberRequest, keyed)
	require.NoError(t, err)
	assert.Equal(t, *keyed, <-got)

	old, _ := serveFake(t, "", memberLeader{got})
	maybe, err := c.Cluster(ctx, old, wire.MethodRemoveMemberRequest, keyed)
	require.ErrorIs(t, err, &fsm.Error{Code: fsm.CodeVersionMismatch})
	assert.False(t, maybe, "a refusal: nothing was applied")
	assert.Empty(t, got, "nothing removed")
	_, err = c.Cluster(ctx, old, wire.MethodRemoveMemberRequest, drawn)
	require.NoError(t, err)
	assert.Equal(t, "n4", <-got, "the older leader removes the member")
}
