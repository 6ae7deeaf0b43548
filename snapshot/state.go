package snapshot

import (
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"math/bits"

	"github.com/rangealloc/rangealloc/internal/limits"
)

// State is everything a snapshot holds: the plain types the state machine
// fills before Write and consumes after Read.
type State struct {
	Index uint64 // the last applied log index
	Term  uint64 // the term of that entry
	// Pools is sorted by Name; names are unique.
	Pools []Pool
	// Requests is the request-ID table, oldest first (log order); IDs are
	// unique.
	Requests []Request
	// Members is sorted by ID; IDs are unique.
	Members []Member
	// ClusterID is the cluster's ID, "" while it has none (and in a
	// version 1 snapshot).
	ClusterID string
	// FromBackup marks a state restored from a backup: it replaces any
	// state, whatever its index. A snapshot without it is refused by a
	// state machine that has applied past its index.
	FromBackup bool
	// Network is the service network, nil when none is set (and in
	// snapshots before version 3).
	Network *Network
	// Services are the Service records, sorted by Key; keys are unique.
	Services []Service
	// ServicesFreed is the index of the last entry that freed a value a
	// Service held (0: none, and before version 3).
	ServicesFreed uint64
	// FeatureLevel is the cluster's replicated feature level. 0 and 1 both
	// mean level 1, which Write encodes as version 3, the format every
	// release since Services reads; 2 and above need version 4, which
	// records the level. The level decides the format so that a snapshot
	// is written in a format every member reads.
	FeatureLevel uint64
}

// Network is the service network: its IP families in order ("IPv4",
// "IPv6"), the pool of each, and the node-port pool.
type Network struct {
	Families     []string
	IPv4Pool     string
	IPv6Pool     string
	NodePortPool string
}

// Service is a Service record: its key ("namespace/name"), the log index
// of its last write, and its spec in the state machine's encoding
// (opaque to this package).
type Service struct {
	Key      string
	Revision uint64
	Spec     []byte
}

// Pool is a Kubernetes RangeAllocation record plus one record per allocated
// offset.
type Pool struct {
	Name  string // a lowercase DNS label
	Range string // the canonical range string: "10.96.0.0/12", "fd00::/112", "30000-32767"
	// Data is the bitmap: the big-endian, minimal-length bytes of the
	// integer whose bit i is offset i (math/big.Int.Bytes()). Leading zero
	// bytes are allowed and kept.
	Data []byte
	// Allocations has one record per set bit of Data, in ascending offset
	// order: len(Allocations) always equals the number of set bits.
	Allocations []Allocation
}

// Allocation is what is known of one allocated offset besides its bit.
type Allocation struct {
	Owner    string // opaque, chosen by the caller
	Static   bool   // the caller named the value (mode static), or not (dynamic)
	Revision uint64 // the log index that made the allocation, > 0
}

// Request is a remembered request: its ID, the log index that applied it,
// its fingerprint and its encoded result.
type Request struct {
	ID          string
	Index       uint64
	Fingerprint uint64
	Result      []byte // opaque to this package
}

// Member is a row of the member table.
type Member struct {
	ID       string
	RaftAddr string
	APIAddr  string
	// Nonvoter keeps the member a non-voter: the leader does not promote
	// it (version 4 only).
	Nonvoter bool
}

// Format constants; doc.go draws the layout.
const (
	magic   = "\x89RAS\r\n\x1a\n"
	version = 4 // the newest Read reads: 1 (no cluster section), 2 (no services section), 3 (no feature level), 4
	// versionLevel1 is what Write writes for feature level 0 or 1.
	versionLevel1 = 3
	headerSize    = len(magic) + 4 + 8 + 8
	tagPools      = 'P'
	tagReqs       = 'R'
	tagMembers    = 'M'
	tagCluster    = 'C'
	tagSvc        = 'S'
	tagFeature    = 'F'
	flagBackup    = 1 << 0 // the cluster section's flags
	flagStatic    = 1 << 0
	// flagNonvoter, in a member's flags (version 4), keeps it a non-voter.
	flagNonvoter = 1 << 0
	bufSize      = 64 << 10
)

