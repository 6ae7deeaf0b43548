// Package limits defines, once each, the bounds on what a request, the
// replicated state and a snapshot hold. Proposers check a request against
// them, the state machine (package fsm) again in Apply, and the snapshot
// codec when it reads and writes, so they must agree: every state Apply
// can reach is one a snapshot can hold. Lengths are in bytes.
//
// It imports nothing, so every package can refer to it; package fsm gives
// the ones its callers need its own names (fsm.MaxOps ...). The limits of
// a list call (api/types.DefaultLimit, MaxLimit) are api/types' own: that
// package imports only the standard library.
package limits

// Limits of a request.
const (
	// MaxOps bounds the operations of one transaction.
	MaxOps = 4096
	// MaxCount bounds the values of one count allocation.
	MaxCount = 4096
	// MaxOwnerLen bounds an owner (the length of a DNS subdomain).
	MaxOwnerLen = 253
	// MaxRequestID bounds a request ID, and so an Idempotency-Key.
	MaxRequestID = 128
	// MaxValueLen bounds a value.
	MaxValueLen = 64
	// MaxRangeLen bounds a range string.
	MaxRangeLen = 64
	// MaxMemberID bounds a member's ID.
	MaxMemberID = 128
	// MaxAddressLen bounds a member's Raft and API addresses.
	MaxAddressLen = 256
	// MaxClusterID bounds a cluster ID (which the transport's handshake
	// carries too).
	MaxClusterID = 64
)

// Names that are DNS labels.
const (
	// MaxLabel is a DNS label's length.
	MaxLabel = 63
	// MaxPoolName bounds a pool name, a DNS label.
	MaxPoolName = MaxLabel
	// MaxNamespace bounds a Service's namespace, a DNS-1123 label.
	MaxNamespace = MaxLabel
	// MaxServiceName bounds a Service's name, a DNS-1035 label.
	MaxServiceName = MaxLabel
	// MaxServiceKey bounds a stored Service's key, "namespace/name".
	MaxServiceKey = MaxNamespace + 1 + MaxServiceName
)

// Limits of a Service write.
const (
	// MaxServicePorts bounds the ports of one Service.
	MaxServicePorts = 256
	// MaxUIDLen bounds a Service's uid.
	MaxUIDLen = 128
	// MaxFieldLen bounds any other string field of a Service.
	MaxFieldLen = 1024
	// MaxFamilies is the most IP families a service network has.
	MaxFamilies = 2
)

// Limits of the replicated state.
const (
	// MaxHostBits bounds IP ranges: at most 2^20 addresses (an IPv4 /12,
	// an IPv6 /108), so a pool's bitmap is at most 128 KiB. Port ranges
	// are smaller.
	MaxHostBits = 20
	// MaxRememberedResult bounds the encoded result of a request that
	// the request table remembers for a retry, and so a snapshot holds.
	MaxRememberedResult = 1 << 20
)
