package fsm

import (
	"encoding/binary"

	"github.com/rangealloc/rangealloc/service"
)

// Limits of the Service codec: they only keep a corrupt count from
// allocating; Apply checks the real limits.
const (
	maxEntryServices = 1 << 20 // Services in one reconcile or import entry
	maxSpecList      = 1 << 12 // clusterIPs, families, ports of one Service
)

// specSize is at least the length of encodeSpec's output.
func specSize(s *service.Spec) int {
	const v = binary.MaxVarintLen64
	n := 13*v + len(s.Namespace) + len(s.Name) + len(s.UID) + len(s.Type) + len(s.IPFamilyPolicy) + len(s.ExternalTrafficPolicy) + len(s.ClusterIP)
	for _, ip := range s.ClusterIPs {
		n += v + len(ip)
	}
	for _, f := range s.IPFamilies {
		n += v + len(f)
	}
	for _, p := range s.Ports {
		n += 4*v + len(p.Name) + len(p.Protocol)
	}
	return n
}

// optBool encodes a *bool in one byte: 0 nil, 1 false, 2 true.
func optBool(b *bool) byte {
	switch {
	case b == nil:
		return 0
	case *b:
		return 2
	}
	return 1
}

func decodeOptBool(d *decoder) *bool {
	switch d.u8() {
	case 0:
		return nil
	case 1:
		f := false
		return &f
	case 2:
		t := true
		return &t
	}
	d.fail("bad optional bool")
	return nil
}

// encodeSpec writes a Service spec in the log's compact form.
func encodeSpec(e *encoder, s *service.Spec) {
	e.str(s.Namespace)
	e.str(s.Name)
	e.str(s.UID)
	e.str(s.Type)
	e.uvarint(uint64(len(s.ClusterIPs)))
	for _, ip := range s.ClusterIPs {
		e.str(ip)
	}
	e.uvarint(uint64(len(s.IPFamilies)))
	for _, f := range s.IPFamilies {
		e.str(string(f))
	}
	e.str(s.IPFamilyPolicy)
	e.u8(optBool(s.HasSelector))
	e.uvarint(uint64(len(s.Ports)))
	for _, p := range s.Ports {
		e.str(p.Name)
		e.str(p.Protocol)
		e.uvarint(uint64(uint32(p.Port)))
		e.uvarint(uint64(uint32(p.NodePort)))
	}
	e.str(s.ExternalTrafficPolicy)
	e.uvarint(uint64(uint32(s.HealthCheckNodePort)))
	e.u8(optBool(s.AllocateLoadBalancerNodePorts))
}

func decodeSpec(d *decoder) service.Spec {
	s := service.Spec{Namespace: d.str(maxField), Name: d.str(maxField), UID: d.str(maxField), Type: d.str(maxField)}
	if n := d.count(maxSpecList, 1); n > 0 {
		s.ClusterIPs = make([]string, n)
		for i := range s.ClusterIPs {
			s.ClusterIPs[i] = d.str(maxField)
		}
	}
	if n := d.count(maxSpecList, 1); n > 0 {
		s.IPFamilies = make([]service.Family, n)
		for i := range s.IPFamilies {
			s.IPFamilies[i] = service.Family(d.str(maxField))
		}
	}
	s.IPFamilyPolicy = d.str(maxField)
	s.HasSelector = decodeOptBool(d)
	if n := d.count(maxSpecList, 4); n > 0 {
		s.Ports = make([]service.Port, n)
		for i := range s.Ports {
			s.Ports[i] = service.Port{Name: d.str(maxField), Protocol: d.str(maxField),
				Port: int32(uint32(d.uvarint())), NodePort: int32(uint32(d.uvarint()))}
		}
	}
	s.ExternalTrafficPolicy = d.str(maxField)
	s.HealthCheckNodePort = int32(uint32(d.uvarint()))
	s.AllocateLoadBalancerNodePorts = decodeOptBool(d)
	return s
}

func encodeSpecs(e *encoder, specs []service.Spec) {
	e.uvarint(uint64(len(specs)))
	for i := range specs {
		encodeSpec(e, &specs[i])
	}
}

func decodeSpecs(d *decoder) []service.Spec {
	n := d.count(maxEntryServices, 12)
	if n == 0 {
		return nil
	}
	out := make([]service.Spec, 0, n)
	for i := 0; i < n && d.err == nil; i++ {
		out = append(out, decodeSpec(d))
	}
	return out
}

func encodeNetwork(e *encoder, n ServiceNetwork) {
	e.uvarint(uint64(len(n.Families)))
	for _, f := range n.Families {
		e.str(string(f))
	}
	e.str(n.IPv4Pool)
	e.str(n.IPv6Pool)
	e.str(n.NodePortPool)
}

func decodeNetwork(d *decoder) ServiceNetwork {
	var n ServiceNetwork
	if c := d.count(maxSpecList, 1); c > 0 {
		n.Families = make([]service.Family, c)
		for i := range n.Families {
			n.Families[i] = service.Family(d.str(maxField))
		}
	}
	n.IPv4Pool, n.IPv6Pool, n.NodePortPool = d.str(maxField), d.str(maxField), d.str(maxField)
	return n
}

// EncodeSpec returns a Service spec's binary form, as snapshots store it.
func EncodeSpec(s *service.Spec) []byte {
	e := encoder{b: make([]byte, 0, specSize(s))}
	encodeSpec(&e, s)
	return e.b
}

// DecodeSpec reverses EncodeSpec.
func DecodeSpec(b []byte) (service.Spec, error) {
	d := decoder{b: b}
	s := decodeSpec(&d)
	return s, d.done()
}
