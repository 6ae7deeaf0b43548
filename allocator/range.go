package allocator

import (
	"encoding/binary"
	"fmt"
	"net/netip"
	"strconv"
	"strings"

	"github.com/rangealloc/rangealloc/internal/limits"
)

// Kind tells IP ranges from port ranges.
type Kind uint8

// The kinds of range.
const (
	KindIP   Kind = 1
	KindPort Kind = 2
)

func (k Kind) String() string {
	switch k {
	case KindIP:
		return "ip"
	case KindPort:
		return "port"
	}
	return fmt.Sprintf("Kind(%d)", uint8(k))
}

// MaxHostBits bounds IP ranges: at most 2^20 addresses (an IPv4 /12, an
// IPv6 /108), so a bitmap is at most 128 KiB. Package limits defines it,
// for the snapshot codec's bound on a bitmap too.
const MaxHostBits = limits.MaxHostBits

// Range is a set of allocatable values mapped onto offsets [0, Size()).
type Range interface {
	// Kind is KindIP or KindPort.
	Kind() Kind
	// String is the canonical range string: "10.96.0.0/12", "fd00::/112", "30000-32767".
	String() string
	// Family is "IPv4" or "IPv6" for IP ranges, "" for port ranges.
	Family() string
	// Size is the number of usable values, always at least 1.
	Size() int
	// StaticSize is B, the size of the static band (KEP-3070, KEP-3668).
	StaticSize() int
	// Offset parses value and returns its offset. Errors match
	// ErrInvalidValue (does not parse) or ErrNotInRange (parses, outside).
	Offset(value string) (int, error)
	// Value returns the canonical value at offset off, for 0 <= off < Size().
	Value(off int) string
}

// ParseRange parses a CIDR ("10.96.0.0/12", canonicalised to its network)
// as an IP range, or "first-last" / "N" as a port range. Errors match
// ErrInvalidRange and name the input.
func ParseRange(s string) (Range, error) {
	if strings.Contains(s, "/") {
		return ParseIPRange(s)
	}
	return ParsePortRange(s)
}

// bandSize is B for a range of n values (raw CIDR size for IPs, size for
// ports) with the given clamp bounds, dropped to 0 when it would leave no
// dynamic band:
//
//	B = 0 if n <= 16, else min(max(16, n/div), max)
func bandSize(n, usable, div, maxB int) int {
	if n <= 16 {
		return 0
	}
	b := min(max(16, n/div), maxB)
	if b >= usable {
		return 0
	}
	return b
}

// IPRange is a CIDR. Offset 0 is the network address + 1; the network
// address is never allocatable, nor is the IPv4 broadcast address.
type IPRange struct {
	prefix   netip.Prefix // masked
	hostBits int
	size     int
	static   int
}

// ParseIPRange parses a CIDR and canonicalises it to its network.
func ParseIPRange(s string) (*IPRange, error) {
	p, err := netip.ParsePrefix(s)
	if err != nil {
		return nil, fmt.Errorf("%w %q: not a CIDR: %v", ErrInvalidRange, s, err)
	}
	p = p.Masked()
	hostBits := p.Addr().BitLen() - p.Bits()
	if hostBits > MaxHostBits {
		return nil, fmt.Errorf("%w %q: %d host bits; at most %d are supported (an IPv4 /%d or IPv6 /%d)",
			ErrInvalidRange, s, hostBits, MaxHostBits, 32-MaxHostBits, 128-MaxHostBits)
	}
	n := 1 << hostBits
	usable := n - 1 // the network address
	if p.Addr().Is4() {
		usable-- // the broadcast address
	}
	if usable <= 0 {
		return nil, fmt.Errorf("%w %q: no allocatable addresses", ErrInvalidRange, s)
	}
	return &IPRange{prefix: p, hostBits: hostBits, size: usable, static: bandSize(n, usable, 16, 256)}, nil
}

// Kind returns KindIP.
func (r *IPRange) Kind() Kind { return KindIP }

// String returns the canonical CIDR.
func (r *IPRange) String() string { return r.prefix.String() }

// Family returns "IPv4" or "IPv6".
func (r *IPRange) Family() string {
	if r.prefix.Addr().Is4() {
		return "IPv4"
	}
	return "IPv6"
}

// Size returns the number of usable addresses.
func (r *IPRange) Size() int { return r.size }

// StaticSize returns B.
func (r *IPRange) StaticSize() int { return r.static }

// Prefix returns the canonical network prefix.
func (r *IPRange) Prefix() netip.Prefix { return r.prefix }

