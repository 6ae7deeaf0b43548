package service

import (
	"fmt"
	"net/netip"
	"slices"
)

// clusterIPs defaults ipFamilyPolicy and ipFamilies (initIPFamilyFields),
// validates them against the network and the stored service, and adds the
// clusterIP Needs.
func (p *planner) clusterIPs() error {
	s, old := p.svc, p.old
	if s.Type == TypeExternalName {
		return nil
	}
	// A PreferDualStack service whose IP fields did not change is left
	// alone, even if the network gained or lost a family.
	if matchingPreferDualStack(s, old) {
		p.keepIPs()
		return nil
	}
	if el := p.initIPFamilyFields(); len(el) > 0 {
		return el
	}
	if old != nil && old.Type != TypeExternalName {
		if el := validateUpgradeDowngrade(s, old); len(el) > 0 {
			return el
		}
	}
	if headless(s) {
		return nil
	}
	// Pad clusterIPs with "" (dynamic) to one per family.
	for len(s.ClusterIPs) < len(s.IPFamilies) {
		s.ClusterIPs = append(s.ClusterIPs, "")
	}
	for i, ip := range s.ClusterIPs {
		if ip == "" || p.isHeld(KindClusterIP, s.IPFamilies[i], ip) {
			continue
		}
		if err := checkInRange(p.n.IPRanges[s.IPFamilies[i]], ip); err != nil {
			return Errors{invalid("spec.clusterIPs", s.ClusterIPs, fmt.Sprintf("failed to allocate IP %s: %v", ip, err))}
		}
	}
	for i, ip := range s.ClusterIPs {
		p.need(Need{Field: fmt.Sprintf("spec.clusterIPs[%d]", i), Kind: KindClusterIP, Family: s.IPFamilies[i], Value: ip, Index: i})
	}
	return nil
}

// keepIPs adds the (unchanged) clusterIPs as kept Needs.
func (p *planner) keepIPs() {
	s := p.svc
	if headless(s) {
		return
	}
	for i, ip := range s.ClusterIPs {
		p.need(Need{Field: fmt.Sprintf("spec.clusterIPs[%d]", i), Kind: KindClusterIP, Family: s.IPFamilies[i], Value: ip, Index: i})
	}
}

func matchingPreferDualStack(s, old *Spec) bool {
	return old != nil && s.IPFamilyPolicy == PreferDualStack && old.IPFamilyPolicy == PreferDualStack &&
		old.Type == s.Type && needsClusterIP(s) &&
		slices.Equal(old.ClusterIPs, s.ClusterIPs) && slices.Equal(old.IPFamilies, s.IPFamilies) &&
		(headless(s) || len(s.ClusterIPs) == len(s.IPFamilies)) // a well-formed record
}

func otherFamily(f Family) Family {
	if f == IPv4 {
		return IPv6
	}
	return IPv4
}

func (p *planner) configured(f Family) bool { return slices.Contains(p.n.Families, f) }

// initIPFamilyFields mirrors kube-apiserver's function of that name.
func (p *planner) initIPFamilyFields() Errors {
	s, old := p.svc, p.old
	if s.IPFamilyPolicy == "" {
		switch {
		case old != nil && old.IPFamilyPolicy != "":
			s.IPFamilyPolicy = old.IPFamilyPolicy
		case headless(s) && !*s.HasSelector:
			s.IPFamilyPolicy = RequireDualStack
		default:
			s.IPFamilyPolicy = SingleStack
		}
	}
	if el := validateClusterIPsRelated(s); len(el) > 0 {
		return el
	}

	var el Errors
	if old != nil && old.Type != TypeExternalName {
		if s.IPFamilyPolicy == SingleStack {
			// Setting SingleStack with unchanged fields is clear intent to
			// downgrade; clusterIPs[0] is immutable, so it is safe to keep.
			if slices.Equal(old.ClusterIPs, s.ClusterIPs) && len(s.ClusterIPs) > 1 {
				s.ClusterIPs = s.ClusterIPs[:1]
			}
			if slices.Equal(old.IPFamilies, s.IPFamilies) && len(s.IPFamilies) > 1 {
				s.IPFamilies = s.IPFamilies[:1]
			}
		} else {
			if len(s.ClusterIPs) != 0 && len(s.ClusterIPs) < len(old.ClusterIPs) {
				el = append(el, invalid("spec.ipFamilyPolicy", s.IPFamilyPolicy, "must be 'SingleStack' to release the secondary cluster IP"))
			}
			if len(s.IPFamilies) != 0 && len(s.IPFamilies) < len(old.IPFamilies) {
				el = append(el, invalid("spec.ipFamilyPolicy", s.IPFamilyPolicy, "must be 'SingleStack' to release the secondary IP family"))
			}
		}
	}
	if s.IPFamilyPolicy == SingleStack {
		if len(s.ClusterIPs) == 2 {
			el = append(el, invalid("spec.ipFamilyPolicy", s.IPFamilyPolicy, "must be 'RequireDualStack' or 'PreferDualStack' when multiple cluster IPs are specified"))
		}
		if len(s.IPFamilies) == 2 {
			el = append(el, invalid("spec.ipFamilyPolicy", s.IPFamilyPolicy, "must be 'RequireDualStack' or 'PreferDualStack' when multiple IP families are specified"))
		}
	}
	// Infer ipFamilies from clusterIPs.
	for i, ip := range s.ClusterIPs {
		if ip == ClusterIPNone {
			break
		}
		if i < len(s.IPFamilies) {
			continue
		}
		f := familyOf(ip)
		if !p.configured(f) {
			el = append(el, invalid(fmt.Sprintf("spec.clusterIPs[%d]", i), s.ClusterIPs, fmt.Sprintf("%s is not configured on this cluster", f)))
		} else {
			s.IPFamilies = append(s.IPFamilies, f)
		}
	}
	if len(el) > 0 {
		return el
	}

	// Headless and selectorless: any families go, even unconfigured ones.
	if headless(s) && !*s.HasSelector {
		if len(s.IPFamilies) == 0 {
			s.IPFamilies = []Family{p.n.Families[0]}
		}
		if len(s.IPFamilies) < 2 && s.IPFamilyPolicy != SingleStack {
			s.IPFamilies = append(s.IPFamilies, otherFamily(s.IPFamilies[0]))
		}
		return nil
	}

	if s.IPFamilyPolicy == RequireDualStack && len(p.n.Families) < 2 {
		el = append(el, invalid("spec.ipFamilyPolicy", s.IPFamilyPolicy, "this cluster is not configured for dual-stack services"))
	}
	for i, f := range s.IPFamilies {
		if !p.configured(f) {
			el = append(el, invalid(fmt.Sprintf("spec.ipFamilies[%d]", i), f, "not configured on this cluster"))
		}
	}
	if len(el) > 0 {
		return el
	}
	if len(s.IPFamilies) == 0 {
		s.IPFamilies = []Family{p.n.Families[0]}
	}
	if s.IPFamilyPolicy != SingleStack && len(s.IPFamilies) == 1 && len(p.n.Families) == 2 {
		s.IPFamilies = append(s.IPFamilies, otherFamily(s.IPFamilies[0]))
	}
	return nil
}

