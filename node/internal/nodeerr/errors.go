package nodeerr

import "errors"

// The values of node.ErrNoLeader, node.ErrNotLeader, node.ErrUnknownOutcome,
// node.ErrClosed and node.ErrInvalidBackup; see node for what each means.
var (
	ErrNoLeader       = errors.New("no leader")
	ErrNotLeader      = errors.New("not the leader")
	ErrUnknownOutcome = errors.New("outcome unknown")
	ErrClosed         = errors.New("node closed")
	ErrInvalidBackup  = errors.New("invalid backup")
)
