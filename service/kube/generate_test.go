package kube

import (
	"bytes"
	"fmt"
	"math/big"
	"strconv"
	"testing"

	"github.com/rangealloc/rangealloc/allocator"
	"github.com/rangealloc/rangealloc/api/types"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// bitmapOf encodes values of range rng as Kubernetes does, computing the
// offsets with the allocator's own ranges.
func bitmapOf(t *testing.T, rng string, values []string) []byte {
	t.Helper()
	r, err := allocator.ParseRange(rng)
	require.NoError(t, err)
	var bits big.Int
	for _, v := range values {
		off, err := r.Offset(v)
		require.NoError(t, err, "Offset(%q) in %s", v, rng)
		require.Zero(t, bits.Bit(off), "%s is held twice", v)
		bits.SetBit(&bits, off, 1)
	}
	return bits.Bytes()
}

// valuesOf collects the ClusterIPs of each family and the nodePorts
// (one per distinct port number) and healthCheckNodePorts of svcs.
func valuesOf(svcs []types.Service) (v4, v6, ports []string) {
	for _, s := range svcs {
		for i, ip := range s.ClusterIPs {
			switch {
			case ip == "None":
			case s.IPFamilies[i] == "IPv4":
				v4 = append(v4, ip)
			default:
				v6 = append(v6, ip)
			}
		}
		seen := map[int32]bool{}
		for _, p := range s.Ports {
			if p.NodePort != 0 && !seen[p.Port] {
				seen[p.Port] = true
				ports = append(ports, strconv.Itoa(int(p.NodePort)))
			}
		}
		if s.HealthCheckNodePort != 0 {
			ports = append(ports, strconv.Itoa(int(s.HealthCheckNodePort)))
		}
	}
	return v4, v6, ports
}

// TestGenerate: the Services read back with Services, every value is
// unique, and each RangeAllocation is exactly the bitmap of its values.
func TestGenerate(t *testing.T) {
	cases := []struct {
		name  string
		n     int
		seed  uint64
		net   GenNetwork
		pools []string
	}{
		{"dual-stack", 1500, 1, DefaultGenNetwork(), []string{"clusterip-ipv4", "clusterip-ipv6", "nodeport"}},
		{"IPv4 only, the node ports run out", 2000, 2,
			GenNetwork{IPv4: "10.0.0.0/20", NodePorts: "30000-30499", IPv4Pool: "v4", NodePortPool: "np"}, []string{"v4", "np"}},
		{"IPv6 only", 300, 3,
			GenNetwork{IPv6: "fd00:10:96::/112", NodePorts: "30000-32767", IPv6Pool: "v6", NodePortPool: "np"}, []string{"v6", "np"}},
		{"none", 0, 4, DefaultGenNetwork(), []string{"clusterip-ipv4", "clusterip-ipv6", "nodeport"}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			data, ras := Generate(c.n, c.seed, c.net)
			svcs, err := Services(bytes.NewReader(data))
			require.NoError(t, err, "seed %d", c.seed)
			require.Len(t, svcs, c.n)
			names := map[string]bool{}
			for _, s := range svcs {
				key := s.Namespace + "/" + s.Name
				require.False(t, names[key], "%s twice", key)
				names[key] = true
			}
			v4, v6, ports := valuesOf(svcs)
			want := map[string][]byte{
				c.net.IPv4Pool: nil, c.net.IPv6Pool: nil, c.net.NodePortPool: bitmapOf(t, c.net.NodePorts, ports)}
			if c.net.IPv4 != "" {
				want[c.net.IPv4Pool] = bitmapOf(t, c.net.IPv4, v4)
			}
			if c.net.IPv6 != "" {
				want[c.net.IPv6Pool] = bitmapOf(t, c.net.IPv6, v6)
			}
			require.Len(t, ras, len(c.pools))
			for i, ra := range ras {
				assert.Equal(t, c.pools[i], ra.Metadata.Name)
				assert.Equal(t, "RangeAllocation", ra.Kind)
				assert.Equal(t, want[ra.Metadata.Name], ra.Data, "RangeAllocation %s", ra.Metadata.Name)
			}
		})
	}
}

// TestGenerateMix: a default cluster has every kind of Service, the two
// well-known ones first at their addresses, and is the same for a seed.
func TestGenerateMix(t *testing.T) {
	data, ras := Generate(1500, 7, DefaultGenNetwork())
	again, ras2 := Generate(1500, 7, DefaultGenNetwork())
	require.Equal(t, data, again, "same seed, same Services")
	require.Equal(t, ras, ras2)
	other, _ := Generate(1500, 8, DefaultGenNetwork())
	require.NotEqual(t, data, other)

	svcs, err := Services(bytes.NewReader(data))
	require.NoError(t, err)
	kinds := map[string]int{}
	for _, s := range svcs {
		kinds[s.Type]++
		switch {
		case s.ClusterIP == "None":
			kinds["headless"]++
		case len(s.ClusterIPs) == 2:
			kinds["dual-stack "+s.IPFamilies[0]+" first"]++
		case len(s.IPFamilies) == 1 && s.IPFamilies[0] == "IPv6":
			kinds["IPv6 only"]++
		}
		if s.HealthCheckNodePort != 0 {
			kinds["healthCheckNodePort"]++
		}
		if s.AllocateLoadBalancerNodePorts != nil && !*s.AllocateLoadBalancerNodePorts {
			kinds["no LB node ports"]++
		}
		for i, p := range s.Ports {
			if i > 0 && p.Port == s.Ports[0].Port && p.NodePort != 0 {
				require.Equal(t, s.Ports[0].NodePort, p.NodePort, "%s/%s: TCP and UDP of one port share a nodePort", s.Namespace, s.Name)
				kinds["shared nodePort"]++
			}
		}
	}
	for _, k := range []string{"ClusterIP", "NodePort", "LoadBalancer", "ExternalName", "headless", "dual-stack IPv4 first",
		"dual-stack IPv6 first", "IPv6 only", "healthCheckNodePort", "no LB node ports", "shared nodePort"} {
		assert.Positive(t, kinds[k], "no %s Service in %v", k, kinds)
	}
	byName := map[string]types.Service{}
	for _, s := range svcs {
		byName[s.Namespace+"/"+s.Name] = s
	}
	assert.Equal(t, []string{"10.96.0.1"}, byName["default/kubernetes"].ClusterIPs)
	assert.False(t, *byName["default/kubernetes"].HasSelector)
	assert.Equal(t, []string{"10.96.0.10"}, byName["kube-system/kube-dns"].ClusterIPs)
	assert.Equal(t, byte(1), ras[0].Data[len(ras[0].Data)-1]&1, "offset 0 (10.96.0.1) is bit 0 of the last byte")
	t.Log(fmt.Sprint(kinds))
}

func BenchmarkGenerate(b *testing.B) {
	b.ReportAllocs()
	for b.Loop() {
		Generate(5000, 1, DefaultGenNetwork())
	}
}

func BenchmarkServices(b *testing.B) {
	data, _ := Generate(5000, 1, DefaultGenNetwork())
	b.ReportAllocs()
	b.SetBytes(int64(len(data)))
	for b.Loop() {
		if _, err := Services(bytes.NewReader(data)); err != nil {
			b.Fatal(err)
		}
	}
}
