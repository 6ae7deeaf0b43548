package kube

import (
	"encoding/json"
	"fmt"
	"math/big"
	"math/rand/v2"
	"slices"
	"strings"

	"github.com/rangealloc/rangealloc/allocator"
	"github.com/rangealloc/rangealloc/api/types"
)

// GenNetwork is the service network Generate allocates in, and the names
// of the RangeAllocation objects it returns (a rangealloc pool's name).
type GenNetwork struct {
	// IPv4 and IPv6 are the ClusterIP CIDRs; "" leaves a family out. The
	// first one given is the primary family.
	IPv4, IPv6 string
	// NodePorts is the node-port range, first-last.
	NodePorts string
	// IPv4Pool, IPv6Pool and NodePortPool name the RangeAllocations.
	IPv4Pool, IPv6Pool, NodePortPool string
}

// DefaultGenNetwork is 10.96.0.0/16, fd00::/108 and 30000-32767 with the
// pool names of `rangealloc server --service-cidr 10.96.0.0/16,fd00::/108`.
func DefaultGenNetwork() GenNetwork {
	return GenNetwork{IPv4: "10.96.0.0/16", IPv6: "fd00::/108", NodePorts: "30000-32767",
		IPv4Pool: "clusterip-ipv4", IPv6Pool: "clusterip-ipv6", NodePortPool: "nodeport"}
}

// genPool is one range being filled; used holds its taken offsets.
type genPool struct {
	name string
	r    allocator.Range
	used map[int]bool
}

func newGenPool(name, rng string) *genPool {
	if rng == "" {
		return nil
	}
	r, err := allocator.ParseRange(rng)
	if err != nil {
		panic(fmt.Sprintf("kube.Generate: %s: %v", name, err))
	}
	return &genPool{name: name, r: r, used: map[int]bool{}}
}

func (p *genPool) free() int { return p.r.Size() - len(p.used) }

// take marks a random free offset used and returns its value; the
// caller checks free() first. Offsets are spread over the whole range,
// static band included, as named and dynamic values are in a real cluster.
func (p *genPool) take(rng *rand.Rand) string {
	off := rng.IntN(p.r.Size())
	for p.used[off] {
		off = (off + 1) % p.r.Size()
	}
	return p.takeOffset(off)
}

func (p *genPool) takeOffset(off int) string {
	p.used[off] = true
	return p.r.Value(off)
}

// rangeAllocation encodes the used offsets as Kubernetes does: the
// big-endian minimal bytes of the integer whose bit i is offset i.
func (p *genPool) rangeAllocation() types.RangeAllocation {
	var bits big.Int
	for off := range p.used {
		bits.SetBit(&bits, off, 1)
	}
	return types.RangeAllocation{APIVersion: "v1", Kind: "RangeAllocation",
		Metadata: types.ObjectMetadata{Name: p.name}, Range: p.r.String(), Data: bits.Bytes()}
}

type generator struct {
	rng             *rand.Rand
	primary, second *genPool // IP pools; second is nil for a single-stack network
	nodePorts       *genPool
	famPrim, famSec string
	count           int
	objects         []object
	namespaces      []string
}

// Generate makes n Services as `kubectl get services -A -o json` prints
// them, and the RangeAllocation objects (IPv4, IPv6, node ports, in that
// order, for the families net has) whose bitmaps hold exactly their values.
// The mix: ClusterIP (single-stack, dual-stack either way round, IPv6
// only), headless, ExternalName, NodePort (some with a TCP and a UDP entry
// sharing one nodePort) and LoadBalancer (externalTrafficPolicy Local with
// a healthCheckNodePort, some with allocateLoadBalancerNodePorts false).
// Every ClusterIP and nodePort is unique; when the node-port range runs
// out, further Services are ClusterIP. With n >= 2 the first two are
// default/kubernetes (the range's first address, no selector) and
// kube-system/kube-dns (its tenth). The same n, seed and net give the
// same output. Generate panics on a bad net: it is for tests.
func Generate(n int, seed uint64, net GenNetwork) (servicesJSON []byte, rangeAllocations []types.RangeAllocation) {
	g := &generator{rng: rand.New(rand.NewPCG(seed, seed^0x9e3779b97f4a7c15)),
		nodePorts: newGenPool(net.NodePortPool, net.NodePorts)}
	v4, v6 := newGenPool(net.IPv4Pool, net.IPv4), newGenPool(net.IPv6Pool, net.IPv6)
	g.primary, g.famPrim, g.second, g.famSec = v4, "IPv4", v6, "IPv6"
	if v4 == nil {
		g.primary, g.famPrim, g.second, g.famSec = v6, "IPv6", nil, ""
	}
	if g.primary == nil || g.nodePorts == nil {
		panic("kube.Generate: net needs a ClusterIP range and a node-port range")
	}
	g.namespaces = []string{"default", "kube-system", "monitoring", "ingress-nginx"}
	for i := range 20 {
		g.namespaces = append(g.namespaces, fmt.Sprintf("team-%02d", i))
	}
	if n >= 2 {
		g.wellKnown()
	}
	for len(g.objects) < n {
		g.objects = append(g.objects, g.service())
	}
	slices.SortFunc(g.objects, func(a, b object) int {
		return strings.Compare(a.Metadata.Namespace+"/"+a.Metadata.Name, b.Metadata.Namespace+"/"+b.Metadata.Name)
	})
	list := struct {
		APIVersion string            `json:"apiVersion"`
		Items      []object          `json:"items"`
		Kind       string            `json:"kind"`
		Metadata   map[string]string `json:"metadata"`
	}{"v1", g.objects, "List", map[string]string{"resourceVersion": ""}}
	if list.Items == nil {
		list.Items = []object{}
	}
	data, err := json.MarshalIndent(list, "", "    ")
	if err != nil {
		panic(err)
	}
	for _, p := range []*genPool{v4, v6, g.nodePorts} {
		if p != nil {
			rangeAllocations = append(rangeAllocations, p.rangeAllocation())
		}
	}
	return append(data, '\n'), rangeAllocations
}