// Offset parses an address and returns its offset. An IPv4-mapped IPv6
// address names its IPv4 address. Because a range has at most 2^20
// addresses, the offset is exactly the host part (the low hostBits bits,
// which lie in the last four bytes) minus one, for IPv4 and IPv6 alike.
func (r *IPRange) Offset(value string) (int, error) {
	a, err := netip.ParseAddr(value)
	if err != nil || a.Zone() != "" {
		return 0, fmt.Errorf("%w: %q is not an IP address", ErrInvalidValue, value)
	}
	if r.prefix.Addr().Is4() {
		a = a.Unmap()
	}
	if !r.prefix.Contains(a) {
		return 0, r.notInRange(value)
	}
	b := a.AsSlice()
	host := int(binary.BigEndian.Uint32(b[len(b)-4:]) & (1<<r.hostBits - 1))
	off := host - 1
	if off < 0 || off >= r.size {
		return 0, r.notInRange(value)
	}
	return off, nil
}

func (r *IPRange) notInRange(value string) error {
	return &NotInRangeError{Kind: KindIP, Value: value, Range: r.String()}
}

// Value returns the address at offset off.
func (r *IPRange) Value(off int) string {
	b := r.prefix.Addr().AsSlice()
	tail := binary.BigEndian.Uint32(b[len(b)-4:]) | uint32(off+1)
	binary.BigEndian.PutUint32(b[len(b)-4:], tail)
	a, _ := netip.AddrFromSlice(b)
	return a.String()
}

// PortRange is an inclusive range of ports first-last; offset i is port first+i.
type PortRange struct {
	first, last int
	static      int
}

// ParsePortRange parses "first-last" or a single port "N" (meaning N-N),
// with 1 <= first <= last <= 65535.
func ParsePortRange(s string) (*PortRange, error) {
	lo, hi, dash := strings.Cut(s, "-")
	if !dash {
		hi = lo
	}
	first, err1 := parsePort(lo)
	last, err2 := parsePort(hi)
	if err1 != nil || err2 != nil {
		return nil, fmt.Errorf("%w %q: want a CIDR, a port range first-last, or a port, with ports 1-65535", ErrInvalidRange, s)
	}
	if first > last {
		return nil, fmt.Errorf("%w %q: first port %d is above last port %d", ErrInvalidRange, s, first, last)
	}
	size := last - first + 1
	return &PortRange{first: first, last: last, static: bandSize(size, size, 32, 128)}, nil
}

// parsePort accepts 1 to 5 decimal digits naming 1..65535.
func parsePort(s string) (int, error) {
	if len(s) == 0 || len(s) > 5 {
		return 0, ErrInvalidValue
	}
	for i := 0; i < len(s); i++ {
		if s[i] < '0' || s[i] > '9' {
			return 0, ErrInvalidValue
		}
	}
	n, _ := strconv.Atoi(s)
	if n < 1 || n > 65535 {
		return 0, ErrInvalidValue
	}
	return n, nil
}

// Kind returns KindPort.
func (r *PortRange) Kind() Kind { return KindPort }

// String returns "first-last".
func (r *PortRange) String() string { return fmt.Sprintf("%d-%d", r.first, r.last) }

// Family returns "".
func (r *PortRange) Family() string { return "" }

// Size returns last-first+1.
func (r *PortRange) Size() int { return r.last - r.first + 1 }

// StaticSize returns B.
func (r *PortRange) StaticSize() int { return r.static }

// Offset parses a port and returns its offset.
func (r *PortRange) Offset(value string) (int, error) {
	p, err := parsePort(value)
	if err != nil {
		if isDigits(value) { // a number, just not a port: out of range
			return 0, r.notInRange(value)
		}
		return 0, fmt.Errorf("%w: %q is not a port number", ErrInvalidValue, value)
	}
	if p < r.first || p > r.last {
		return 0, r.notInRange(value)
	}
	return p - r.first, nil
}

func isDigits(s string) bool {
	if s == "" {
		return false
	}
	for i := 0; i < len(s); i++ {
		if s[i] < '0' || s[i] > '9' {
			return false
		}
	}
	return true
}

func (r *PortRange) notInRange(value string) error {
	return &NotInRangeError{Kind: KindPort, Value: value, Range: r.String()}
}

// Value returns the port at offset off.
func (r *PortRange) Value(off int) string { return strconv.Itoa(r.first + off) }

// Overlaps reports whether two ranges share a value: IP ranges of one
// family whose prefixes intersect, or port ranges that intersect. Ranges
// of different kinds or families never overlap.
func Overlaps(a, b Range) bool {
	switch x := a.(type) {
	case *IPRange:
		y, ok := b.(*IPRange)
		return ok && x.prefix.Overlaps(y.prefix)
	case *PortRange:
		y, ok := b.(*PortRange)
		return ok && x.first <= y.last && y.first <= x.last
	}
	return false
}
