package service

import "testing"

// A stored NodePort service: 10.0.0.9, p:80 -> 30080, q:443 -> 30443.
func storedNodePort(tw ...tweak) *Spec {
	return stored(append([]tweak{typ(TypeNodePort), ips("10.0.0.9"), fams(IPv4), policy(SingleStack),
		ports(tcp("p", 80, 30080), tcp("q", 443, 30443))}, tw...)...)
}

// A stored LoadBalancer Local service: 10.0.0.9, p:80 -> 30080, hc 30200.
func storedLBLocal(tw ...tweak) *Spec {
	return stored(append([]tweak{typ(TypeLoadBalancer), ips("10.0.0.9"), fams(IPv4), policy(SingleStack),
		ports(tcp("p", 80, 30080)), local(), hcport(30200)}, tw...)...)
}

const keepIP = "spec.clusterIPs[0]/IPv4 keep:10.0.0.9"

// Mirrors TestUpdatePatchAllocatedValues and the nodePort update cases.
func TestUpdateNodePorts(t *testing.T) {
	runPlanCases(t, []planCase{{
		name:   "TestUpdatePatchAllocatedValues/multi-port, all left out",
		stored: storedNodePort(),
		spec:   svc(typ(TypeNodePort), ports(tcp("p", 80, 0), tcp("q", 443, 0))),
		needs:  []string{keepIP, "spec.ports[0].nodePort keep:30080", "spec.ports[1].nodePort keep:30443"},
	}, {
		name:   "TestUpdatePatchAllocatedValues/multi-port-add",
		stored: storedNodePort(),
		spec:   svc(typ(TypeNodePort), ports(tcp("p", 80, 0), tcp("q", 443, 30443), tcp("r", 8080, 0))),
		needs:  []string{keepIP, "spec.ports[0].nodePort keep:30080", "spec.ports[1].nodePort keep:30443", "spec.ports[2].nodePort dyn"},
	}, {
		name:    "TestUpdatePatchAllocatedValues/multi-port-remove releases the removed port's nodePort",
		stored:  storedNodePort(),
		spec:    svc(typ(TypeNodePort), ports(tcp("p", 80, 0))),
		needs:   []string{keepIP, "spec.ports[0].nodePort keep:30080"},
		release: []string{"NodePort 30443"},
	}, {
		name:    "port renamed: nodePorts are matched by name, so it is reallocated",
		stored:  storedNodePort(),
		spec:    svc(typ(TypeNodePort), ports(tcp("pp", 80, 0), tcp("q", 443, 0))),
		needs:   []string{keepIP, "spec.ports[0].nodePort dyn", "spec.ports[1].nodePort keep:30443"},
		release: []string{"NodePort 30080"},
	}, {
		name:   "left-out nodePort not patched when another port names the old value",
		stored: storedNodePort(),
		spec:   svc(typ(TypeNodePort), ports(tcp("p", 80, 0), tcp("q", 443, 30080))),
		needs:  []string{keepIP, "spec.ports[0].nodePort dyn", "spec.ports[1].nodePort keep:30080"},
		// 30443 is no longer named.
		release: []string{"NodePort 30443"},
	}, {
		name:    "another nodePort named: requested, the old one released",
		stored:  storedNodePort(),
		spec:    svc(typ(TypeNodePort), ports(tcp("p", 80, 30081), tcp("q", 443, 30443))),
		needs:   []string{keepIP, "spec.ports[0].nodePort req:30081", "spec.ports[1].nodePort keep:30443"},
		release: []string{"NodePort 30080"},
	}, {
		name:   "nodePorts swapped between ports: both kept",
		stored: storedNodePort(),
		spec:   svc(typ(TypeNodePort), ports(tcp("p", 80, 30443), tcp("q", 443, 30080))),
		needs:  []string{keepIP, "spec.ports[0].nodePort keep:30443", "spec.ports[1].nodePort keep:30080"},
	}, {
		name:   "UDP entry added for an existing port number shares its nodePort",
		stored: storedNodePort(),
		spec:   svc(typ(TypeNodePort), ports(tcp("p", 80, 30080), tcp("q", 443, 30443), udp("pu", 80, 0))),
		needs:  []string{keepIP, "spec.ports[0].nodePort keep:30080 ports=[0 2]", "spec.ports[1].nodePort keep:30443"},
	}, {
		name:   "a kept nodePort is not range-checked",
		stored: storedNodePort(ports(tcp("p", 80, 20080))),
		spec:   svc(typ(TypeNodePort), ports(tcp("p", 80, 0))),
		needs:  []string{keepIP, "spec.ports[0].nodePort keep:20080"},
	}})
}