// validateClusterIPsRelated mirrors the checks of Kubernetes'
// ValidateServiceClusterIPsRelatedFields that concern allocation.
func validateClusterIPsRelated(s *Spec) Errors {
	var el Errors
	seen := map[Family]bool{}
	for i, f := range s.IPFamilies {
		field := fmt.Sprintf("spec.ipFamilies[%d]", i)
		if f != IPv4 && f != IPv6 {
			el = append(el, notSupported(field, f, string(IPv4), string(IPv6)))
		}
		if seen[f] {
			el = append(el, FieldError{Field: field, Code: CodeDuplicate, Value: render(f)})
		}
		seen[f] = true
	}
	switch s.IPFamilyPolicy {
	case SingleStack, PreferDualStack, RequireDualStack:
	default:
		el = append(el, notSupported("spec.ipFamilyPolicy", s.IPFamilyPolicy, PreferDualStack, RequireDualStack, SingleStack))
	}
	bad := false
	for i, ip := range s.ClusterIPs {
		if i == 0 && ip == ClusterIPNone {
			if len(s.ClusterIPs) > 1 {
				bad = true
				el = append(el, invalid("spec.clusterIPs", s.ClusterIPs, "'None' must be the first and only value"))
			}
			continue
		}
		if _, err := netip.ParseAddr(ip); err != nil || ip == "" {
			bad = true
			el = append(el, invalid(fmt.Sprintf("spec.clusterIPs[%d]", i), ip, "must be a valid IP address, (e.g. 10.9.8.7 or 2001:db8::ffff)"))
		}
	}
	if len(s.ClusterIPs) > 2 {
		el = append(el, invalid("spec.clusterIPs", s.ClusterIPs, "may only hold up to 2 values"))
	}
	if bad {
		return el
	}
	if len(s.ClusterIPs) == 2 && familyOf(s.ClusterIPs[0]) == familyOf(s.ClusterIPs[1]) {
		el = append(el, invalid("spec.clusterIPs", s.ClusterIPs, "may specify no more than one IP for each IP family"))
	}
	if !headless(s) {
		for i, ip := range s.ClusterIPs {
			if i >= len(s.IPFamilies) {
				break
			}
			if f := s.IPFamilies[i]; (f == IPv4 || f == IPv6) && familyOf(ip) != f {
				el = append(el, invalid(fmt.Sprintf("spec.clusterIPs[%d]", i), ip, fmt.Sprintf("expected an %s value as indicated by `ipFamilies[%d]`", f, i)))
			}
		}
	}
	return el
}

// validateUpgradeDowngrade mirrors Kubernetes' update validation of
// clusterIPs and ipFamilies: the primary may never change, a secondary may
// be added, or removed with SingleStack.
func validateUpgradeDowngrade(s, old *Spec) Errors {
	var el Errors
	if headless(s) && headless(old) {
		return nil
	}
	check := func(field string, oldV, newV []string, what string) {
		switch {
		case len(oldV) == len(newV):
			for i := range oldV {
				if oldV[i] != newV[i] {
					el = append(el, invalid(fmt.Sprintf("%s[%d]", field, i), newV, "may not change once set"))
				}
			}
		case len(oldV) > len(newV):
			if len(newV) == 0 {
				el = append(el, invalid(field+"[0]", newV, "primary "+what+" can not be unset"))
			} else if newV[0] != oldV[0] {
				el = append(el, invalid(field+"[0]", newV, "may not change once set"))
			}
			if len(newV) == 1 && s.IPFamilyPolicy != SingleStack {
				el = append(el, invalid(field+"[0]", newV, "`ipFamilyPolicy` must be set to 'SingleStack' when releasing the secondary "+what))
			}
		default:
			if len(oldV) > 0 && newV[0] != oldV[0] {
				el = append(el, invalid(field+"[0]", newV, "may not change once set"))
			}
		}
	}
	check("spec.clusterIPs", old.ClusterIPs, s.ClusterIPs, "clusterIP")
	of := make([]string, len(old.IPFamilies))
	for i, f := range old.IPFamilies {
		of[i] = string(f)
	}
	nf := make([]string, len(s.IPFamilies))
	for i, f := range s.IPFamilies {
		nf[i] = string(f)
	}
	check("spec.ipFamilies", of, nf, "ipFamily")
	return el
}
