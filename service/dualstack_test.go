package service

import "testing"

// Mirrors TestCreateInitIPFields: defaulting and validation of ipFamilies
// and ipFamilyPolicy on single- and dual-stack networks.
func TestCreateInitIPFields(t *testing.T) {
	v4, v6, v4v6, v6v4 := []Family{IPv4}, []Family{IPv6}, []Family{IPv4, IPv6}, []Family{IPv6, IPv4}
	ip0v4, ip0v6 := "spec.clusterIPs[0]/IPv4 dyn", "spec.clusterIPs[0]/IPv6 dyn"
	ip1v4, ip1v6 := "spec.clusterIPs[1]/IPv4 dyn", "spec.clusterIPs[1]/IPv6 dyn"
	notDual := `spec.ipFamilyPolicy: Invalid value: "RequireDualStack": this cluster is not configured for dual-stack services`
	runPlanCases(t, []planCase{
		// singlestack:v4
		{name: "singlestack:v4/Type:ClusterIP_Policy:unset_Families:unset", net: v4, spec: svc(),
			needs: []string{ip0v4}, families: v4, policy: SingleStack},
		{name: "singlestack:v4/Type:ClusterIP_Policy:unset_Families:v4", net: v4, spec: svc(fams(IPv4)),
			needs: []string{ip0v4}, families: v4, policy: SingleStack},
		{name: "singlestack:v4/Type:ClusterIP_Policy:unset_Families:v6", net: v4, spec: svc(fams(IPv6)),
			err: `spec.ipFamilies[0]: Invalid value: "IPv6": not configured on this cluster`},
		{name: "singlestack:v4/Type:ClusterIP_Policy:unset_Families:v4v6", net: v4, spec: svc(fams(IPv4, IPv6)),
			err: `spec.ipFamilyPolicy: Invalid value: "SingleStack": must be 'RequireDualStack' or 'PreferDualStack' when multiple IP families are specified`},
		{name: "singlestack:v4/Type:ClusterIP_Policy:PreferDualStack_Families:unset", net: v4, spec: svc(policy(PreferDualStack)),
			needs: []string{ip0v4}, families: v4, policy: PreferDualStack},
		{name: "singlestack:v4/Type:ClusterIP_Policy:PreferDualStack_Families:v4v6", net: v4, spec: svc(policy(PreferDualStack), fams(IPv4, IPv6)),
			err: `spec.ipFamilies[1]: Invalid value: "IPv6": not configured on this cluster`},
		{name: "singlestack:v4/Type:ClusterIP_Policy:RequireDualStack_Families:unset", net: v4, spec: svc(policy(RequireDualStack)),
			err: notDual},
		{name: "singlestack:v4/Type:ClusterIP_Policy:RequireDualStack_Families:v4v6", net: v4, spec: svc(policy(RequireDualStack), fams(IPv4, IPv6)),
			err: "[" + notDual + `, spec.ipFamilies[1]: Invalid value: "IPv6": not configured on this cluster]`},
		{name: "singlestack:v4/Type:ClusterIP_Policy:unset_ClusterIPs:v6", net: v4, spec: svc(ips("2000::1")),
			err: `spec.clusterIPs[0]: Invalid value: ["2000::1"]: IPv6 is not configured on this cluster`},
		{name: "singlestack:v4/Type:ClusterIP_Policy:unset_ClusterIPs:v4_Families:v6", net: v4, spec: svc(ips("10.0.0.1"), fams(IPv6)),
			err: "spec.clusterIPs[0]: Invalid value: \"10.0.0.1\": expected an IPv6 value as indicated by `ipFamilies[0]`"},
		{name: "singlestack:v4/Type:ClusterIP_ClusterIPs:junk", net: v4, spec: svc(ips("junk")),
			err: `spec.clusterIPs[0]: Invalid value: "junk": must be a valid IP address, (e.g. 10.9.8.7 or 2001:db8::ffff)`},
		{name: "singlestack:v4/Type:ClusterIP_ClusterIPs:None,v4", net: v4, spec: svc(ips(ClusterIPNone, "10.0.0.1")),
			err: `spec.clusterIPs: Invalid value: ["None","10.0.0.1"]: 'None' must be the first and only value`},
		{name: "singlestack:v4/Type:ClusterIP_Policy:unsupported", net: v4, spec: svc(policy("Dual")),
			err: `spec.ipFamilyPolicy: Unsupported value: "Dual": supported values: "PreferDualStack", "RequireDualStack", "SingleStack"`},
		{name: "singlestack:v4/Headless_Selectorless_Policy:unset_Families:unset", net: v4, spec: svc(ips(ClusterIPNone), selectorless()),
			needs: nil, families: v4v6, policy: RequireDualStack},
		{name: "singlestack:v4/Headless_Policy:unset_Families:unset", net: v4, spec: svc(ips(ClusterIPNone)),
			needs: nil, families: v4, policy: SingleStack},
		{name: "singlestack:v4/Headless_Policy:RequireDualStack_Families:unset", net: v4, spec: svc(ips(ClusterIPNone), policy(RequireDualStack)),
			err: notDual},

		// singlestack:v6
		{name: "singlestack:v6/Type:ClusterIP_Policy:unset_Families:unset", net: v6, spec: svc(),
			needs: []string{ip0v6}, families: v6, policy: SingleStack},
		{name: "singlestack:v6/Type:NodePort_Policy:PreferDualStack_Families:unset", net: v6, spec: svc(typ(TypeNodePort), policy(PreferDualStack)),
			needs: []string{ip0v6, "spec.ports[0].nodePort dyn"}, families: v6, policy: PreferDualStack},

		// dualstack:v4v6
		{name: "dualstack:v4v6/Type:ClusterIP_Policy:unset_Families:unset", net: v4v6, spec: svc(),
			needs: []string{ip0v4}, families: v4, policy: SingleStack},
		{name: "dualstack:v4v6/Type:ClusterIP_Policy:unset_Families:v6", net: v4v6, spec: svc(fams(IPv6)),
			needs: []string{ip0v6}, families: v6, policy: SingleStack},
		{name: "dualstack:v4v6/Type:ClusterIP_Policy:PreferDualStack_Families:unset", net: v4v6, spec: svc(policy(PreferDualStack)),
			needs: []string{ip0v4, ip1v6}, families: v4v6, policy: PreferDualStack},
		{name: "dualstack:v4v6/Type:ClusterIP_Policy:RequireDualStack_Families:unset", net: v4v6, spec: svc(policy(RequireDualStack)),
			needs: []string{ip0v4, ip1v6}, families: v4v6, policy: RequireDualStack},
		{name: "dualstack:v4v6/Type:ClusterIP_Policy:RequireDualStack_Families:v6", net: v4v6, spec: svc(policy(RequireDualStack), fams(IPv6)),
			needs: []string{ip0v6, ip1v4}, families: v6v4, policy: RequireDualStack},
		{name: "dualstack:v4v6/Type:ClusterIP_Policy:unset_ClusterIPs:v4v6", net: v4v6, spec: svc(ips("10.0.0.1", "2000::1")),
			err: `spec.ipFamilyPolicy: Invalid value: "SingleStack": must be 'RequireDualStack' or 'PreferDualStack' when multiple cluster IPs are specified`},
		{name: "dualstack:v4v6/Type:ClusterIP_Policy:PreferDualStack_ClusterIPs:v6", net: v4v6, spec: svc(policy(PreferDualStack), ips("2000::1")),
			needs: []string{"spec.clusterIPs[0]/IPv6 req:2000::1", ip1v4}, families: v6v4},
		{name: "dualstack:v4v6/Type:ClusterIP_Policy:RequireDualStack_ClusterIPs:v4v6", net: v4v6, spec: svc(policy(RequireDualStack), ips("10.0.0.1", "2000::1")),
			needs: []string{"spec.clusterIPs[0]/IPv4 req:10.0.0.1", "spec.clusterIPs[1]/IPv6 req:2000::1"}, families: v4v6},
		{name: "dualstack:v4v6/Type:ClusterIP_Policy:RequireDualStack_ClusterIPs:v4v4", net: v4v6, spec: svc(policy(RequireDualStack), ips("10.0.0.1", "10.0.0.2")),
			err: `spec.clusterIPs: Invalid value: ["10.0.0.1","10.0.0.2"]: may specify no more than one IP for each IP family`},
		{name: "dualstack:v4v6/Type:ClusterIP_Policy:RequireDualStack_ClusterIPs:v4,v6-out-of-range", net: v4v6, spec: svc(policy(RequireDualStack), ips("10.0.0.1", "3000::1")),
			err: `spec.clusterIPs: Invalid value: ["10.0.0.1","3000::1"]: failed to allocate IP 3000::1: the provided IP (3000::1) is not in the valid range. The range of valid IPs is 2000::/108`},
		{name: "dualstack:v4v6/Type:ClusterIP_Families:v4v4", net: v4v6, spec: svc(policy(RequireDualStack), fams(IPv4, IPv4)),
			err: `spec.ipFamilies[1]: Duplicate value: "IPv4"`},
		{name: "dualstack:v4v6/Headless_Policy:PreferDualStack", net: v4v6, spec: svc(ips(ClusterIPNone), policy(PreferDualStack)),
			needs: nil, families: v4v6},

		// dualstack:v6v4
		{name: "dualstack:v6v4/Type:ClusterIP_Policy:unset_Families:unset", net: v6v4, spec: svc(),
			needs: []string{ip0v6}, families: v6, policy: SingleStack},
		{name: "dualstack:v6v4/Type:LoadBalancer_Policy:PreferDualStack_Families:unset", net: v6v4, spec: svc(typ(TypeLoadBalancer), policy(PreferDualStack)),
			needs: []string{ip0v6, ip1v4, "spec.ports[0].nodePort dyn"}, families: v6v4},
	})
}