// Type changes both ways.
func TestUpdateTypeTransitions(t *testing.T) {
	runPlanCases(t, []planCase{{
		name:    "NodePort to ClusterIP releases the nodePorts",
		stored:  storedNodePort(),
		spec:    svc(typ(TypeClusterIP), ips("10.0.0.9"), ports(tcp("p", 80, 30080), tcp("q", 443, 30443))),
		needs:   []string{keepIP},
		release: []string{"NodePort 30080", "NodePort 30443"},
	}, {
		name:   "NodePort to ClusterIP naming a new nodePort is forbidden",
		stored: storedNodePort(),
		spec:   svc(typ(TypeClusterIP), ports(tcp("p", 80, 30081))),
		err:    "spec.ports[0].nodePort: Forbidden: may not be used when `type` is 'ClusterIP'",
	}, {
		name:   "ClusterIP to NodePort allocates nodePorts",
		stored: stored(ips("10.0.0.9"), fams(IPv4), policy(SingleStack), ports(tcp("p", 53, 0), udp("q", 53, 0))),
		spec:   svc(typ(TypeNodePort), ports(tcp("p", 53, 0), udp("q", 53, 0))),
		needs:  []string{keepIP, "spec.ports[0].nodePort dyn ports=[0 1]"},
	}, {
		name:    "NodePort to ExternalName releases clusterIPs and nodePorts",
		stored:  storedNodePort(),
		spec:    svc(typ(TypeExternalName), ips("10.0.0.9"), fams(IPv4), policy(SingleStack), ports(tcp("p", 80, 30080), tcp("q", 443, 30443))),
		needs:   nil,
		release: []string{"ClusterIP/IPv4 10.0.0.9", "NodePort 30080", "NodePort 30443"},
	}, {
		name:   "ClusterIP to ExternalName naming another clusterIP is forbidden",
		stored: stored(ips("10.0.0.9"), fams(IPv4), policy(SingleStack)),
		spec:   svc(typ(TypeExternalName), ips("10.0.0.10")),
		err:    "spec.clusterIPs: Forbidden: may not be set for ExternalName services",
	}, {
		name:     "ExternalName to ClusterIP allocates a clusterIP",
		net:      []Family{IPv6, IPv4},
		stored:   stored(typ(TypeExternalName)),
		spec:     svc(),
		needs:    []string{"spec.clusterIPs[0]/IPv6 dyn"},
		families: []Family{IPv6}, policy: SingleStack,
	}, {
		name:   "ExternalName to NodePort with a requested clusterIP",
		stored: stored(typ(TypeExternalName)),
		spec:   svc(typ(TypeNodePort), ips("10.0.0.7")),
		needs:  []string{"spec.clusterIPs[0]/IPv4 req:10.0.0.7", "spec.ports[0].nodePort dyn"},
	}, {
		name:   "ClusterIP to LoadBalancer Local allocates nodePorts and healthCheckNodePort",
		stored: stored(ips("10.0.0.9"), fams(IPv4), policy(SingleStack)),
		spec:   svc(typ(TypeLoadBalancer), local()),
		needs:  []string{keepIP, "spec.ports[0].nodePort dyn", "spec.healthCheckNodePort dyn"},
	}, {
		name:    "LoadBalancer Local to NodePort releases the healthCheckNodePort",
		stored:  storedLBLocal(),
		spec:    svc(typ(TypeNodePort), ports(tcp("p", 80, 30080)), hcport(30200)),
		needs:   []string{keepIP, "spec.ports[0].nodePort keep:30080"},
		release: []string{"HealthCheckNodePort 30200"},
	}, {
		name:    "LoadBalancer Local to ClusterIP releases nodePorts and healthCheckNodePort",
		stored:  storedLBLocal(),
		spec:    svc(ports(tcp("p", 80, 0))),
		needs:   []string{keepIP},
		release: []string{"NodePort 30080", "HealthCheckNodePort 30200"},
	}})
}