// Limits on every length Read accepts, in bytes. Read checks a length
// against its limit before it allocates for it. Those the state machine
// checks too are defined once, in package limits.
const (
	maxName     = limits.MaxPoolName
	maxRange    = limits.MaxRangeLen
	maxData     = 1<<limits.MaxHostBits/8 + 1 // 2^20 bits, plus one leading zero byte
	maxOwner    = limits.MaxOwnerLen
	maxReqID    = limits.MaxRequestID
	maxResult   = limits.MaxRememberedResult
	maxMemberID = limits.MaxMemberID
	maxAddr     = limits.MaxAddressLen
	maxCluster  = limits.MaxClusterID
	maxSvcKey   = limits.MaxServiceKey // a 63-byte namespace, "/", a 63-byte name
	maxSpec     = 1 << 20
	maxFamilies = limits.MaxFamilies
	maxFeature  = 1 << 16
	// maxPrealloc is the first capacity of a slice whose length was read
	// off the stream; it grows from there as elements arrive.
	maxPrealloc = 1024
)

var castagnoli = crc32.MakeTable(crc32.Castagnoli)

// popcount returns the number of set bits in data.
func popcount(data []byte) int {
	n := 0
	for len(data) >= 8 {
		n += bits.OnesCount64(binary.LittleEndian.Uint64(data))
		data = data[8:]
	}
	for _, b := range data {
		n += bits.OnesCount8(b)
	}
	return n
}

// checkLen checks that a field of n bytes is within [lo, hi].
func checkLen(what string, n, lo, hi uint64) error {
	if n < lo || n > hi {
		if lo == 0 {
			return fmt.Errorf("%s is %d bytes, want at most %d", what, n, hi)
		}
		return fmt.Errorf("%s is %d bytes, want %d to %d", what, n, lo, hi)
	}
	return nil
}

// checkLabel checks that name is a lowercase DNS label (RFC 1123):
// [a-z0-9]([-a-z0-9]*[a-z0-9])?, at most 63 bytes.
func checkLabel(name string) error {
	if err := checkLen("pool name", uint64(len(name)), 1, maxName); err != nil {
		return err
	}
	for i := 0; i < len(name); i++ {
		c := name[i]
		alnum := 'a' <= c && c <= 'z' || '0' <= c && c <= '9'
		if !alnum && (c != '-' || i == 0 || i == len(name)-1) {
			return fmt.Errorf("pool name %q is not a lowercase DNS label", name)
		}
	}
	return nil
}

// checkRange checks a range string's length and alphabet; parsing it is
// the state machine's job.
func checkRange(r string) error {
	if err := checkLen("range", uint64(len(r)), 1, maxRange); err != nil {
		return err
	}
	return checkPrintable("range", r)
}

// checkAllocations checks that k records fit data's set bits.
func checkAllocations(k uint64, data []byte) error {
	if set := popcount(data); k != uint64(set) {
		return fmt.Errorf("%d allocation records for %d set bits", k, set)
	}
	return nil
}

// checkOrder checks that key sorts strictly after prev (i > 0).
func checkOrder(what string, i int, prev, key string) error {
	if i > 0 && key <= prev {
		if key == prev {
			return fmt.Errorf("%s %q appears twice", what, key)
		}
		return fmt.Errorf("%s %q sorts before %q, the one preceding it", what, key, prev)
	}
	return nil
}

// validate checks s against every rule Read checks, so that Write never
// produces a snapshot Read refuses.
func validate(s *State) error {
	if s == nil {
		return fmt.Errorf("%w: nil state", ErrInvalid)
	}
	for i := range s.Pools {
		if err := validatePool(&s.Pools[i], i, s.Pools); err != nil {
			return fmt.Errorf("%w: pool %d%s: %w", ErrInvalid, i, where(s.Pools[i].Name, "", -1), err)
		}
	}
	seen := make(map[string]struct{}, len(s.Requests))
	for i, r := range s.Requests {
		if err := validateRequest(&r, seen); err != nil {
			return fmt.Errorf("%w: request %d%s: %w", ErrInvalid, i, where(r.ID, "", -1), err)
		}
	}
	for i, m := range s.Members {
		if err := validateMember(&m, i, s.Members); err != nil {
			return fmt.Errorf("%w: member %d%s: %w", ErrInvalid, i, where(m.ID, "", -1), err)
		}
	}
	if err := checkClusterID(s.ClusterID); err != nil {
		return fmt.Errorf("%w: %w", ErrInvalid, err)
	}
	for _, m := range s.Members {
		if m.Nonvoter && s.FeatureLevel < 2 {
			return fmt.Errorf("%w: member %q stays a non-voter, which needs feature level 2 (format 4)", ErrInvalid, m.ID)
		}
	}
	if s.FeatureLevel > maxFeature {
		return fmt.Errorf("%w: feature level %d: at most %d", ErrInvalid, s.FeatureLevel, maxFeature)
	}
	if err := validateNetwork(s.Network); err != nil {
		return fmt.Errorf("%w: service network: %w", ErrInvalid, err)
	}
	for i, sv := range s.Services {
		if err := validateService(&sv, i, s.Services); err != nil {
			return fmt.Errorf("%w: Service %d%s: %w", ErrInvalid, i, where(sv.Key, "", -1), err)
		}
	}
	return nil
}

