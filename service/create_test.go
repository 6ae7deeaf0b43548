package service

import "testing"

// Mirrors TestCreateIgnoresIPsForExternalName and the create cases of each
// type.
func TestCreateTypes(t *testing.T) {
	runPlanCases(t, []planCase{{
		name:  "ExternalName gets no clusterIPs and no nodePorts",
		spec:  svc(typ(TypeExternalName)),
		needs: nil,
	}, {
		name: "TestCreateIgnoresIPsForExternalName/singlestack:v6/Policy:SingleStack_Families:v6",
		net:  []Family{IPv6},
		spec: svc(typ(TypeExternalName), policy(SingleStack), fams(IPv6)),
		err:  "[spec.ipFamilyPolicy: Forbidden: may not be set for ExternalName services, spec.ipFamilies: Forbidden: may not be set for ExternalName services]",
	}, {
		name:     "ClusterIP gets one dynamic clusterIP",
		spec:     svc(),
		needs:    []string{"spec.clusterIPs[0]/IPv4 dyn"},
		families: []Family{IPv4}, policy: SingleStack,
	}, {
		name:  "ClusterIP with a requested clusterIP",
		spec:  svc(ips("10.0.0.5")),
		needs: []string{"spec.clusterIPs[0]/IPv4 req:10.0.0.5"},
	}, {
		name: "ClusterIP with a requested clusterIP out of range",
		spec: svc(ips("10.1.0.5")),
		err:  `spec.clusterIPs: Invalid value: ["10.1.0.5"]: failed to allocate IP 10.1.0.5: the provided IP (10.1.0.5) is not in the valid range. The range of valid IPs is 10.0.0.0/16`,
	}, {
		name:     "headless gets no clusterIP",
		spec:     svc(ips(ClusterIPNone)),
		needs:    nil,
		families: []Family{IPv4}, policy: SingleStack,
	}, {
		name: "ClusterIP with a nodePort is forbidden",
		spec: svc(ports(tcp("p", 93, 30093))),
		err:  "spec.ports[0].nodePort: Forbidden: may not be used when `type` is 'ClusterIP'",
	}, {
		name:  "NodePort gets a clusterIP and a nodePort",
		spec:  svc(typ(TypeNodePort)),
		needs: []string{"spec.clusterIPs[0]/IPv4 dyn", "spec.ports[0].nodePort dyn"},
	}, {
		name:  "LoadBalancer gets a clusterIP and a nodePort",
		spec:  svc(typ(TypeLoadBalancer)),
		needs: []string{"spec.clusterIPs[0]/IPv4 dyn", "spec.ports[0].nodePort dyn"},
	}, {
		name: "NodePort may not be headless",
		spec: svc(typ(TypeNodePort), ips(ClusterIPNone)),
		err:  `spec.clusterIPs[0]: Invalid value: "None": may not be set to 'None' for NodePort services`,
	}, {
		name: "unsupported type",
		spec: svc(typ("Foo")),
		err:  `spec.type: Unsupported value: "Foo": supported values: "ClusterIP", "ExternalName", "LoadBalancer", "NodePort"`,
	}})
}