// wellKnown adds the two Services every cluster has, at the addresses
// kube-apiserver and kubeadm give them.
func (g *generator) wellKnown() {
	api := g.base("default", "kubernetes", "ClusterIP")
	api.Spec.Selector = nil
	ip := g.primary.takeOffset(0)
	api.Spec.ClusterIP, api.Spec.ClusterIPs = ip, []string{ip}
	api.Spec.IPFamilies, api.Spec.IPFamilyPolicy = []string{g.famPrim}, "SingleStack"
	api.Spec.Ports = []port{{Name: "https", Protocol: "TCP", Port: 443, TargetPort: 6443}}
	dns := g.base("kube-system", "kube-dns", "ClusterIP")
	dns.Spec.Selector = map[string]string{"k8s-app": "kube-dns"}
	ip = g.primary.takeOffset(9)
	dns.Spec.ClusterIP, dns.Spec.ClusterIPs = ip, []string{ip}
	dns.Spec.IPFamilies, dns.Spec.IPFamilyPolicy = []string{g.famPrim}, "SingleStack"
	dns.Spec.Ports = []port{{Name: "dns", Protocol: "UDP", Port: 53, TargetPort: 53},
		{Name: "dns-tcp", Protocol: "TCP", Port: 53, TargetPort: 53}, {Name: "metrics", Protocol: "TCP", Port: 9153, TargetPort: 9153}}
	g.objects = append(g.objects, api, dns)
}

func (g *generator) uid() string {
	r := g.rng
	return fmt.Sprintf("%08x-%04x-%04x-%04x-%012x", r.Uint32(), r.Uint32()&0xffff, 0x4000|r.Uint32()&0x0fff,
		0x8000|r.Uint32()&0x3fff, r.Uint64()&0xffffffffffff)
}

func (g *generator) base(ns, name, typ string) object {
	g.count++
	return object{APIVersion: "v1", Kind: "Service",
		Metadata: meta{Namespace: ns, Name: name, UID: g.uid(), ResourceVersion: fmt.Sprint(1000 + g.count),
			CreationTimestamp: "2026-01-02T03:04:05Z"},
		Spec: &spec{Type: typ, Selector: map[string]string{"app": name}, SessionAffinity: "None",
			InternalTrafficPolicy: "Cluster"},
		Status: map[string]any{"loadBalancer": map[string]any{}}}
}

// service makes one Service of a random kind.
func (g *generator) service() object {
	ns := g.namespaces[g.rng.IntN(len(g.namespaces))]
	name := fmt.Sprintf("svc-%05d", g.count)
	roll := g.rng.IntN(100)
	switch {
	case roll < 10:
		return g.headless(ns, name)
	case roll < 15:
		return g.externalName(ns, name)
	case roll < 35:
		if o, ok := g.withNodePorts(ns, name, "NodePort"); ok {
			return o
		}
	case roll < 55:
		if o, ok := g.withNodePorts(ns, name, "LoadBalancer"); ok {
			return o
		}
	}
	return g.clusterIP(ns, name, "ClusterIP", roll)
}