// Mirrors the healthCheckNodePort update cases
// (TestServiceRegistryExternalTrafficPolicy* and
// TestUpdateServiceLoadBalancerStatus-adjacent transitions).
func TestUpdateHealthCheckNodePort(t *testing.T) {
	runPlanCases(t, []planCase{{
		name:   "Local kept, healthCheckNodePort left out: kept",
		stored: storedLBLocal(),
		spec:   svc(typ(TypeLoadBalancer), local(), ports(tcp("p", 80, 0))),
		needs:  []string{keepIP, "spec.ports[0].nodePort keep:30080", "spec.healthCheckNodePort keep:30200"},
	}, {
		name:   "Local kept, healthCheckNodePort changed: 422",
		stored: storedLBLocal(),
		spec:   svc(typ(TypeLoadBalancer), local(), hcport(30201)),
		err:    "spec.healthCheckNodePort: Invalid value: 30201: cannot change healthCheckNodePort on loadBalancer service with externalTraffic=Local during update",
	}, {
		name:    "Local to Cluster with the stored value in the spec: dropped and released",
		stored:  storedLBLocal(),
		spec:    svc(typ(TypeLoadBalancer), hcport(30200)),
		needs:   []string{keepIP, "spec.ports[0].nodePort keep:30080"},
		release: []string{"HealthCheckNodePort 30200"},
	}, {
		name:    "Local to Cluster, left out: released",
		stored:  storedLBLocal(),
		spec:    svc(typ(TypeLoadBalancer)),
		needs:   []string{keepIP, "spec.ports[0].nodePort keep:30080"},
		release: []string{"HealthCheckNodePort 30200"},
	}, {
		name:   "Local to Cluster naming another value: forbidden",
		stored: storedLBLocal(),
		spec:   svc(typ(TypeLoadBalancer), hcport(30201)),
		err:    "spec.healthCheckNodePort: Forbidden: may only be set when `type` is 'LoadBalancer' and `externalTrafficPolicy` is 'Local'",
	}, {
		name:   "Cluster to Local with a requested value",
		stored: storedLBLocal(func(s *Spec) { s.ExternalTrafficPolicy = TrafficCluster; s.HealthCheckNodePort = 0 }),
		spec:   svc(typ(TypeLoadBalancer), local(), hcport(30201)),
		needs:  []string{keepIP, "spec.ports[0].nodePort keep:30080", "spec.healthCheckNodePort req:30201"},
	}, {
		name:   "a nodePort newly naming the kept healthCheckNodePort is refused",
		stored: storedLBLocal(),
		spec:   svc(typ(TypeLoadBalancer), local(), ports(tcp("p", 80, 30080), tcp("q", 443, 30200))),
		err:    "spec.ports[1].nodePort: Invalid value: 30200: provided port is already allocated",
	}})
}