func validateNetwork(n *Network) error {
	if n == nil {
		return nil
	}
	if len(n.Families) < 1 || len(n.Families) > maxFamilies {
		return fmt.Errorf("%d families, want 1 or 2", len(n.Families))
	}
	for _, f := range n.Families {
		if f != "IPv4" && f != "IPv6" {
			return fmt.Errorf("family %q, want IPv4 or IPv6", f)
		}
	}
	for _, p := range []string{n.IPv4Pool, n.IPv6Pool, n.NodePortPool} {
		if err := checkLen("pool name", uint64(len(p)), 0, maxName); err != nil {
			return err
		}
	}
	return nil
}

func validateService(sv *Service, i int, all []Service) error {
	if err := checkLen("Service key", uint64(len(sv.Key)), 3, maxSvcKey); err != nil {
		return err
	}
	if err := checkPrintable("Service key", sv.Key); err != nil {
		return err
	}
	if i > 0 {
		if err := checkOrder("Service key", i, all[i-1].Key, sv.Key); err != nil {
			return err
		}
	}
	if sv.Revision == 0 {
		return errors.New("revision 0")
	}
	return checkLen("Service spec", uint64(len(sv.Spec)), 1, maxSpec)
}

// checkClusterID checks a cluster ID: at most 64 bytes of printable ASCII.
func checkClusterID(id string) error {
	if err := checkLen("cluster ID", uint64(len(id)), 0, maxCluster); err != nil {
		return err
	}
	return checkPrintable("cluster ID", id)
}

// checkPrintable checks that s is printable ASCII without spaces.
func checkPrintable(what, s string) error {
	for i := 0; i < len(s); i++ {
		if s[i] <= ' ' || s[i] > '~' {
			return fmt.Errorf("%s %q has a byte 0x%02x that is not printable ASCII", what, s, s[i])
		}
	}
	return nil
}

func validatePool(p *Pool, i int, pools []Pool) error {
	if err := checkLabel(p.Name); err != nil {
		return err
	}
	if i > 0 {
		if err := checkOrder("pool name", i, pools[i-1].Name, p.Name); err != nil {
			return err
		}
	}
	if err := checkRange(p.Range); err != nil {
		return err
	}
	if err := checkLen("data", uint64(len(p.Data)), 0, maxData); err != nil {
		return err
	}
	if err := checkAllocations(uint64(len(p.Allocations)), p.Data); err != nil {
		return err
	}
	for j, a := range p.Allocations {
		if err := checkLen("owner", uint64(len(a.Owner)), 0, maxOwner); err != nil {
			return fmt.Errorf("allocation %d: %w", j, err)
		}
		if a.Revision == 0 {
			return fmt.Errorf("allocation %d: revision 0", j)
		}
	}
	return nil
}

func validateRequest(r *Request, seen map[string]struct{}) error {
	if err := checkLen("request ID", uint64(len(r.ID)), 1, maxReqID); err != nil {
		return err
	}
	if _, dup := seen[r.ID]; dup {
		return fmt.Errorf("request ID %q appears twice", r.ID)
	}
	seen[r.ID] = struct{}{}
	return checkLen("result", uint64(len(r.Result)), 0, maxResult)
}

func validateMember(m *Member, i int, members []Member) error {
	if err := checkLen("member ID", uint64(len(m.ID)), 1, maxMemberID); err != nil {
		return err
	}
	if i > 0 {
		if err := checkOrder("member ID", i, members[i-1].ID, m.ID); err != nil {
			return err
		}
	}
	if err := checkLen("raft address", uint64(len(m.RaftAddr)), 0, maxAddr); err != nil {
		return err
	}
	return checkLen("API address", uint64(len(m.APIAddr)), 0, maxAddr)
}