// clusterIP fills a Service's ClusterIPs: single-stack in the primary
// family, dual-stack (either family first) or IPv6-only, by roll.
func (g *generator) clusterIP(ns, name, typ string, roll int) object {
	o := g.base(ns, name, typ)
	fams, pools, policy := []string{g.famPrim}, []*genPool{g.primary}, "SingleStack"
	if g.second != nil && g.second.free() > 0 {
		switch roll % 10 {
		case 0, 1:
			fams, pools, policy = []string{g.famPrim, g.famSec}, []*genPool{g.primary, g.second}, "PreferDualStack"
		case 2:
			fams, pools, policy = []string{g.famSec, g.famPrim}, []*genPool{g.second, g.primary}, "RequireDualStack"
		case 3:
			fams, pools = []string{g.famSec}, []*genPool{g.second}
		}
	}
	for _, p := range pools {
		if p.free() == 0 {
			panic(fmt.Sprintf("kube.Generate: %s is full", p.name))
		}
		o.Spec.ClusterIPs = append(o.Spec.ClusterIPs, p.take(g.rng))
	}
	o.Spec.ClusterIP, o.Spec.IPFamilies, o.Spec.IPFamilyPolicy = o.Spec.ClusterIPs[0], fams, policy
	o.Spec.Ports = g.ports(false)
	return o
}

func (g *generator) headless(ns, name string) object {
	o := g.base(ns, name, "ClusterIP")
	o.Spec.ClusterIP, o.Spec.ClusterIPs = "None", []string{"None"}
	o.Spec.IPFamilies, o.Spec.IPFamilyPolicy = []string{g.famPrim}, "SingleStack"
	o.Spec.Ports = g.ports(false)
	return o
}

func (g *generator) externalName(ns, name string) object {
	o := g.base(ns, name, "ExternalName")
	o.Spec.Selector, o.Spec.InternalTrafficPolicy = nil, ""
	o.Spec.ExternalName = name + ".example.com"
	if g.rng.IntN(2) == 0 {
		o.Spec.Ports = []port{{Name: "https", Protocol: "TCP", Port: 443, TargetPort: 443}}
	}
	return o
}

// withNodePorts makes a NodePort or LoadBalancer Service, or reports
// false when the node-port range has too few free ports left for it.
func (g *generator) withNodePorts(ns, name, typ string) (object, bool) {
	ports := g.ports(true)
	lb := typ == "LoadBalancer"
	local := lb && g.rng.IntN(2) == 0
	allocate := !lb || g.rng.IntN(5) > 0
	need := 0
	if allocate {
		need = distinctPorts(ports)
	}
	if local {
		need++
	}
	if g.nodePorts.free() < need {
		return object{}, false
	}
	o := g.clusterIP(ns, name, typ, g.rng.IntN(100))
	o.Spec.Ports, o.Spec.ExternalTrafficPolicy = ports, "Cluster"
	if allocate {
		byPort := map[int32]int32{}
		for i := range o.Spec.Ports {
			p := &o.Spec.Ports[i]
			if byPort[p.Port] == 0 {
				byPort[p.Port] = int32(portNumber(g.nodePorts.take(g.rng)))
			}
			p.NodePort = byPort[p.Port]
		}
	}
	if lb {
		o.Spec.AllocateLoadBalancerNodePorts = &allocate
		o.Status = map[string]any{"loadBalancer": map[string]any{"ingress": []map[string]string{{"ip": fmt.Sprintf("203.0.113.%d", 1+g.count%250)}}}}
	}
	if local {
		o.Spec.ExternalTrafficPolicy = "Local"
		o.Spec.HealthCheckNodePort = int32(portNumber(g.nodePorts.take(g.rng)))
	}
	return o, true
}

func portNumber(s string) int {
	var n int
	fmt.Sscan(s, &n)
	return n
}

func distinctPorts(ps []port) int {
	seen := map[int32]bool{}
	for _, p := range ps {
		seen[p.Port] = true
	}
	return len(seen)
}

// ports returns one to three ports with distinct (port, protocol) and
// names; with dnsLike sometimes a TCP and a UDP entry of one port number.
func (g *generator) ports(dnsLike bool) []port {
	if dnsLike && g.rng.IntN(8) == 0 {
		return []port{{Name: "dns-udp", Protocol: "UDP", Port: 53, TargetPort: 5353},
			{Name: "dns-tcp", Protocol: "TCP", Port: 53, TargetPort: 5353}}
	}
	common := []int32{80, 443, 8080, 8443, 9090, 9100, 5432, 6379}
	k := 1 + g.rng.IntN(3)
	perm := g.rng.Perm(len(common))[:k]
	out := make([]port, k)
	for i, j := range perm {
		out[i] = port{Protocol: "TCP", Port: common[j], TargetPort: int(common[j])}
		if k > 1 {
			out[i].Name = fmt.Sprintf("p%d", common[j])
		}
	}
	return out
}