// KEP-1864: allocateLoadBalancerNodePorts=false.
func TestUpdateAllocateLoadBalancerNodePorts(t *testing.T) {
	lbStored := func(alloc bool, p ...Port) *Spec {
		return stored(typ(TypeLoadBalancer), ips("10.0.0.9"), fams(IPv4), policy(SingleStack), allocLBNodePorts(alloc), ports(p...))
	}
	runPlanCases(t, []planCase{{
		name:   "true to false keeps the nodePorts left in the spec",
		stored: lbStored(true, tcp("p", 80, 30080), tcp("q", 443, 30443)),
		spec:   svc(typ(TypeLoadBalancer), allocLBNodePorts(false), ports(tcp("p", 80, 30080), tcp("q", 443, 30443))),
		needs:  []string{keepIP, "spec.ports[0].nodePort keep:30080", "spec.ports[1].nodePort keep:30443"},
	}, {
		name:    "true to false releases a nodePort whose port entry goes",
		stored:  lbStored(true, tcp("p", 80, 30080), tcp("q", 443, 30443)),
		spec:    svc(typ(TypeLoadBalancer), allocLBNodePorts(false), ports(tcp("p", 80, 30080))),
		needs:   []string{keepIP, "spec.ports[0].nodePort keep:30080"},
		release: []string{"NodePort 30443"},
	}, {
		name:   "false: a new port gets no nodePort",
		stored: lbStored(false, tcp("p", 80, 0)),
		spec:   svc(typ(TypeLoadBalancer), allocLBNodePorts(false), ports(tcp("p", 80, 0), tcp("q", 443, 0))),
		needs:  []string{keepIP},
	}, {
		name:   "false: a requested nodePort is allocated",
		stored: lbStored(false, tcp("p", 80, 0)),
		spec:   svc(typ(TypeLoadBalancer), allocLBNodePorts(false), ports(tcp("p", 80, 30080))),
		needs:  []string{keepIP, "spec.ports[0].nodePort req:30080"},
	}, {
		name:   "false to true allocates the missing nodePorts",
		stored: lbStored(false, tcp("p", 80, 0)),
		spec:   svc(typ(TypeLoadBalancer), allocLBNodePorts(true), ports(tcp("p", 80, 0))),
		needs:  []string{keepIP, "spec.ports[0].nodePort dyn"},
	}})
}