// Mirrors TestCreateInitNodePorts.
func TestCreateInitNodePorts(t *testing.T) {
	np := func(p ...Port) Spec { return svc(typ(TypeNodePort), ips("10.0.0.9"), ports(p...)) }
	ip := "spec.clusterIPs[0]/IPv4 req:10.0.0.9"
	runPlanCases(t, []planCase{{
		name:  "type:ClusterIP",
		spec:  svc(ips("10.0.0.9"), ports(tcp("p", 80, 0), tcp("q", 443, 0))),
		needs: []string{ip},
	}, {
		name:  "type:NodePort_single_port_unspecified",
		spec:  np(tcp("p", 80, 0)),
		needs: []string{ip, "spec.ports[0].nodePort dyn"},
	}, {
		name:  "type:NodePort_single_port_specified",
		spec:  np(tcp("p", 80, 30080)),
		needs: []string{ip, "spec.ports[0].nodePort req:30080"},
	}, {
		name:  "type:NodePort_multiport_unspecified",
		spec:  np(tcp("p", 80, 0), tcp("q", 443, 0)),
		needs: []string{ip, "spec.ports[0].nodePort dyn", "spec.ports[1].nodePort dyn"},
	}, {
		name:  "type:NodePort_multiport_specified",
		spec:  np(tcp("p", 80, 30080), tcp("q", 443, 30443)),
		needs: []string{ip, "spec.ports[0].nodePort req:30080", "spec.ports[1].nodePort req:30443"},
	}, {
		name:  "type:NodePort_multiport_partially_specified",
		spec:  np(tcp("p", 80, 0), tcp("q", 443, 30443)),
		needs: []string{ip, "spec.ports[0].nodePort dyn", "spec.ports[1].nodePort req:30443"},
	}, {
		name: "type:NodePort_multiport_same",
		spec: np(tcp("p", 80, 30080), tcp("q", 443, 30080)),
		err:  "spec.ports[1].nodePort: Invalid value: 30080: provided port is already allocated",
	}, {
		name:  "type:NodePort_multiport_multiproto_unspecified",
		spec:  np(tcp("p", 53, 0), udp("q", 53, 0)),
		needs: []string{ip, "spec.ports[0].nodePort dyn ports=[0 1]"},
	}, {
		name:  "type:NodePort_multiport_multiproto_specified",
		spec:  np(tcp("p", 53, 30053), udp("q", 53, 30053)),
		needs: []string{ip, "spec.ports[0].nodePort req:30053 ports=[0 1]"},
	}, {
		name:  "type:NodePort_multiport_multiproto_one_specified",
		spec:  np(tcp("p", 53, 0), udp("q", 53, 30053)),
		needs: []string{ip, "spec.ports[0].nodePort req:30053 ports=[0 1]"},
	}, {
		name:  "type:NodePort_multiport_multiproto_different",
		spec:  np(tcp("p", 53, 30053), udp("q", 53, 30054)),
		needs: []string{ip, "spec.ports[0].nodePort req:30053", "spec.ports[1].nodePort req:30054"},
	}, {
		name: "type:NodePort_multiport_multiproto_conflict",
		spec: np(tcp("p", 93, 30093), tcp("q", 76, 30076), udp("r", 93, 30076)),
		err:  "spec.ports[2].nodePort: Invalid value: 30076: provided port is already allocated",
	}, {
		name: "type:NodePort_port_out_of_range",
		spec: np(tcp("p", 80, 20080)),
		err:  "spec.ports[0].nodePort: Invalid value: 20080: provided port is not in the valid range. The range of valid ports is 30000-32767",
	}, {
		name:  "type:LoadBalancer_single_port_unspecified:on_alloc:false",
		spec:  svc(typ(TypeLoadBalancer), ips("10.0.0.9"), allocLBNodePorts(false), ports(tcp("p", 80, 0))),
		needs: []string{ip},
	}, {
		name:  "type:LoadBalancer_single_port_specified:on_alloc:false",
		spec:  svc(typ(TypeLoadBalancer), ips("10.0.0.9"), allocLBNodePorts(false), ports(tcp("p", 80, 30080))),
		needs: []string{ip, "spec.ports[0].nodePort req:30080"},
	}, {
		name:  "type:LoadBalancer_multiport_specified:on_alloc:false",
		spec:  svc(typ(TypeLoadBalancer), ips("10.0.0.9"), allocLBNodePorts(false), ports(tcp("p", 80, 30080), tcp("q", 443, 0))),
		needs: []string{ip, "spec.ports[0].nodePort req:30080"},
	}, {
		name:  "type:LoadBalancer_multiport_unspecified:on_alloc:true",
		spec:  svc(typ(TypeLoadBalancer), ips("10.0.0.9"), allocLBNodePorts(true), ports(tcp("p", 80, 0), tcp("q", 443, 0))),
		needs: []string{ip, "spec.ports[0].nodePort dyn", "spec.ports[1].nodePort dyn"},
	}})
}

// Mirrors TestServiceRegistryExternalTrafficHealthCheckNodePort* and
// TestCreateInitHealthCheckNodePort-like cases.
func TestCreateHealthCheckNodePort(t *testing.T) {
	lb := func(tw ...tweak) Spec {
		return svc(append([]tweak{typ(TypeLoadBalancer), ips("10.0.0.9"), ports(tcp("p", 80, 30080))}, tw...)...)
	}
	base := []string{"spec.clusterIPs[0]/IPv4 req:10.0.0.9", "spec.ports[0].nodePort req:30080"}
	runPlanCases(t, []planCase{{
		name:  "ExternalTrafficHealthCheckNodePortAllocation",
		spec:  lb(local()),
		needs: append(base, "spec.healthCheckNodePort dyn"),
	}, {
		name:  "ExternalTrafficHealthCheckNodePortUserAllocation",
		spec:  lb(local(), hcport(30200)),
		needs: append(base, "spec.healthCheckNodePort req:30200"),
	}, {
		name:  "ExternalTrafficGlobal gets no healthCheckNodePort",
		spec:  lb(),
		needs: base,
	}, {
		name:  "LoadBalancer Local with allocateLoadBalancerNodePorts=false still gets one",
		spec:  svc(typ(TypeLoadBalancer), ips("10.0.0.9"), local(), allocLBNodePorts(false)),
		needs: []string{"spec.clusterIPs[0]/IPv4 req:10.0.0.9", "spec.healthCheckNodePort dyn"},
	}, {
		name: "healthCheckNodePort on NodePort Local is forbidden",
		spec: svc(typ(TypeNodePort), local(), hcport(30200)),
		err:  "spec.healthCheckNodePort: Forbidden: may only be set when `type` is 'LoadBalancer' and `externalTrafficPolicy` is 'Local'",
	}, {
		name: "healthCheckNodePort on LoadBalancer Cluster is forbidden",
		spec: lb(hcport(30200)),
		err:  "spec.healthCheckNodePort: Forbidden: may only be set when `type` is 'LoadBalancer' and `externalTrafficPolicy` is 'Local'",
	}, {
		name: "requested healthCheckNodePort out of range",
		spec: lb(local(), hcport(20200)),
		err:  "Internal error occurred: failed to allocate requested HealthCheck NodePort 20200: provided port is not in the valid range. The range of valid ports is 30000-32767",
	}, {
		name: "requested healthCheckNodePort equal to a nodePort",
		spec: lb(local(), hcport(30080)),
		err:  "Internal error occurred: failed to allocate requested HealthCheck NodePort 30080: provided port is already allocated",
	}, {
		name: "NegativeHealthCheckNodePort",
		spec: lb(local(), hcport(-1)),
		err:  "spec.healthCheckNodePort: Invalid value: -1: must be between 1 and 65535, inclusive",
	}})
}