// Mirrors TestUpdateIPsFromSingleStack / TestUpdateIPsFromDualStack.
func TestUpdateClusterIPs(t *testing.T) {
	v4v6 := []Family{IPv4, IPv6}
	dual := stored(ips("10.0.0.9", "2000::9"), fams(IPv4, IPv6), policy(RequireDualStack))
	runPlanCases(t, []planCase{{
		name:   "clusterIPs left out: kept",
		stored: stored(ips("10.0.0.9"), fams(IPv4), policy(SingleStack)),
		spec:   svc(),
		needs:  []string{keepIP},
	}, {
		name:   "primary clusterIP changed: may not change once set",
		stored: stored(ips("10.0.0.9"), fams(IPv4), policy(SingleStack)),
		spec:   svc(ips("10.0.0.10")),
		err:    `spec.clusterIPs[0]: Invalid value: ["10.0.0.10"]: may not change once set`,
	}, {
		name:   "primary family changed: may not change once set",
		net:    v4v6,
		stored: stored(ips("10.0.0.9"), fams(IPv4), policy(SingleStack)),
		spec:   svc(ips("2000::1"), fams(IPv6)),
		err:    `[spec.clusterIPs[0]: Invalid value: ["2000::1"]: may not change once set, spec.ipFamilies[0]: Invalid value: ["IPv6"]: may not change once set]`,
	}, {
		name:   "headless to a clusterIP: may not change once set",
		stored: stored(ips(ClusterIPNone), fams(IPv4), policy(SingleStack)),
		spec:   svc(ips("10.0.0.10")),
		err:    `spec.clusterIPs[0]: Invalid value: ["10.0.0.10"]: may not change once set`,
	}, {
		name:   "headless stays headless",
		stored: stored(ips(ClusterIPNone), fams(IPv4), policy(SingleStack)),
		spec:   svc(),
		needs:  nil,
	}, {
		name:     "singlestack:v4 upgrade to PreferDualStack adds the secondary",
		net:      v4v6,
		stored:   stored(ips("10.0.0.9"), fams(IPv4), policy(SingleStack)),
		spec:     svc(policy(PreferDualStack)),
		needs:    []string{keepIP, "spec.clusterIPs[1]/IPv6 dyn"},
		families: v4v6, policy: PreferDualStack,
	}, {
		name:   "singlestack:v4 upgrade to RequireDualStack with a requested secondary",
		net:    v4v6,
		stored: stored(ips("10.0.0.9"), fams(IPv4), policy(SingleStack)),
		spec:   svc(policy(RequireDualStack), ips("10.0.0.9", "2000::5")),
		needs:  []string{keepIP, "spec.clusterIPs[1]/IPv6 req:2000::5"},
	}, {
		name:   "upgrade to RequireDualStack on a single-stack network",
		stored: stored(ips("10.0.0.9"), fams(IPv4), policy(SingleStack)),
		spec:   svc(policy(RequireDualStack)),
		err:    `spec.ipFamilyPolicy: Invalid value: "RequireDualStack": this cluster is not configured for dual-stack services`,
	}, {
		name:     "PreferDualStack unchanged after the network became dual-stack: no upgrade",
		net:      v4v6,
		stored:   stored(ips("10.0.0.9"), fams(IPv4), policy(PreferDualStack)),
		spec:     svc(ips("10.0.0.9"), fams(IPv4), policy(PreferDualStack)),
		needs:    []string{keepIP},
		families: []Family{IPv4},
	}, {
		name:     "PreferDualStack with the policy left out after the network became dual-stack: upgraded",
		net:      v4v6,
		stored:   stored(ips("10.0.0.9"), fams(IPv4), policy(PreferDualStack)),
		spec:     svc(),
		needs:    []string{keepIP, "spec.clusterIPs[1]/IPv6 dyn"},
		families: v4v6,
	}, {
		name:     "dualstack downgrade to SingleStack releases the secondary",
		net:      v4v6,
		stored:   dual,
		spec:     svc(policy(SingleStack), ips("10.0.0.9", "2000::9"), fams(IPv4, IPv6)),
		needs:    []string{keepIP},
		release:  []string{"ClusterIP/IPv6 2000::9"},
		families: []Family{IPv4}, policy: SingleStack,
	}, {
		name:    "dualstack downgrade with fields left out",
		net:     v4v6,
		stored:  dual,
		spec:    svc(policy(SingleStack)),
		needs:   []string{keepIP},
		release: []string{"ClusterIP/IPv6 2000::9"},
	}, {
		name:   "dualstack dropping the secondary without SingleStack",
		net:    v4v6,
		stored: dual,
		spec:   svc(ips("10.0.0.9")),
		err:    `spec.ipFamilyPolicy: Invalid value: "RequireDualStack": must be 'SingleStack' to release the secondary cluster IP`,
	}, {
		name:   "dualstack secondary changed: may not change once set",
		net:    v4v6,
		stored: dual,
		spec:   svc(ips("10.0.0.9", "2000::8")),
		err:    `spec.clusterIPs[1]: Invalid value: ["10.0.0.9","2000::8"]: may not change once set`,
	}, {
		name:   "dualstack all left out: kept",
		net:    v4v6,
		stored: dual,
		spec:   svc(),
		needs:  []string{keepIP, "spec.clusterIPs[1]/IPv6 keep:2000::9"},
	}})
}

// A PUT with another uid replaces the service.
func TestUpdateNewUID(t *testing.T) {
	runPlanCases(t, []planCase{{
		name:    "new uid: everything released, allocated afresh",
		stored:  storedNodePort(),
		spec:    svc(uid("uid-2")),
		needs:   []string{"spec.clusterIPs[0]/IPv4 dyn"},
		release: []string{"ClusterIP/IPv4 10.0.0.9", "NodePort 30080", "NodePort 30443"},
	}, {
		name:    "new uid naming a stored value again: kept, the rest released",
		stored:  storedNodePort(),
		spec:    svc(uid("uid-2"), typ(TypeNodePort), ips("10.0.0.9"), ports(tcp("p", 80, 0))),
		needs:   []string{keepIP, "spec.ports[0].nodePort dyn"},
		release: []string{"NodePort 30080", "NodePort 30443"},
	}, {
		name:    "new uid changing the primary clusterIP is no immutability error",
		stored:  storedNodePort(),
		spec:    svc(uid("uid-2"), ips("10.0.0.10")),
		needs:   []string{"spec.clusterIPs[0]/IPv4 req:10.0.0.10"},
		release: []string{"ClusterIP/IPv4 10.0.0.9", "NodePort 30080", "NodePort 30443"},
	}})
}
